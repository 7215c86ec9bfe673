-- name: insert_endpoint
-- Creates an endpoint of a live application, with its subscriptions (its health row comes from a
-- trigger), and returns its public columns; nothing when the application is not there. The
-- application is held FOR KEY SHARE until the commit, so a concurrent deletion of it waits for
-- this endpoint and disables it. Its signing secret follows in the same transaction
-- (set_endpoint_secret), encrypted for the id this returns. Its payload format is the one asked
-- for, else its application's default for new endpoints, else the deployment's. A new endpoint
-- has never answered: it is untried (one delivery at a time, in the fast lane, until it answers).
-- The operational event endpoint.created is recorded in the same statement.
-- Its filter comes with the jsonpath predicate it compiles to (both NULL without one).
WITH app AS (
    SELECT a.id, a.uid, a.default_payload_format FROM tidings.applications a
    WHERE a.id = %(app_id)s AND a.deleted_at IS NULL
    FOR KEY SHARE
),
created AS (
    INSERT INTO tidings.endpoints (app_id, url, description, max_attempts, timeout_ms,
                                   rate_limit_per_s, retry_schedule, payload_format,
                                   max_in_flight, filter, filter_path, channels, ordering,
                                   fifo_batch_size, fifo_on_dead_letter)
    SELECT app.id, %(url)s, %(description)s, %(max_attempts)s, %(timeout_ms)s,
           %(rate_limit_per_s)s, %(retry_schedule)s::integer[],
           coalesce(%(payload_format)s::text, app.default_payload_format,
                    %(deployment_payload_format)s::text),
           %(max_in_flight)s, %(filter)s::jsonb, %(filter_path)s::jsonpath,
           %(channels)s::text[], coalesce(%(ordering)s::text, 'none'),
           coalesce(%(fifo_batch_size)s::integer, 1),
           coalesce(%(fifo_on_dead_letter)s::text, 'continue')
    FROM app
    RETURNING id, app_id, url, description, enabled, disabled_reason, disabled_at, max_attempts,
              timeout_ms, rate_limit_per_s, retry_schedule, payload_format, max_in_flight,
              filter, channels, ordering, fifo_batch_size, fifo_on_dead_letter, created_at,
              updated_at
),
subscribed AS (
    INSERT INTO tidings.subscriptions (endpoint_id, app_id, event_type)
    SELECT created.id, created.app_id, t.event_type
    FROM created, unnest(%(event_types)s::text[]) AS t (event_type)
),
reported AS (
    SELECT tidings.emit_lifecycle_v1(jsonb_agg(jsonb_build_object(
               'event_type', 'endpoint.created', 'event_id', 'ep_' || c.id || '.created',
               'application_id', app.id, 'application_uid', app.uid,
               'endpoint_id', c.id, 'endpoint_url', c.url,
               'data', jsonb_build_object('event_types', to_jsonb(%(event_types)s::text[]),
                                          'enabled', c.enabled)))) AS events
    FROM created c, app
)
SELECT c.id, c.url, c.description, c.enabled, c.disabled_reason, c.disabled_at,
       %(event_types)s::text[] AS event_types, c.max_attempts, c.timeout_ms, c.rate_limit_per_s,
       NULL::timestamptz AS previous_secret_expires_at, c.created_at, c.updated_at,
       c.retry_schedule, c.payload_format, c.max_in_flight, c.filter, c.channels,
       c.ordering, c.fifo_batch_size, c.fifo_on_dead_letter, 0 AS paused_lines,
       NULL::jsonb AS credentials,
       false AS slow, true AS untried, NULL::timestamptz AS slow_until
FROM created c, reported

