-- name: health_summary
-- The queue at a glance, of one application (app_id) or of all (app_id NULL): rows per state (the
-- queue's, and the dead letters), what was delivered, failed and dead-lettered in the recent
-- period, the age of the oldest undelivered message and its application, and the end-to-end
-- delivery latency (created to delivered) of the messages delivered in the recent period (named
-- by the tallies of that period). (With app_id NULL the application conditions fold away when
-- the statement is planned: the whole-queue figures cost what they did.)
WITH app_endpoints AS (
    SELECT e.id FROM tidings.endpoints e WHERE e.app_id = %(app_id)s::bigint
),
queued AS (
    SELECT q.message_id, q.status
    FROM tidings.queue q
    WHERE %(app_id)s::bigint IS NULL OR q.endpoint_id IN (SELECT id FROM app_endpoints)
),
recent_deliveries AS (
    SELECT extract(epoch FROM m.delivered_at - m.created_at) * 1000 AS latency_ms
    FROM (SELECT DISTINCT u.message_id
          FROM tidings.attempt_tallies t
          CROSS JOIN LATERAL unnest(t.message_ids, t.endpoint_ids, t.delivered)
              AS u (message_id, endpoint_id, delivered)
          -- A tally is recorded in the transaction that delivers its messages (at the same now()).
          WHERE t.recorded_at > %(since)s AND t.recorded_at <= %(now)s
            AND u.delivered
            AND (%(app_id)s::bigint IS NULL
                 OR u.endpoint_id IN (SELECT id FROM app_endpoints))) d
    JOIN tidings.message_rows m ON m.id = d.message_id
    WHERE m.status = 'delivered'
      AND m.delivered_at > %(since)s AND m.delivered_at <= %(now)s
),
dead AS (
    SELECT m.dead_lettered_at
    FROM tidings.message_rows m
    WHERE m.dead_lettered_at IS NOT NULL AND m.status = 'dead_letter'
      AND (%(app_id)s::bigint IS NULL OR m.endpoint_id IN (SELECT id FROM app_endpoints))
),
oldest AS (
    SELECT m.created_at, m.endpoint_id
    FROM queued q
    JOIN tidings.message_rows m ON m.id = q.message_id
    ORDER BY m.created_at
    LIMIT 1
)
SELECT
    -- Pending counts the messages waiting in FIFO lines too.
    (SELECT count(*) FROM queued WHERE status IN ('pending', 'waiting')) AS pending,
    (SELECT count(*) FROM queued WHERE status = 'failed') AS awaiting_retry,
    (SELECT count(*) FROM queued WHERE status = 'in_flight') AS in_flight,
    (SELECT count(*) FROM dead) AS dead_letters,
    (SELECT count(*) FROM recent_deliveries) AS delivered_recently,
    (SELECT count(*) FROM tidings.attempt_log a
     WHERE a.attempted_at > %(since)s AND a.attempted_at <= %(now)s
       AND (%(app_id)s::bigint IS NULL OR a.endpoint_id IN (SELECT id FROM app_endpoints))
       AND NOT coalesce(a.status_code BETWEEN 200 AND 299, false)) AS failed_attempts_recently,
    (SELECT count(*) FROM dead
     WHERE dead_lettered_at > %(since)s AND dead_lettered_at <= %(now)s) AS dead_lettered_recently,
    (SELECT extract(epoch FROM %(now)s - o.created_at)::double precision FROM oldest o)
        AS oldest_undelivered_age_s,
    (SELECT ap.uid FROM oldest o
     JOIN tidings.endpoints e ON e.id = o.endpoint_id
     JOIN tidings.applications ap ON ap.id = e.app_id) AS oldest_undelivered_application,
    (SELECT avg(latency_ms)::double precision FROM recent_deliveries) AS delivery_mean_ms,
    (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms)::double precision
     FROM recent_deliveries) AS delivery_p95_ms,
    (SELECT count(*) FROM tidings.endpoint_health h
     JOIN tidings.endpoints e ON e.id = h.endpoint_id
     WHERE e.deleted_at IS NULL AND h.state <> 'closed'
       AND (%(app_id)s::bigint IS NULL OR e.app_id = %(app_id)s::bigint)) AS open_circuits,
    (SELECT count(*) FROM tidings.endpoints e
     WHERE e.deleted_at IS NULL AND NOT e.enabled
       AND (%(app_id)s::bigint IS NULL OR e.app_id = %(app_id)s::bigint)) AS disabled_endpoints;

