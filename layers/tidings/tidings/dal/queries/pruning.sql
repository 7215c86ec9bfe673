-- name: ensure_attempt_partitions
-- Creates the daily partitions of attempts for the coming days that do not exist yet.
SELECT tidings.ensure_attempt_partitions(%(from_day)s, %(days)s, %(lock_timeout_ms)s);

-- name: drop_oldest_attempt_partition
-- Drops the oldest daily partition of attempts that ends at or before cutoff; returns its name.
SELECT tidings.drop_oldest_attempt_partition(%(cutoff)s, %(lock_timeout_ms)s);

-- name: prune_default_attempts
-- Deletes up to batch_size attempts older than cutoff from the default partition (the rows that
-- arrived while no daily partition covered their day).
DELETE FROM tidings.attempts_default
WHERE ctid IN (
    SELECT ctid FROM tidings.attempts_default
    WHERE attempted_at < %(cutoff)s
    LIMIT %(batch_size)s
);

-- name: prune_finished_messages
-- Deletes up to batch_size messages of one finished status (delivered, or dead_letter) that
-- finished before cutoff, skipping rows another session holds, and the events left without any
-- message; returns how many of each went. A dead letter the scheduled report has not named yet
-- is kept, however old, until a report has. (The status arrives as a literal, so the planner
-- folds the CASE to the one timestamp column and uses that status's partial index.)
WITH doomed AS (
    SELECT id
    FROM tidings.messages
    WHERE status = %(status)s::tidings.message_status
      AND CASE WHEN %(status)s = 'delivered' THEN delivered_at ELSE dead_lettered_at END
          < %(cutoff)s
      AND (status <> 'dead_letter' OR dead_letter_reported_at IS NOT NULL)
    ORDER BY CASE WHEN %(status)s = 'delivered' THEN delivered_at ELSE dead_lettered_at END
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM tidings.messages m
    USING doomed d
    WHERE m.id = d.id
    RETURNING m.id, m.event_ref
),
orphaned AS (
    DELETE FROM tidings.events ev
    WHERE ev.id IN (SELECT event_ref FROM gone)
      AND NOT EXISTS (SELECT 1 FROM tidings.messages other
                      WHERE other.event_ref = ev.id
                        AND other.id NOT IN (SELECT id FROM gone))
    RETURNING ev.id
)
SELECT (SELECT count(*) FROM gone) AS messages, (SELECT count(*) FROM orphaned) AS events;
