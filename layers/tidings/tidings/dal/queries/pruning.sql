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
-- Deletes up to batch_size attempts older than cutoff from the attempt log's default partition
-- (the rows that arrived while no daily partition covered their day) whose message is no longer
-- kept.
DELETE FROM tidings.attempts_default
WHERE ctid IN (
    SELECT a.ctid FROM tidings.attempts_default a
    WHERE a.attempted_at < %(cutoff)s
      AND NOT EXISTS (SELECT 1 FROM tidings.message_rows m WHERE m.id = a.message_id)
    LIMIT %(batch_size)s
);

-- name: oldest_tally_partition
-- The oldest daily partition of the tallies whose whole day ends at or before cutoff (NULL:
-- none).
SELECT tidings.oldest_tally_partition(%(cutoff)s);

-- name: tally_pruning_progress
-- Where the pruner's last run stopped in a day partition of the tallies (none: NULL or no row).
SELECT details ->> 'partition', details ->> 'after_ctid'
FROM tidings.job_state
WHERE job = 'prune_tallies';

-- name: save_tally_pruning_progress
-- Records that the pruner went through a day partition of the tallies up to a ctid (tallies are
-- only ever inserted into a day partition, so its rows keep their ctids until it is dropped).
INSERT INTO tidings.job_state AS s (job, details)
VALUES ('prune_tallies',
        jsonb_build_object('partition', %(partition)s::text, 'after_ctid', %(after_ctid)s::text))
ON CONFLICT (job) DO UPDATE SET details = excluded.details, updated_at = now();

-- name: prune_tallied_messages
-- Deletes, among the messages that the next tallies of a daily partition (after the ctid
-- after_ctid, until they name batch_size messages) delivered, those still delivered that were
-- delivered before cutoff, with their kept attempts, and the events left without any message
-- whose idempotency window (created before events_cutoff) is over; rows another session holds
-- are left. Returns the messages the tallies read name, the messages and events deleted, the
-- last ctid read, and how many messages were held.
SELECT named, messages, events, last_ctid::text AS last_ctid, held
FROM tidings.prune_tallied_messages(%(partition)s, %(after_ctid)s::tid, %(batch_size)s,
                                    %(cutoff)s, %(events_cutoff)s);

-- name: prune_default_tallies
-- The same for the tallies recorded before cutoff in the tallies' default partition (until they
-- name batch_size messages), which go themselves unless they name a message another session
-- held.
SELECT named, messages, events
FROM tidings.prune_default_tallies(%(batch_size)s, %(cutoff)s, %(events_cutoff)s);

-- name: prune_dead_letters
-- Deletes up to batch_size dead letters dead-lettered before cutoff that the scheduled report
-- has named (a dead letter no report has named yet is kept, however old, until a report has),
-- skipping rows another session holds, with their attempts moved aside (attempts_kept), and the
-- events left without any message whose idempotency window (created before events_cutoff) is
-- over; returns how many messages and events went.
WITH doomed AS (
    SELECT id
    FROM tidings.message_rows
    WHERE dead_lettered_at IS NOT NULL AND status = 'dead_letter'
      AND dead_lettered_at < %(cutoff)s
      AND dead_letter_reported_at IS NOT NULL
    ORDER BY dead_lettered_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM tidings.message_rows m
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
      AND NOT EXISTS (SELECT 1 FROM tidings.message_rows other
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
      AND NOT EXISTS (SELECT 1 FROM tidings.message_rows m WHERE m.event_ref = ev.id)
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
)
DELETE FROM tidings.events ev
USING doomed d
WHERE ev.id = d.id
  AND NOT EXISTS (SELECT 1 FROM tidings.message_rows m WHERE m.event_ref = ev.id);
