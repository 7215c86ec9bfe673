-- History that lasts as long as the message: attempt partitions are still dropped whole, but the
-- attempts of messages that are still kept (dead letters for 30 days, messages still retrying)
-- are first moved to attempts_kept, where each stays until its message is pruned.

-- The attempts of kept messages whose daily partition was dropped. Same columns as attempts;
-- a row leaves with its message.
CREATE TABLE tidings.attempts_kept (
    id                bigint PRIMARY KEY,
    message_id        bigint NOT NULL,
    endpoint_id       bigint NOT NULL,
    attempt_number    integer NOT NULL,
    attempted_at      timestamptz NOT NULL,
    status_code       integer,
    response_ms       integer,
    error_class       text,
    response_excerpt  text
);
CREATE INDEX attempts_kept_by_message ON tidings.attempts_kept (message_id);

-- The oldest daily partition of attempts whose whole day ends at or before cutoff (NULL: none).
CREATE FUNCTION tidings.oldest_attempt_partition(cutoff timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT c.relname::text
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'tidings.attempts'::regclass
      AND c.relname ~ '^attempts_[0-9]{8}$'
      AND (to_date(substr(c.relname, 10), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff
    ORDER BY c.relname
    LIMIT 1
$$;

-- Copies to attempts_kept the attempts, among the next batch_size of a daily partition after id
-- after_id (in id order), whose message still exists; returns how many rows were read and kept
-- and the last id read. The messages are locked against deletion (KEY SHARE) until the copy
-- commits, so pruning cannot delete one between the check and the copy and leave its attempts
-- behind (it skips rows it cannot lock, and takes them next time). Copying a row twice is a
-- no-op, so a partition whose drop failed can be gone through again.
CREATE FUNCTION tidings.keep_live_attempts(partition text, after_id bigint, batch_size integer)
RETURNS TABLE (scanned integer, kept integer, last_id bigint)
LANGUAGE plpgsql AS $$
BEGIN
    IF partition !~ '^attempts_[0-9]{8}$' THEN
        RAISE EXCEPTION 'tidings.keep_live_attempts: % is not a daily attempt partition', partition
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY EXECUTE format($q$
        WITH batch AS (
            SELECT a.* FROM tidings.%I a
            WHERE a.id > $1
            ORDER BY a.id
            LIMIT $2
        ),
        live AS (
            SELECT b.* FROM batch b
            JOIN tidings.messages m ON m.id = b.message_id
            FOR KEY SHARE OF m
        ),
        copied AS (
            INSERT INTO tidings.attempts_kept (id, message_id, endpoint_id, attempt_number,
                                               attempted_at, status_code, response_ms,
                                               error_class, response_excerpt)
            SELECT l.id, l.message_id, l.endpoint_id, l.attempt_number, l.attempted_at,
                   l.status_code, l.response_ms, l.error_class, l.response_excerpt
            FROM live l
            ON CONFLICT (id) DO NOTHING
            RETURNING 1
        )
        SELECT (SELECT count(*) FROM batch)::integer,
               (SELECT count(*) FROM copied)::integer,
               (SELECT max(b.id) FROM batch b)
    $q$, partition) USING after_id, batch_size;
END $$;

-- Drops one daily partition of attempts (after keep_live_attempts went through it), waiting at
-- most lock_timeout_ms for the moment's exclusive lock on attempts it needs.
CREATE FUNCTION tidings.drop_attempt_partition(partition text, lock_timeout_ms integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF partition !~ '^attempts_[0-9]{8}$' OR NOT EXISTS (
        SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE i.inhparent = 'tidings.attempts'::regclass AND c.relname = partition) THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    EXECUTE format('DROP TABLE tidings.%I', partition);
    RETURN true;
END $$;

-- The drop of earlier releases, still called by their pruner while a deploy replaces it: it now
-- drops a partition only when no message it holds attempts of is kept any more (every message
-- id in it is below the oldest message's), so it can never take a kept message's history.
CREATE OR REPLACE FUNCTION tidings.drop_oldest_attempt_partition(cutoff timestamptz, lock_timeout_ms integer)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    victim text := tidings.oldest_attempt_partition(cutoff);
    newest_message bigint;
BEGIN
    IF victim IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT max(message_id) FROM tidings.%I', victim) INTO newest_message;
    IF newest_message >= (SELECT min(m.id) FROM tidings.messages m) THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    EXECUTE format('DROP TABLE tidings.%I', victim);
    RETURN victim;
END $$;
