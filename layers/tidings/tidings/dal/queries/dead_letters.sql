-- name: dead_letter_stats
-- Per endpoint (with its application's uid), the messages dead-lettered in (since, now], of one
-- application or of all (app_id NULL): how many, the most common error and status code, how many
-- were refused with 401/403 and with 429, the first and last, and the mean number of attempts.
-- Largest first. Reads only: the operator's view, which marks nothing.
SELECT m.endpoint_id, e.url, a.uid AS app_uid,
       count(*) AS dead_letters,
       mode() WITHIN GROUP (ORDER BY m.last_error) AS top_error,
       mode() WITHIN GROUP (ORDER BY m.last_status_code) AS top_status_code,
       count(*) FILTER (WHERE m.last_status_code IN (401, 403)) AS auth_refusals,
       count(*) FILTER (WHERE m.last_status_code = 429) AS rate_limited,
       min(m.dead_lettered_at) AS first_at,
       max(m.dead_lettered_at) AS last_at,
       avg(m.attempts)::double precision AS mean_attempts
FROM tidings.message_rows m
JOIN tidings.endpoints e ON e.id = m.endpoint_id
JOIN tidings.applications a ON a.id = e.app_id
WHERE m.dead_lettered_at > %(since)s AND m.dead_lettered_at <= %(now)s
  AND (%(app_id)s::bigint IS NULL OR e.app_id = %(app_id)s::bigint)
GROUP BY m.endpoint_id, e.url, a.uid
ORDER BY count(*) DESC, m.endpoint_id;

-- name: claim_dead_letters_for_report
-- Marks up to max_rows unreported dead letters, oldest first, as reported now and returns them
-- per endpoint (with its application's uid), in the shape of dead_letter_stats. Meant to run in the transaction that then
-- publishes the report and commits only once it is out: the claimed rows stay locked until then,
-- so an overlapping run skips them (SKIP LOCKED; it never waits), and a rollback leaves them
-- unreported for the next run. A row taken out of dead_letter after this statement's snapshot
-- is dropped by the lock's recheck of the WHERE clause.
WITH chosen AS (
    SELECT id
    FROM tidings.message_rows
    WHERE dead_lettered_at IS NOT NULL AND status = 'dead_letter'
      AND dead_letter_reported_at IS NULL
    ORDER BY dead_lettered_at, id
    LIMIT %(max_rows)s
    FOR UPDATE SKIP LOCKED
),
claimed AS (
    UPDATE tidings.message_rows m
    SET dead_letter_reported_at = now()
    FROM chosen c
    WHERE m.id = c.id
    RETURNING m.endpoint_id, m.last_error, m.last_status_code, m.dead_lettered_at, m.attempts
)
SELECT c.endpoint_id, e.url, a.uid AS app_uid,
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
JOIN tidings.applications a ON a.id = e.app_id
GROUP BY c.endpoint_id, e.url, a.uid
ORDER BY count(*) DESC, c.endpoint_id;

-- name: count_unreported_dead_letters
-- How many dead letters no report has claimed yet (after a claim in the same transaction: those
-- left for the next run).
SELECT count(*)
FROM tidings.message_rows
WHERE dead_lettered_at IS NOT NULL AND status = 'dead_letter'
  AND dead_letter_reported_at IS NULL;

-- name: dead_letter_ids
-- The ids of an application's dead letters matching every given filter (a NULL filter matches
-- all), in id order: what a replay will requeue, listed up front so that a long replay can show
-- progress.
SELECT m.id
FROM tidings.message_rows m
JOIN tidings.endpoints e ON e.id = m.endpoint_id
WHERE m.dead_lettered_at IS NOT NULL AND m.status = 'dead_letter'
  AND e.app_id = %(app_id)s
  AND (%(endpoint_id)s::bigint IS NULL OR m.endpoint_id = %(endpoint_id)s::bigint)
  AND (%(since)s::timestamptz IS NULL OR m.dead_lettered_at >= %(since)s::timestamptz)
  AND (%(ids)s::bigint[] IS NULL OR m.id = ANY (%(ids)s::bigint[]))
ORDER BY m.id;
