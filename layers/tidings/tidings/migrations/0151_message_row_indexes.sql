-- tidings:no-transaction
-- What migration 0150 leaves to be done while deliveries go on, each statement under the
-- migrator's lock timeout and safe to run again.
--
-- A message is a dead letter exactly when it has a dead-lettering time (every path that takes a
-- message out of dead_letter clears it), so that indexes of dead letters can say so without
-- naming the status, which every delivery changes; the check is added without a scan, then
-- validated under a lock that lets writes go on.
UPDATE tidings.message_rows SET dead_lettered_at = NULL
WHERE status <> 'dead_letter' AND dead_lettered_at IS NOT NULL;
ALTER TABLE tidings.message_rows DROP CONSTRAINT IF EXISTS message_rows_dead_letter_time;
ALTER TABLE tidings.message_rows
    ADD CONSTRAINT message_rows_dead_letter_time
    CHECK ((status = 'dead_letter') = (dead_lettered_at IS NOT NULL)) NOT VALID;
ALTER TABLE tidings.message_rows VALIDATE CONSTRAINT message_rows_dead_letter_time;

-- The message rows' indexes hold no column a delivery changes (migration 0150), so a record's
-- update of its message's row is a HOT update. Dead letters are found by their dead-lettering
-- time rather than by their status; the indexes of the queue's states (claimable, in flight,
-- waiting) moved to tidings.queue; delivered messages are pruned through the tallies of the day
-- they were delivered, not by their delivery time. Built and dropped without blocking writes (a
-- build cut short leaves an invalid index, dropped first).
DROP INDEX CONCURRENTLY IF EXISTS tidings.message_rows_dead_letters;
CREATE INDEX CONCURRENTLY message_rows_dead_letters
    ON tidings.message_rows (endpoint_id, dead_lettered_at)
    WHERE dead_lettered_at IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS tidings.message_rows_unreported_dead_letters;
CREATE INDEX CONCURRENTLY message_rows_unreported_dead_letters
    ON tidings.message_rows (dead_lettered_at, id)
    WHERE dead_lettered_at IS NOT NULL AND dead_letter_reported_at IS NULL;
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_claimable;
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_in_flight_by_endpoint;
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_line_waiting;
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_delivered;
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_dead_letters;
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_unreported_dead_letters;
ALTER INDEX IF EXISTS tidings.messages_line_place RENAME TO message_rows_line_place;

-- Tallies for what was recorded before 0150 (as its job_state row says), once: every attempt
-- logged in the last 25 hours (the latency figures and the hourly counts are built again from
-- them: the percentiles job's layout is cleared, so that its next run rebuilds them with these),
-- and every message delivered before 0150, named for its pruning alone (no attempt to count:
-- neither a latency nor a success), ten to a tally as a sender's record writes them. Tallies of
-- days without a partition go to the default one, pruned from there.
WITH marker AS (
    DELETE FROM tidings.job_state
    WHERE job = 'tally_backfill'
    RETURNING (details ->> 'attempts_through')::bigint AS attempts_through
),
recorded AS (
    SELECT a.attempted_at AS at, a.endpoint_id, a.message_id, a.response_ms,
           coalesce(a.status_code BETWEEN 200 AND 299, false) AS delivered
    FROM tidings.attempt_log a
    JOIN marker k ON a.id <= k.attempts_through
    WHERE a.attempted_at >= now() - interval '25 hours'
    UNION ALL
    SELECT m.delivered_at, m.endpoint_id, m.id, NULL::integer, NULL::boolean
    FROM tidings.message_rows m
    CROSS JOIN marker k
    WHERE m.status = 'delivered' AND m.last_attempted_at IS NULL
),
chunked AS (
    SELECT r.*, (row_number() OVER (PARTITION BY date_trunc('minute', r.at)
                                    ORDER BY r.message_id) - 1) / 10 AS chunk
    FROM recorded r
),
tallied AS (
    INSERT INTO tidings.attempt_tallies (recorded_at, endpoint_ids, message_ids, response_ms,
                                         delivered)
    SELECT min(c.at), array_agg(c.endpoint_id ORDER BY c.message_id),
           array_agg(c.message_id ORDER BY c.message_id),
           array_agg(c.response_ms ORDER BY c.message_id),
           array_agg(c.delivered ORDER BY c.message_id)
    FROM chunked c
    GROUP BY date_trunc('minute', c.at), c.chunk
)
UPDATE tidings.job_state s
SET details = '{}'::jsonb
FROM marker
WHERE s.job = 'percentiles';