-- name: application_figures
-- Per application that has undelivered messages or dead letters (of the applications named in
-- uids, or of all when uids is NULL): how many are pending, awaiting a retry, in flight and dead,
-- and the age of its oldest undelivered message. By uid.
WITH counted AS (
    SELECT e.app_id,
           count(*) FILTER (WHERE q.status IN ('pending', 'waiting')) AS pending,
           count(*) FILTER (WHERE q.status = 'failed') AS awaiting_retry,
           count(*) FILTER (WHERE q.status = 'in_flight') AS in_flight,
           0 AS dead_letters,
           min(m.created_at) AS oldest_at
    FROM tidings.queue q
    JOIN tidings.message_rows m ON m.id = q.message_id
    JOIN tidings.endpoints e ON e.id = q.endpoint_id
    GROUP BY e.app_id
    UNION ALL
    SELECT e.app_id, 0, 0, 0, count(*), NULL
    FROM tidings.message_rows m
    JOIN tidings.endpoints e ON e.id = m.endpoint_id
    WHERE m.dead_lettered_at IS NOT NULL AND m.status = 'dead_letter'
    GROUP BY e.app_id
),
per_app AS (
    SELECT c.app_id, sum(c.pending) AS pending, sum(c.awaiting_retry) AS awaiting_retry,
           sum(c.in_flight) AS in_flight, sum(c.dead_letters) AS dead_letters,
           min(c.oldest_at) AS oldest_at
    FROM counted c
    GROUP BY c.app_id
)
SELECT a.uid AS app_uid, p.pending, p.awaiting_retry, p.in_flight, p.dead_letters,
       extract(epoch FROM %(now)s - p.oldest_at)::double precision AS oldest_undelivered_age_s
FROM per_app p
JOIN tidings.applications a ON a.id = p.app_id
WHERE %(uids)s::text[] IS NULL OR a.uid = ANY (%(uids)s::text[])
ORDER BY a.uid;

-- name: endpoints_needing_attention
-- The endpoints (not deleted, of applications not deleted) that are disabled, whose circuit is not
-- closed, whose p95 is above slow_p95_ms with at least min_samples samples, or whose TLS client
-- certificate expires within a week; with their application's uid and that expiry.
SELECT e.id AS endpoint_id, e.url, e.enabled, e.disabled_reason, h.state::text AS state,
       h.opened_at, h.p95_ms, h.sample_count, a.uid AS app_uid,
       c.not_after AS client_certificate_not_after
FROM tidings.endpoints e
JOIN tidings.endpoint_health h ON h.endpoint_id = e.id
JOIN tidings.applications a ON a.id = e.app_id
LEFT JOIN tidings.endpoint_credentials c
    ON c.endpoint_id = e.id AND c.kind = 'tls_client_certificate'
WHERE e.deleted_at IS NULL AND a.deleted_at IS NULL
  AND (NOT e.enabled
       OR h.state <> 'closed'
       OR (h.p95_ms > %(slow_p95_ms)s AND h.sample_count >= %(min_samples)s)
       OR c.not_after < now() + interval '7 days')
ORDER BY e.id;

-- name: count_dead_lettered_between
-- How many messages were dead-lettered in (since, now], per application (by uid, largest first).
SELECT a.uid AS app_uid, count(*) AS dead_lettered
FROM tidings.message_rows m
JOIN tidings.endpoints e ON e.id = m.endpoint_id
JOIN tidings.applications a ON a.id = e.app_id
WHERE m.dead_lettered_at > %(since)s AND m.dead_lettered_at <= %(now)s
GROUP BY a.uid
ORDER BY count(*) DESC, a.uid;

-- name: track_failing_streaks
-- Marks when each endpoint's current run of failures began (its first failed attempt after its
-- last success, or its last failure when those attempts were pruned) and clears the mark of
-- endpoints that succeeded since.
UPDATE tidings.endpoint_health h
SET failing_since = CASE
        WHEN h.last_failure_at > coalesce(h.last_success_at, '-infinity') THEN
            coalesce((SELECT min(a.attempted_at)
                      FROM tidings.attempt_log a
                      WHERE a.endpoint_id = h.endpoint_id
                        AND a.attempted_at > coalesce(h.last_success_at, '-infinity')),
                     h.last_failure_at)
    END
WHERE (h.failing_since IS NULL AND h.last_failure_at > coalesce(h.last_success_at, '-infinity'))
   OR (h.failing_since IS NOT NULL AND h.last_success_at >= h.failing_since);