-- name: get_endpoint
-- One endpoint of an application that is not deleted, with its subscribed event types, when the
-- last of its rotated-out secrets stops signing and its speed lane (slow while an attempt of the
-- last hold was slow, until slow_until; as the claim tells it) and the redacted forms of its
-- receiver credentials by kind; never its secrets.
SELECT e.id, e.url, e.description, e.enabled, e.disabled_reason, e.disabled_at,
       coalesce((SELECT array_agg(s.event_type ORDER BY s.event_type)
                 FROM tidings.subscriptions s WHERE s.endpoint_id = e.id), '{}') AS event_types,
       e.max_attempts, e.timeout_ms, e.rate_limit_per_s,
       (SELECT max(s.expires_at) FROM tidings.endpoint_secrets s
        WHERE s.endpoint_id = e.id AND s.expires_at > now()) AS previous_secret_expires_at,
       e.created_at, e.updated_at, e.retry_schedule, e.payload_format,
       e.max_in_flight, e.filter, e.channels,
       e.ordering, e.fifo_batch_size, e.fifo_on_dead_letter,
       (SELECT count(*) FROM tidings.fifo_lines f
        WHERE f.endpoint_id = e.id AND f.paused_at IS NOT NULL)::integer AS paused_lines,
       (SELECT jsonb_object_agg(c.kind, c.shown) FROM tidings.endpoint_credentials c
        WHERE c.endpoint_id = e.id) AS credentials,
       coalesce(h.slow_until > now(), false) AS slow,
       (h.last_success_at IS NULL AND h.last_failure_at IS NULL) AS untried,
       CASE WHEN h.slow_until > now() THEN h.slow_until END AS slow_until
FROM tidings.endpoints e
LEFT JOIN tidings.endpoint_health h ON h.endpoint_id = e.id
WHERE e.id = %(endpoint_id)s AND e.app_id = %(app_id)s AND e.deleted_at IS NULL

-- name: list_endpoints
-- A page of an application's endpoints that are not deleted, by ascending id after the cursor id
-- (0 for the first page), each with its speed lane as get_endpoint; one more row than the page
-- size tells whether another page follows.
SELECT e.id, e.url, e.description, e.enabled, e.disabled_reason, e.disabled_at,
       coalesce((SELECT array_agg(s.event_type ORDER BY s.event_type)
                 FROM tidings.subscriptions s WHERE s.endpoint_id = e.id), '{}') AS event_types,
       e.max_attempts, e.timeout_ms, e.rate_limit_per_s,
       (SELECT max(s.expires_at) FROM tidings.endpoint_secrets s
        WHERE s.endpoint_id = e.id AND s.expires_at > now()) AS previous_secret_expires_at,
       e.created_at, e.updated_at, e.retry_schedule, e.payload_format,
       e.max_in_flight, e.filter, e.channels,
       e.ordering, e.fifo_batch_size, e.fifo_on_dead_letter,
       (SELECT count(*) FROM tidings.fifo_lines f
        WHERE f.endpoint_id = e.id AND f.paused_at IS NOT NULL)::integer AS paused_lines,
       (SELECT jsonb_object_agg(c.kind, c.shown) FROM tidings.endpoint_credentials c
        WHERE c.endpoint_id = e.id) AS credentials,
       coalesce(h.slow_until > now(), false) AS slow,
       (h.last_success_at IS NULL AND h.last_failure_at IS NULL) AS untried,
       CASE WHEN h.slow_until > now() THEN h.slow_until END AS slow_until
FROM tidings.endpoints e
LEFT JOIN tidings.endpoint_health h ON h.endpoint_id = e.id
WHERE e.app_id = %(app_id)s AND e.deleted_at IS NULL AND e.id > %(after_id)s
ORDER BY e.id
LIMIT %(limit)s + 1

