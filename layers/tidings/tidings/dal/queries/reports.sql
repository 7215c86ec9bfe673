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

-- name: monitor_checkpoint
-- When the health monitor last completed a run (NULL before its first).
SELECT rolled_to FROM tidings.job_state WHERE job = 'health_monitor';

-- name: save_monitor_checkpoint
-- Records that the health monitor completed a run at checked_at (never moving it backwards).
INSERT INTO tidings.job_state AS s (job, rolled_to) VALUES ('health_monitor', %(checked_at)s)
ON CONFLICT (job) DO UPDATE
SET rolled_to = greatest(s.rolled_to, excluded.rolled_to), updated_at = now();

-- name: firing_alerts
-- The alerts currently firing.
SELECT alert_key, kind, first_fired_at, details
FROM tidings.alerts
WHERE firing
ORDER BY alert_key;

-- name: claim_alert_firing
-- Marks an alert as firing and returns its key only if it was not firing already, so that of
-- overlapping monitor runs exactly one sends it.
INSERT INTO tidings.alerts AS a (alert_key, kind, firing, first_fired_at, last_notified_at,
                                 resolved_at, details)
VALUES (%(alert_key)s, %(kind)s, true, %(now)s, %(now)s, NULL, %(details)s)
ON CONFLICT (alert_key) DO UPDATE
SET kind = excluded.kind,
    firing = true,
    first_fired_at = excluded.first_fired_at,
    last_notified_at = excluded.last_notified_at,
    resolved_at = NULL,
    details = excluded.details
WHERE NOT a.firing
RETURNING a.alert_key;

-- name: claim_alert_resolved
-- Marks a firing alert as resolved and returns its key only if it was firing, so that of
-- overlapping monitor runs exactly one sends the resolution.
UPDATE tidings.alerts
SET firing = false, resolved_at = %(now)s, last_notified_at = %(now)s
WHERE alert_key = %(alert_key)s AND firing
RETURNING alert_key;

-- name: unclaim_alert
-- Puts an alert back to firing or not after its notification could not be published, so that
-- the next run tries again.
UPDATE tidings.alerts
SET firing = %(firing)s,
    resolved_at = CASE WHEN %(firing)s THEN NULL ELSE resolved_at END
WHERE alert_key = %(alert_key)s;

-- name: dead_letter_stats
-- Per endpoint, the messages dead-lettered in (since, now]: how many, the most common error and
-- status code, how many were refused with 401/403 and with 429, the first and last, and the mean
-- number of attempts. Largest first. Reads only: the operator's view, which marks nothing.
SELECT m.endpoint_id, e.url,
       count(*) AS dead_letters,
       mode() WITHIN GROUP (ORDER BY m.last_error) AS top_error,
       mode() WITHIN GROUP (ORDER BY m.last_status_code) AS top_status_code,
       count(*) FILTER (WHERE m.last_status_code IN (401, 403)) AS auth_refusals,
       count(*) FILTER (WHERE m.last_status_code = 429) AS rate_limited,
       min(m.dead_lettered_at) AS first_at,
       max(m.dead_lettered_at) AS last_at,
       avg(m.attempts)::double precision AS mean_attempts
FROM tidings.messages m
JOIN tidings.endpoints e ON e.id = m.endpoint_id
WHERE m.status = 'dead_letter'
  AND m.dead_lettered_at > %(since)s AND m.dead_lettered_at <= %(now)s
GROUP BY m.endpoint_id, e.url
ORDER BY count(*) DESC, m.endpoint_id;

-- name: claim_dead_letters_for_report
-- Marks up to max_rows unreported dead letters, oldest first, as reported now and returns them
-- per endpoint, in the shape of dead_letter_stats. Meant to run in the transaction that then
-- publishes the report and commits only once it is out: the claimed rows stay locked until then,
-- so an overlapping run skips them (SKIP LOCKED; it never waits), and a rollback leaves them
-- unreported for the next run. A row taken out of dead_letter after this statement's snapshot
-- is dropped by the lock's recheck of the WHERE clause.
WITH chosen AS (
    SELECT id
    FROM tidings.messages
    WHERE status = 'dead_letter' AND dead_letter_reported_at IS NULL
    ORDER BY dead_lettered_at, id
    LIMIT %(max_rows)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE tidings.messages m
    SET dead_letter_reported_at = now()
    FROM chosen c
    WHERE m.id = c.id
    RETURNING m.endpoint_id, m.last_error, m.last_status_code, m.dead_lettered_at, m.attempts
)
SELECT c.endpoint_id, e.url,
       count(*) AS dead_letters,
       mode() WITHIN GROUP (ORDER BY c.last_error) AS top_error,
       mode() WITHIN GROUP (ORDER BY c.last_status_code) AS top_status_code,
       count(*) FILTER (WHERE c.last_status_code IN (401, 403)) AS auth_refusals,
       count(*) FILTER (WHERE c.last_status_code = 429) AS rate_limited,
       min(c.dead_lettered_at) AS first_at,
       max(c.dead_lettered_at) AS last_at,
       avg(c.attempts)::double precision AS mean_attempts
FROM claimed c
JOIN tidings.endpoints e ON e.id = c.endpoint_id
GROUP BY c.endpoint_id, e.url
ORDER BY count(*) DESC, c.endpoint_id;

-- name: count_unreported_dead_letters
-- How many dead letters no report has claimed yet (after a claim in the same transaction: those
-- left for the next run).
SELECT count(*)
FROM tidings.messages
WHERE status = 'dead_letter' AND dead_letter_reported_at IS NULL;
