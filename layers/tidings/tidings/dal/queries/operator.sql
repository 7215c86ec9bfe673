-- name: endpoint_progress
-- Per endpoint (of one application, or of all when app_id is NULL, with its application's uid):
-- its messages by status (the queue's, then the settled ones), its circuit state, its speed lane
-- (as the claim tells it: slow while it is slow or has never answered) and the cap on its rows
-- in flight (as the claim applies it: the given slow-lane or untried cap, its own when lower,
-- else its own), and the p95 latency and count of its attempts since a given time, computed
-- live from the tallies (the demo's table, tidings status).
WITH queued AS (
    SELECT q.endpoint_id,
           count(*) FILTER (WHERE q.status IN ('pending', 'waiting')) AS pending,
           count(*) FILTER (WHERE q.status = 'in_flight') AS in_flight,
           count(*) FILTER (WHERE q.status = 'failed') AS retrying,
           count(*) AS total
    FROM tidings.queue q
    GROUP BY q.endpoint_id
),
settled AS (
    SELECT m.endpoint_id,
           count(*) FILTER (WHERE m.status = 'delivered') AS delivered,
           count(*) FILTER (WHERE m.status = 'dead_letter') AS dead_letter
    FROM tidings.message_rows m
    WHERE m.status IN ('delivered', 'dead_letter')
    GROUP BY m.endpoint_id
),
counts AS (
    SELECT e.id AS endpoint_id,
           coalesce(q.total, 0) + coalesce(s.delivered, 0) + coalesce(s.dead_letter, 0) AS total,
           coalesce(q.pending, 0) AS pending, coalesce(q.in_flight, 0) AS in_flight,
           coalesce(q.retrying, 0) AS retrying, coalesce(s.delivered, 0) AS delivered,
           coalesce(s.dead_letter, 0) AS dead_letter
    FROM tidings.endpoints e
    LEFT JOIN queued q ON q.endpoint_id = e.id
    LEFT JOIN settled s ON s.endpoint_id = e.id
),
latency AS (
    SELECT u.endpoint_id,
           count(*) AS attempts,
           percentile_cont(0.95) WITHIN GROUP (ORDER BY u.response_ms) AS p95_ms
    FROM tidings.attempt_tallies t
    CROSS JOIN LATERAL unnest(t.endpoint_ids, t.response_ms) AS u (endpoint_id, response_ms)
    WHERE t.recorded_at >= %(since)s
    GROUP BY u.endpoint_id
)
SELECT e.id, a.uid AS app_uid, e.url, e.description, e.enabled, e.disabled_reason,
       h.state::text AS circuit,
       lane.slow OR lane.untried AS slow_lane,
       CASE WHEN h.slow_until > now() THEN h.slow_until END AS slow_until,
       e.max_in_flight,
       CASE WHEN lane.slow THEN least(e.max_in_flight, %(slow_lane_max_in_flight)s::integer)
            WHEN lane.untried THEN least(e.max_in_flight, %(untried_max_in_flight)s::integer)
            ELSE e.max_in_flight END
           AS in_flight_limit,
       coalesce(c.total, 0) AS total, coalesce(c.pending, 0) AS pending,
       coalesce(c.in_flight, 0) AS in_flight, coalesce(c.retrying, 0) AS retrying,
       coalesce(c.delivered, 0) AS delivered, coalesce(c.dead_letter, 0) AS dead_letter,
       coalesce(l.attempts, 0) AS attempts, l.p95_ms
FROM tidings.endpoints e
JOIN tidings.applications a ON a.id = e.app_id
JOIN tidings.endpoint_health h ON h.endpoint_id = e.id
CROSS JOIN LATERAL (
    SELECT coalesce(h.slow_until > now(), false) AS slow,
           (h.last_success_at IS NULL AND h.last_failure_at IS NULL) AS untried
) lane
LEFT JOIN counts c ON c.endpoint_id = e.id
LEFT JOIN latency l ON l.endpoint_id = e.id
WHERE e.deleted_at IS NULL
  AND (%(app_id)s::bigint IS NULL OR e.app_id = %(app_id)s::bigint)
ORDER BY e.id;

-- name: enqueue_events
-- Records many events at once through tidings.enqueue, the producers' own entry point (each
-- event fanned out to its subscribers, idempotent per event type and id); returns the number of
-- messages created.
SELECT count(*)
FROM unnest(%(event_types)s::text[], %(payloads)s::jsonb[], %(event_ids)s::text[])
    AS e(event_type, payload, event_id)
CROSS JOIN LATERAL tidings.enqueue(e.event_type, e.payload, e.event_id) AS created;

-- name: unsettled_messages
-- Messages not yet delivered nor dead-lettered whose endpoint is still enabled, and in-flight
-- messages, whatever their endpoint: what a run must wait for before it can call its work done.
SELECT count(*) FILTER (WHERE q.status <> 'in_flight' AND e.enabled AND e.deleted_at IS NULL)
       + count(*) FILTER (WHERE q.status = 'in_flight') AS unsettled
FROM tidings.queue q
JOIN tidings.endpoints e ON e.id = q.endpoint_id;