-- name: update_endpoint
-- Changes the fields whose set_<field> flag is true (others keep their value; a NULL override
-- means the deployment default) and, when set_event_types, replaces the subscriptions. A filter
-- is set (or removed) with its compiled jsonpath.
-- Re-enabling clears the disabled reason. Returns nothing for a missing or deleted endpoint, or
-- one of another application; else the endpoint as get_endpoint shows it. In the same statement
-- it records the operational events the change makes: endpoint.updated when report_update
-- (anything but enabled changes; changed names the fields), endpoint.enabled or
-- endpoint.disabled (by a person) when enabled flips.
WITH old AS (
    SELECT e.id, e.enabled
    FROM tidings.endpoints e
    WHERE e.id = %(endpoint_id)s AND e.app_id = %(app_id)s AND e.deleted_at IS NULL
    FOR UPDATE
),
changed AS (
    UPDATE tidings.endpoints e SET
        url = CASE WHEN %(set_url)s THEN %(url)s ELSE e.url END,
        description = CASE WHEN %(set_description)s THEN %(description)s ELSE e.description END,
        max_attempts = CASE WHEN %(set_max_attempts)s THEN %(max_attempts)s ELSE e.max_attempts END,
        retry_schedule = CASE WHEN %(set_retry_schedule)s THEN %(retry_schedule)s::integer[]
                              ELSE e.retry_schedule END,
        timeout_ms = CASE WHEN %(set_timeout_ms)s THEN %(timeout_ms)s ELSE e.timeout_ms END,
        rate_limit_per_s = CASE WHEN %(set_rate_limit_per_s)s THEN %(rate_limit_per_s)s
                                ELSE e.rate_limit_per_s END,
        payload_format = CASE WHEN %(set_payload_format)s THEN %(payload_format)s::text
                              ELSE e.payload_format END,
        max_in_flight = CASE WHEN %(set_max_in_flight)s THEN %(max_in_flight)s
                             ELSE e.max_in_flight END,
        filter = CASE WHEN %(set_filter)s THEN %(filter)s::jsonb ELSE e.filter END,
        filter_path = CASE WHEN %(set_filter)s THEN %(filter_path)s::jsonpath
                           ELSE e.filter_path END,
        channels = CASE WHEN %(set_channels)s THEN %(channels)s::text[] ELSE e.channels END,
        ordering = CASE WHEN %(set_ordering)s THEN %(ordering)s::text ELSE e.ordering END,
        fifo_batch_size = CASE WHEN %(set_fifo_batch_size)s THEN %(fifo_batch_size)s::integer
                               ELSE e.fifo_batch_size END,
        fifo_on_dead_letter = CASE WHEN %(set_fifo_on_dead_letter)s
                                   THEN %(fifo_on_dead_letter)s::text
                                   ELSE e.fifo_on_dead_letter END,
        enabled = CASE WHEN %(set_enabled)s THEN %(enabled)s ELSE e.enabled END,
        disabled_reason = CASE
            WHEN NOT %(set_enabled)s OR %(enabled)s = e.enabled THEN e.disabled_reason
            WHEN %(enabled)s THEN NULL
            ELSE 'disabled by an operator' END,
        disabled_at = CASE
            WHEN NOT %(set_enabled)s OR %(enabled)s = e.enabled THEN e.disabled_at
            WHEN %(enabled)s THEN NULL
            ELSE now() END,
        updated_at = now()
    FROM old o
    WHERE e.id = o.id
    RETURNING e.id, e.app_id, e.url, e.description, e.enabled, e.disabled_reason,
              e.disabled_at, e.max_attempts, e.timeout_ms, e.rate_limit_per_s, e.retry_schedule,
              e.payload_format, e.max_in_flight, e.filter, e.channels, e.ordering,
              e.fifo_batch_size, e.fifo_on_dead_letter, e.created_at, e.updated_at,
              o.enabled AS was_enabled
),
reported AS (
    SELECT tidings.emit_lifecycle_v1(jsonb_agg(ev.element)) AS events
    FROM (
        SELECT jsonb_build_object(
                   'event_type', 'endpoint.updated',
                   'event_id', 'ep_' || c.id || '.updated.' || extract(epoch FROM c.updated_at)::numeric,
                   'application_id', a.id, 'application_uid', a.uid,
                   'endpoint_id', c.id, 'endpoint_url', c.url,
                   'data', jsonb_build_object('changed', to_jsonb(%(changed)s::text[]))) AS element
        FROM changed c JOIN tidings.applications a ON a.id = c.app_id
        WHERE %(report_update)s
        UNION ALL
        SELECT jsonb_build_object(
                   'event_type', CASE WHEN c.enabled THEN 'endpoint.enabled'
                                      ELSE 'endpoint.disabled' END,
                   'event_id', 'ep_' || c.id || CASE WHEN c.enabled THEN '.enabled.'
                                                     ELSE '.disabled.' END
                               || extract(epoch FROM c.updated_at)::numeric,
                   'application_id', a.id, 'application_uid', a.uid,
                   'endpoint_id', c.id, 'endpoint_url', c.url,
                   'data', CASE WHEN c.enabled THEN '{}'::jsonb ELSE jsonb_build_object(
                               'reason', 'by_person', 'detail', c.disabled_reason,
                               'disabled_at', tidings.lifecycle_time(c.disabled_at)) END)
        FROM changed c JOIN tidings.applications a ON a.id = c.app_id
        WHERE c.enabled <> c.was_enabled
    ) ev
),
unsubscribed AS (
    DELETE FROM tidings.subscriptions s
    USING changed c
    WHERE %(set_event_types)s AND s.endpoint_id = c.id
      AND s.event_type <> ALL (%(event_types)s::text[])
),
subscribed AS (
    INSERT INTO tidings.subscriptions (endpoint_id, app_id, event_type)
    SELECT c.id, c.app_id, t.event_type
    FROM changed c, unnest(%(event_types)s::text[]) AS t (event_type)
    WHERE %(set_event_types)s
    ON CONFLICT DO NOTHING
)
SELECT c.id, c.url, c.description, c.enabled, c.disabled_reason, c.disabled_at,
       CASE WHEN %(set_event_types)s
            THEN ARRAY(SELECT DISTINCT t FROM unnest(%(event_types)s::text[]) t ORDER BY t)
            ELSE coalesce((SELECT array_agg(s.event_type ORDER BY s.event_type)
                           FROM tidings.subscriptions s WHERE s.endpoint_id = c.id), '{}')
       END AS event_types,
       c.max_attempts, c.timeout_ms, c.rate_limit_per_s,
       (SELECT max(s.expires_at) FROM tidings.endpoint_secrets s
        WHERE s.endpoint_id = c.id AND s.expires_at > now()) AS previous_secret_expires_at,
       c.created_at, c.updated_at, c.retry_schedule, c.payload_format,
       c.max_in_flight, c.filter, c.channels,
       c.ordering, c.fifo_batch_size, c.fifo_on_dead_letter,
       (SELECT count(*) FROM tidings.fifo_lines f
        WHERE f.endpoint_id = c.id AND f.paused_at IS NOT NULL)::integer AS paused_lines,
       (SELECT jsonb_object_agg(k.kind, k.shown) FROM tidings.endpoint_credentials k
        WHERE k.endpoint_id = c.id) AS credentials,
       coalesce(h.slow_until > now(), false) AS slow,
       (h.last_success_at IS NULL AND h.last_failure_at IS NULL) AS untried,
       CASE WHEN h.slow_until > now() THEN h.slow_until END AS slow_until