-- name: disable_failing_endpoints
-- Disables the enabled endpoints that have been failing without a single success since
-- failing_before, and returns them; records the operational event endpoint.disabled (reason
-- failing) of each in the same statement.
WITH disabled AS (
    UPDATE tidings.endpoints e
    SET enabled = false,
        disabled_reason = %(reason)s,
        disabled_at = %(now)s,
        updated_at = now()
    FROM tidings.endpoint_health h
    WHERE h.endpoint_id = e.id
      AND e.enabled
      AND e.deleted_at IS NULL
      AND h.failing_since <= %(failing_before)s
      AND coalesce(h.last_success_at, '-infinity') < h.failing_since
    RETURNING e.id, e.app_id, e.url, e.disabled_reason, h.failing_since
),
reported AS (
    SELECT tidings.emit_lifecycle_v1(jsonb_agg(jsonb_build_object(
               'event_type', 'endpoint.disabled',
               'event_id', 'ep_' || d.id || '.disabled.' || extract(epoch FROM %(now)s::timestamptz)::numeric,
               'application_id', a.id, 'application_uid', a.uid,
               'endpoint_id', d.id, 'endpoint_url', d.url,
               'data', jsonb_build_object(
                   'reason', 'failing', 'detail', d.disabled_reason,
                   'disabled_at', tidings.lifecycle_time(%(now)s::timestamptz),
                   'failing_since', tidings.lifecycle_time(d.failing_since))))) AS events
    FROM disabled d JOIN tidings.applications a ON a.id = d.app_id
)
SELECT d.id, d.url, d.failing_since FROM disabled d, reported;

-- name: retire_endpoints_of_deleted_applications
-- Disables the endpoints still enabled in applications marked deleted: what a deletion whose
-- second step failed (a lost connection, a statement timeout behind a long transaction) left
-- undone. Reads the applications without locking them. The next statement of the same run
-- dead-letters their messages.
UPDATE tidings.endpoints e
SET enabled = false,
    disabled_reason = 'application deleted',
    disabled_at = now(),
    updated_at = now()
FROM tidings.applications a
WHERE a.id = e.app_id
  AND a.deleted_at IS NOT NULL
  AND e.enabled
  AND e.deleted_at IS NULL
RETURNING e.id;

-- name: dead_letter_unreachable_messages
-- Dead-letters up to batch_size undelivered messages of deleted or disabled endpoints, with the
-- reason ("endpoint deleted", "endpoint disabled: 410 Gone"), so every message still ends
-- delivered or dead-lettered and can be replayed once its endpoint is enabled again. Catches
-- what a disabling path left behind: messages held back from a sender, and those a producer's
-- transaction committed after the endpoint was deleted. Rows a sender holds under a live lease
-- are left to it (the circuit gate holds them back at once), and so are queued messages another
-- transaction holds.
WITH chosen AS (
    SELECT q.message_id AS id, e.deleted_at, e.disabled_reason
    FROM tidings.endpoints e
    JOIN tidings.queue q ON q.endpoint_id = e.id
    WHERE (e.deleted_at IS NOT NULL OR NOT e.enabled)
      AND (q.status <> 'in_flight' OR q.next_attempt_at <= now())
    LIMIT %(batch_size)s
    FOR UPDATE OF q SKIP LOCKED
),
dequeued AS (
    DELETE FROM tidings.queue q
    USING chosen c
    WHERE q.message_id = c.id
    RETURNING q.message_id
)
UPDATE tidings.message_rows m
SET status = 'dead_letter', dead_lettered_at = now(), dead_letter_reported_at = NULL,
    last_error = CASE WHEN c.deleted_at IS NOT NULL THEN 'endpoint deleted'
                      ELSE 'endpoint disabled: ' || coalesce(c.disabled_reason, 'no reason given')
                 END
FROM dequeued d
JOIN chosen c ON c.id = d.message_id
WHERE m.id = d.message_id
RETURNING m.id;

-- name: report_expiring_certificates
-- Records endpoint.certificate.expiring for every TLS client certificate of a live endpoint (of a
-- live application) that has not expired and expires within one of the notice periods
-- (notice_days; the shortest it is within), named by the certificate's fingerprint and that
-- period: each run finds the same certificates again, and the event ids make them one event
-- each (the idempotency window outlasts the longest period, so no repeat after it either).
-- Returns how many events the run handed on.
SELECT tidings.emit_lifecycle_v1(jsonb_agg(jsonb_build_object(
           'event_type', 'endpoint.certificate.expiring',
           'event_id', 'ep_' || e.id || '.certificate.' || (c.shown ->> 'sha256_fingerprint')
                       || '.' || n.days,
           'application_id', a.id, 'application_uid', a.uid,
           'endpoint_id', e.id, 'endpoint_url', e.url,
           'data', jsonb_build_object(
               'not_after', tidings.lifecycle_time(c.not_after),
               'within_days', n.days,
               'sha256_fingerprint', c.shown ->> 'sha256_fingerprint'))
       ORDER BY e.id)) AS events
FROM tidings.endpoint_credentials c
JOIN tidings.endpoints e ON e.id = c.endpoint_id
JOIN tidings.applications a ON a.id = e.app_id
CROSS JOIN LATERAL (
    SELECT min(d) AS days FROM unnest(%(notice_days)s::integer[]) AS d
    WHERE c.not_after <= %(now)s::timestamptz + d * interval '1 day'
) n
WHERE c.kind = 'tls_client_certificate'
  AND c.not_after > %(now)s::timestamptz
  AND n.days IS NOT NULL
  AND e.deleted_at IS NULL AND a.deleted_at IS NULL;
