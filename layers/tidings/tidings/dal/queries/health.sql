-- name: health_summary
-- The queue at a glance: rows per state, what was delivered, failed and dead-lettered in the
-- recent period, the age of the oldest undelivered message, and the end-to-end delivery latency
-- (created to delivered) of the messages delivered in the recent period.
WITH recent_deliveries AS (
    SELECT extract(epoch FROM delivered_at - created_at) * 1000 AS latency_ms
    FROM tidings.messages
    WHERE status = 'delivered'
      AND delivered_at > %(since)s AND delivered_at <= %(now)s
)
SELECT
    (SELECT count(*) FROM tidings.messages WHERE status = 'pending') AS pending,
    (SELECT count(*) FROM tidings.messages WHERE status = 'failed') AS awaiting_retry,
    (SELECT count(*) FROM tidings.messages WHERE status = 'in_flight') AS in_flight,
    (SELECT count(*) FROM tidings.messages WHERE status = 'dead_letter') AS dead_letters,
    (SELECT count(*) FROM recent_deliveries) AS delivered_recently,
    (SELECT count(*) FROM tidings.attempts
     WHERE attempted_at > %(since)s AND attempted_at <= %(now)s
       AND NOT coalesce(status_code BETWEEN 200 AND 299, false)) AS failed_attempts_recently,
    (SELECT count(*) FROM tidings.messages
     WHERE status = 'dead_letter'
       AND dead_lettered_at > %(since)s AND dead_lettered_at <= %(now)s) AS dead_lettered_recently,
    (SELECT extract(epoch FROM %(now)s - min(created_at))::double precision
     FROM tidings.messages
     WHERE status IN ('pending', 'failed', 'in_flight')) AS oldest_undelivered_age_s,
    (SELECT avg(latency_ms)::double precision FROM recent_deliveries) AS delivery_mean_ms,
    (SELECT percentile_cont(0.95) WITHIN GROUP (ORDER BY latency_ms)::double precision
     FROM recent_deliveries) AS delivery_p95_ms,
    (SELECT count(*) FROM tidings.endpoint_health h
     JOIN tidings.endpoints e ON e.id = h.endpoint_id
     WHERE e.deleted_at IS NULL AND h.state <> 'closed') AS open_circuits,
    (SELECT count(*) FROM tidings.endpoints
     WHERE deleted_at IS NULL AND NOT enabled) AS disabled_endpoints;

-- name: endpoints_needing_attention
-- The endpoints (not deleted) that are disabled, whose circuit is not closed, or whose p95 is
-- above slow_p95_ms with at least min_samples samples.
SELECT e.id AS endpoint_id, e.url, e.enabled, e.disabled_reason, h.state::text AS state,
       h.opened_at, h.p95_ms, h.sample_count
FROM tidings.endpoints e
JOIN tidings.endpoint_health h ON h.endpoint_id = e.id
WHERE e.deleted_at IS NULL
  AND (NOT e.enabled
       OR h.state <> 'closed'
       OR (h.p95_ms > %(slow_p95_ms)s AND h.sample_count >= %(min_samples)s))
ORDER BY e.id;

-- name: count_dead_lettered_between
-- How many messages were dead-lettered in (since, now].
SELECT count(*)
FROM tidings.messages
WHERE status = 'dead_letter' AND dead_lettered_at > %(since)s AND dead_lettered_at <= %(now)s;

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
-- failing_before, and returns them.
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
RETURNING e.id, e.url, h.failing_since;

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
      AND q.status IN ('pending', 'failed', 'in_flight')
      AND (q.status <> 'in_flight' OR q.next_attempt_at <= now())
    LIMIT %(batch_size)s
    FOR UPDATE OF q SKIP LOCKED
) u
WHERE m.id = u.id
RETURNING m.id;