FROM changed c
CROSS JOIN reported
LEFT JOIN tidings.endpoint_health h ON h.endpoint_id = c.id

-- name: soft_delete_endpoint
-- Marks an endpoint of an application deleted and disabled, keeping its row for the history of
-- its messages. Its undelivered messages become dead letters ("endpoint deleted") in the same
-- statement, so none waits forever for an endpoint that is gone; leaving the queue voids any
-- attempt in flight (its lease with it). Its signing secrets and receiver credentials go: a deleted endpoint never
-- signs or authenticates again. The operational event endpoint.deleted is recorded in the same
-- statement.
WITH deleted AS (
    UPDATE tidings.endpoints
    SET deleted_at = now(), enabled = false, disabled_at = coalesce(disabled_at, now()),
        disabled_reason = 'deleted', updated_at = now()
    WHERE id = %(endpoint_id)s AND app_id = %(app_id)s AND deleted_at IS NULL
    RETURNING id, app_id, url
),
reported AS (
    SELECT tidings.emit_lifecycle_v1(jsonb_agg(jsonb_build_object(
               'event_type', 'endpoint.deleted', 'event_id', 'ep_' || d.id || '.deleted',
               'application_id', a.id, 'application_uid', a.uid,
               'endpoint_id', d.id, 'endpoint_url', d.url, 'data', '{}'::jsonb))) AS events
    FROM deleted d JOIN tidings.applications a ON a.id = d.app_id
),
dequeued AS (
    DELETE FROM tidings.queue q
    USING deleted d
    WHERE q.endpoint_id = d.id
    RETURNING q.message_id
),
abandoned AS (
    UPDATE tidings.message_rows m
    SET status = 'dead_letter', dead_lettered_at = now(), dead_letter_reported_at = NULL,
        last_error = 'endpoint deleted'
    FROM dequeued q
    WHERE m.id = q.message_id
),
forgotten AS (
    DELETE FROM tidings.endpoint_secrets s
    USING deleted d
    WHERE s.endpoint_id = d.id
),
forgotten_credentials AS (
    DELETE FROM tidings.endpoint_credentials c
    USING deleted d
    WHERE c.endpoint_id = d.id
)
SELECT d.id FROM deleted d, reported

