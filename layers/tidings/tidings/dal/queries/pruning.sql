-- name: ensure_attempt_partitions
-- Creates the daily partitions of attempts for the coming days that do not exist yet.
SELECT tidings.ensure_attempt_partitions(%(from_day)s, %(days)s, %(lock_timeout_ms)s);

-- name: oldest_attempt_partition
-- The oldest daily partition of attempts whose whole day ends at or before cutoff (NULL: none).
SELECT tidings.oldest_attempt_partition(%(cutoff)s);

-- name: keep_live_attempts
-- Copies to attempts_kept the attempts of kept messages among the next batch_size rows of a daily
-- partition after after_id; returns the rows read, the rows kept and the last id read.
SELECT scanned, kept, last_id
FROM tidings.keep_live_attempts(%(partition)s, %(after_id)s, %(batch_size)s);

-- name: drop_attempt_partition
-- Drops a daily partition of attempts whose kept messages' attempts were copied out, waiting at
-- most lock_timeout_ms for its lock; false when it is not there (any more).
SELECT tidings.drop_attempt_partition(%(partition)s, %(lock_timeout_ms)s);

-- name: prune_default_attempts
-- Deletes up to batch_size attempts older than cutoff from the default partition (the rows that
-- arrived while no daily partition covered their day) whose message is no longer kept.
DELETE FROM tidings.attempts_default
WHERE ctid IN (
    SELECT a.ctid FROM tidings.attempts_default a
    WHERE a.attempted_at < %(cutoff)s
      AND NOT EXISTS (SELECT 1 FROM tidings.messages m WHERE m.id = a.message_id)
    LIMIT %(batch_size)s
);

-- name: prune_finished_messages
-- Deletes up to batch_size messages of one finished status (delivered, or dead_letter) that
-- finished before cutoff, skipping rows another session holds, with their attempts moved aside
-- (attempts_kept), and the events left without any message whose idempotency window (created
-- before events_cutoff) is over; returns how many messages and events went. A dead letter the
-- scheduled report has not named yet is kept, however old, until a report has. (The status
-- arrives as a literal, so the planner folds the CASE to the one timestamp column and uses that
-- status's partial index.)
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
history_gone AS (
    DELETE FROM tidings.attempts_kept k
    WHERE k.message_id IN (SELECT id FROM gone)
),
orphaned AS (
    DELETE FROM tidings.events ev
    WHERE ev.id IN (SELECT event_ref FROM gone)
      AND ev.created_at < %(events_cutoff)s
      AND NOT EXISTS (SELECT 1 FROM tidings.messages other
                      WHERE other.event_ref = ev.id
                        AND other.id NOT IN (SELECT id FROM gone))
    RETURNING ev.id
)
SELECT (SELECT count(*) FROM gone) AS messages, (SELECT count(*) FROM orphaned) AS events;

-- name: prune_orphan_events
-- Deletes up to batch_size events recorded before cutoff (their idempotency window is over) that
-- no message refers to: sent when nothing subscribed, or left when their messages were pruned
-- inside the window. Rows another session holds are skipped. Returns how many went.
WITH doomed AS (
    SELECT ev.id
    FROM tidings.events ev
    WHERE ev.created_at < %(cutoff)s
      AND NOT EXISTS (SELECT 1 FROM tidings.messages m WHERE m.event_ref = ev.id)
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM tidings.events ev
USING doomed d
WHERE ev.id = d.id
  AND NOT EXISTS (SELECT 1 FROM tidings.messages m WHERE m.event_ref = ev.id);
