-- name: health_summary
-- The queue at a glance, of one application (app_id) or of all (app_id NULL): rows per state, what
-- was delivered, failed and dead-lettered in the recent period, the age of the oldest undelivered
-- message and its application, and the end-to-end delivery latency (created to delivered) of the
-- messages delivered in the recent period. (With app_id NULL the application conditions fold
-- away when the statement is planned: the whole-queue figures cost what they did.)
WITH app_endpoints AS (
    SELECT e.id FROM tidings.endpoints e WHERE e.app_id = %(app_id)s::bigint
),
scoped AS (
    SELECT m.status, m.created_at, m.delivered_at, m.dead_lettered_at, m.endpoint_id
    FROM tidings.messages m
    WHERE %(app_id)s::bigint IS NULL OR m.endpoint_id IN (SELECT id FROM app_endpoints)
),
recent_deliveries AS (
    SELECT extract(epoch FROM delivered_at - created_at) * 1000 AS latency_ms
    FROM scoped
    WHERE status = 'delivered'
      AND delivered_at > %(since)s AND delivered_at <= %(now)s
),
oldest AS (
    SELECT created_at, endpoint_id
    FROM scoped
    WHERE status IN ('pending', 'waiting', 'failed', 'in_flight')
    ORDER BY created_at
    LIMIT 1
)
SELECT
    -- Pending counts the messages waiting in FIFO lines too.
    (SELECT count(*) FROM scoped WHERE status IN ('pending', 'waiting')) AS pending,
    (SELECT count(*) FROM scoped WHERE status = 'failed') AS awaiting_retry,
    (SELECT count(*) FROM scoped WHERE status = 'in_flight') AS in_flight,
    (SELECT count(*) FROM scoped WHERE status = 'dead_letter') AS dead_letters,
    (SELECT count(*) FROM recent_deliveries) AS delivered_recently,
    (SELECT count(*) FROM tidings.attempts a
     WHERE a.attempted_at > %(since)s AND a.attempted_at <= %(now)s
       AND (%(app_id)s::bigint IS NULL OR a.endpoint_id IN (SELECT id FROM app_endpoints))
       AND NOT coalesce(a.status_code BETWEEN 200 AND 299, false)) AS failed_attempts_recently,
    (SELECT count(*) FROM scoped
     WHERE status = 'dead_letter'
       AND dead_lettered_at > %(since)s AND dead_lettered_at <= %(now)s) AS dead_lettered_recently,
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
SELECT a.uid AS app_uid,
       count(*) FILTER (WHERE m.status IN ('pending', 'waiting')) AS pending,
       count(*) FILTER (WHERE m.status = 'failed') AS awaiting_retry,
       count(*) FILTER (WHERE m.status = 'in_flight') AS in_flight,
       count(*) FILTER (WHERE m.status = 'dead_letter') AS dead_letters,
       extract(epoch FROM %(now)s - min(m.created_at)
                                  FILTER (WHERE m.status <> 'dead_letter'))::double precision
           AS oldest_undelivered_age_s
FROM tidings.messages m
JOIN tidings.endpoints e ON e.id = m.endpoint_id
JOIN tidings.applications a ON a.id = e.app_id
WHERE m.status IN ('pending', 'waiting', 'failed', 'in_flight', 'dead_letter')
  AND (%(uids)s::text[] IS NULL OR a.uid = ANY (%(uids)s::text[]))
GROUP BY a.uid
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
FROM tidings.messages m
JOIN tidings.endpoints e ON e.id = m.endpoint_id
JOIN tidings.applications a ON a.id = e.app_id
WHERE m.status = 'dead_letter' AND m.dead_lettered_at > %(since)s AND m.dead_lettered_at <= %(now)s
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
                      FROM tidings.attempts a
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
-- are left to it (the circuit gate holds them back at once).
UPDATE tidings.messages m
SET status = 'dead_letter', dead_lettered_at = now(), dead_letter_reported_at = NULL,
    lease_token = NULL,
    last_error = CASE WHEN u.deleted_at IS NOT NULL THEN 'endpoint deleted'
                      ELSE 'endpoint disabled: ' || coalesce(u.disabled_reason, 'no reason given')
                 END
FROM (
    SELECT q.id, e.deleted_at, e.disabled_reason
    FROM tidings.endpoints e
    JOIN tidings.messages q ON q.endpoint_id = e.id
    WHERE (e.deleted_at IS NOT NULL OR NOT e.enabled)
      AND q.status IN ('pending', 'waiting', 'failed', 'in_flight')
      AND (q.status <> 'in_flight' OR q.next_attempt_at <= now())
    LIMIT %(batch_size)s
    FOR UPDATE OF q SKIP LOCKED
) u
WHERE m.id = u.id
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