-- name: endpoint_health
-- An application's endpoint: its circuit, latency figures and the number of its messages in each
-- status.
SELECT h.endpoint_id, h.state, h.consecutive_failures, h.failure_threshold, h.cooldown_s,
       h.opened_at, h.last_success_at, h.last_failure_at, h.p50_ms, h.p95_ms, h.p99_ms,
       h.sample_count, h.percentiles_at,
       coalesce((SELECT jsonb_object_agg(c.status, c.n)
                 FROM (SELECT q.status, count(*) AS n
                       FROM tidings.queue q
                       WHERE q.endpoint_id = h.endpoint_id
                       GROUP BY q.status
                       UNION ALL
                       SELECT m.status, count(*) AS n
                       FROM tidings.message_rows m
                       WHERE m.endpoint_id = h.endpoint_id
                         AND m.status IN ('delivered', 'dead_letter')
                       GROUP BY m.status) c), '{}') AS counts,
       now() AS db_now
FROM tidings.endpoint_health h
JOIN tidings.endpoints e ON e.id = h.endpoint_id
WHERE h.endpoint_id = %(endpoint_id)s AND e.app_id = %(app_id)s AND e.deleted_at IS NULL

-- name: endpoint_hourly_attempts
-- An application's endpoint's attempts of the last 24 hours by the hour they were recorded in:
-- how many succeeded (a 2xx answer) and how many did not. The minutes the percentiles job has
-- rolled up (tidings.attempt_minutes) up to the minute of its last run, the tallies from that
-- minute on (a few minutes of them; all of the day before the job's first run). Only the hours
-- with attempts; the hours are those of the database's clock, as now() gives it.
WITH since AS (
    SELECT date_trunc('hour', now()) - interval '23 hours' AS day_from,
           greatest(date_trunc('hour', now()) - interval '23 hours',
                    coalesce((SELECT date_trunc('minute', s.rolled_to) FROM tidings.job_state s
                              WHERE s.job = 'percentiles'),
                             '-infinity')) AS tail_from
),
counted AS (
    SELECT m.minute AS at, m.delivered, m.failed
    FROM tidings.attempt_minutes m, since s
    WHERE m.endpoint_id = %(endpoint_id)s
      AND m.minute >= s.day_from AND m.minute < s.tail_from
    UNION ALL
    SELECT t.recorded_at,
           (u.delivered)::integer, (NOT u.delivered)::integer
    FROM tidings.attempt_tallies t
    CROSS JOIN since s
    CROSS JOIN LATERAL unnest(t.endpoint_ids, t.delivered) AS u (endpoint_id, delivered)
    WHERE t.recorded_at >= s.tail_from
      AND u.endpoint_id = %(endpoint_id)s
)
SELECT date_trunc('hour', c.at) AS hour,
       sum(c.delivered)::bigint AS delivered,
       sum(c.failed)::bigint AS failed,
       date_trunc('hour', now()) AS current_hour
FROM counted c
WHERE EXISTS (SELECT 1 FROM tidings.endpoints e
              WHERE e.id = %(endpoint_id)s AND e.app_id = %(app_id)s)
GROUP BY 1
ORDER BY 1

-- name: endpoint_signing_secret
-- The current signing secret of an application's endpoint, sealed (see
-- tidings.endpoint_signing_secret_v1); no row when there is none.
SELECT s.data_key_id, s.ciphertext
FROM tidings.endpoint_signing_secret_v1(%(app_id)s, %(endpoint_id)s) s

-- name: report_secret_rotated
-- Records the operational event endpoint.secret.rotated for an application's endpoint whose
-- secret was just rotated in this transaction (secret_id: the new secret's row, which names the
-- change); never the secret. Returns how many events were recorded.
SELECT tidings.emit_lifecycle_v1(jsonb_agg(jsonb_build_object(
           'event_type', 'endpoint.secret.rotated',
           'event_id', 'ep_' || e.id || '.secret_rotated.' || %(secret_id)s::bigint,
           'application_id', a.id, 'application_uid', a.uid,
           'endpoint_id', e.id, 'endpoint_url', e.url,
           'data', jsonb_build_object(
               'previous_secret_expires_at',
               tidings.lifecycle_time(%(previous_secret_expires_at)s::timestamptz)))))
FROM tidings.endpoints e
JOIN tidings.applications a ON a.id = e.app_id
WHERE e.id = %(endpoint_id)s AND e.app_id = %(app_id)s AND e.deleted_at IS NULL
