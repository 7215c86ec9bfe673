-- The queue apart from the message history: a delivery writes its message's row once.
--
-- Every message was one row of tidings.messages, and its status and due time sat in the keys
-- and predicates of the claim's partial indexes. So every step of a delivery wrote a new
-- version of a row about 200 bytes wide, and the claim's and the record's, which change an
-- indexed column, wrote every index of the table again: nine index entries and four row
-- versions per delivery, some 1,400 bytes of write-ahead log (bench/statements.py).
--
-- Now a message still to be settled (pending, waiting in a FIFO line, in flight, failed and
-- awaiting a retry) also has a row of tidings.queue: its status, when it is due (or when its
-- lease ends), its lease token and its place in a FIFO line, some 70 bytes. The claim, the
-- begin and the release write only that row; the record deletes it (or, for a retry, moves its
-- due time) and updates the message's row, tidings.message_rows, whose indexes no longer hold
-- any column a delivery changes (migration 0151 drops those that did), so that update is a HOT
-- update: no index entry, and only the changed bytes in the log. The queue's indexes hold what
-- the claim reads: due rows by endpoint and time, and, apart from them, the rows in flight (the
-- claim moves a row from the one to the other, writing one entry besides its primary key's).
--
-- tidings.messages stays what it was to everyone reading it: a view of the message rows with
-- the queue's status, due time and lease for those in it, which takes inserts, updates and
-- deletes (INSTEAD OF triggers, writing a row only if it is still as the statement saw it) and
-- whose rows lock as their message rows (SELECT ... FOR UPDATE). Tidings' own statements read
-- and write the two tables, each writer locking a message's queue row before its message row;
-- the view serves operators' SQL and anything written against the table.
--
-- Locks: tidings.messages and tidings.attempts are renamed (ACCESS EXCLUSIVE, catalog only) and
-- the queue is filled from the live messages (the backlog) in this transaction, which lasts
-- as long as copying the backlog takes. What reads the whole history (the dead-lettering check,
-- the tallies of what was recorded before) is the next migration's, outside a transaction.

ALTER TABLE tidings.messages RENAME TO message_rows;
ALTER TABLE tidings.message_rows RENAME CONSTRAINT messages_pkey TO message_rows_pkey;
ALTER TABLE tidings.message_rows
    RENAME CONSTRAINT messages_event_ref_endpoint_id_key TO message_rows_event_ref_endpoint_id_key;
COMMENT ON TABLE tidings.message_rows IS
    'One row per event and endpoint: what the message is and how it was settled. While it is '
    'to be settled, tidings.queue holds its status, due time and lease; tidings.messages shows '
    'both.';

CREATE TABLE tidings.queue (
    message_id      bigint PRIMARY KEY REFERENCES tidings.message_rows (id),
    endpoint_id     bigint NOT NULL,
    status          tidings.message_status NOT NULL,
    next_attempt_at timestamptz NOT NULL,
    lease_token     uuid,
    -- A FIFO endpoint's message: its line and place there (as its message row has them).
    line_key        text,
    line_seq        bigint,
    CONSTRAINT queue_live_status CHECK (status IN ('pending', 'failed', 'in_flight', 'waiting')),
    CONSTRAINT queue_in_flight_leased CHECK (status <> 'in_flight' OR lease_token IS NOT NULL),
    CONSTRAINT queue_waiting_in_a_line CHECK (status <> 'waiting' OR line_key IS NOT NULL)
) WITH (fillfactor = 50);
COMMENT ON TABLE tidings.queue IS
    'The messages still to be settled: status, due time (or lease end) and lease token, the '
    'claim''s and the senders'' to write.';

INSERT INTO tidings.queue (message_id, endpoint_id, status, next_attempt_at, lease_token,
                           line_key, line_seq)
SELECT m.id, m.endpoint_id, m.status, m.next_attempt_at, m.lease_token, m.line_key, m.line_seq
FROM tidings.message_rows m
WHERE m.status IN ('pending', 'failed', 'in_flight', 'waiting')
ORDER BY m.id;

-- Due rows, in the order the claim takes them; the rows in flight apart (counted for the caps,
-- their leases ending); the waiting rows of each FIFO line in line order.
CREATE INDEX queue_claimable ON tidings.queue (endpoint_id, next_attempt_at)
    WHERE status IN ('pending', 'failed');
CREATE INDEX queue_in_flight ON tidings.queue (endpoint_id, next_attempt_at)
    WHERE status = 'in_flight';
CREATE INDEX queue_waiting ON tidings.queue (endpoint_id, line_key, line_seq)
    WHERE status = 'waiting';

-- The lease lives in the queue alone.
ALTER TABLE tidings.message_rows DROP CONSTRAINT messages_check;
ALTER TABLE tidings.message_rows DROP COLUMN lease_token;

-- tidings.messages, as the table was: a queued message's status, due time and lease are its
-- queue row's.
CREATE VIEW tidings.messages AS
SELECT r.id, r.event_ref, r.endpoint_id, r.event_type,
       coalesce((SELECT q.status FROM tidings.queue q WHERE q.message_id = r.id), r.status)
           AS status,
       r.attempts, r.max_attempts, r.created_at,
       coalesce((SELECT q.next_attempt_at FROM tidings.queue q WHERE q.message_id = r.id),
                r.next_attempt_at) AS next_attempt_at,
       r.delivered_at, r.dead_lettered_at,
       (SELECT q.lease_token FROM tidings.queue q WHERE q.message_id = r.id) AS lease_token,
       r.last_error, r.last_status_code, r.last_response_ms, r.dead_letter_reported_at,
       r.line_key, r.line_seq, r.line_batch_through
FROM tidings.message_rows r;
ALTER VIEW tidings.messages ALTER COLUMN status SET DEFAULT 'pending';
ALTER VIEW tidings.messages ALTER COLUMN attempts SET DEFAULT 0;
ALTER VIEW tidings.messages ALTER COLUMN created_at SET DEFAULT now();
ALTER VIEW tidings.messages ALTER COLUMN next_attempt_at SET DEFAULT now();
COMMENT ON VIEW tidings.messages IS
    'Every message with its status, due time and lease, as the table of that name had them '
    '(tidings.message_rows with tidings.queue); writable.';

-- Writes through the view go to the two tables: the message row takes everything it holds, and
-- the queue row exists exactly while the status is one of a message to be settled. An update or
-- delete through a view sees the rows of the statement's snapshot and locks none of them, so
-- each row is locked here, its queue row first (the order the delivery path takes them in), and
-- written only if it is still as the statement saw it: a row another transaction changed
-- meanwhile (a sender began or recorded it, the claim leased it) is left as it is now, and the
-- statement does not count it (its RETURNING leaves it out). A message's id never changes.
CREATE FUNCTION tidings.write_messages_view() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_was_live boolean;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO tidings.message_rows (
            event_ref, endpoint_id, event_type, status, attempts, max_attempts, created_at,
            next_attempt_at, delivered_at, dead_lettered_at, last_error, last_status_code,
            last_response_ms, dead_letter_reported_at, line_key, line_seq, line_batch_through)
        VALUES (
            NEW.event_ref, NEW.endpoint_id, NEW.event_type, NEW.status, NEW.attempts,
            NEW.max_attempts, NEW.created_at, NEW.next_attempt_at, NEW.delivered_at,
            NEW.dead_lettered_at, NEW.last_error, NEW.last_status_code, NEW.last_response_ms,
            NEW.dead_letter_reported_at, NEW.line_key, NEW.line_seq, NEW.line_batch_through)
        RETURNING id INTO NEW.id;
    ELSE
        IF TG_OP = 'UPDATE' AND NEW.id IS DISTINCT FROM OLD.id THEN
            RAISE EXCEPTION 'tidings.messages: a message''s id cannot change'
                USING ERRCODE = '0A000';
        END IF;
        v_was_live := OLD.status IN ('pending', 'failed', 'in_flight', 'waiting');
        IF v_was_live THEN
            PERFORM 1 FROM tidings.queue q
            WHERE q.message_id = OLD.id AND q.status = OLD.status
              AND q.next_attempt_at = OLD.next_attempt_at
              AND q.lease_token IS NOT DISTINCT FROM OLD.lease_token
            FOR UPDATE;
            IF NOT FOUND THEN
                RETURN NULL;
            END IF;
        END IF;
        PERFORM 1 FROM tidings.message_rows r
        WHERE r.id = OLD.id AND r.attempts = OLD.attempts
          AND (v_was_live OR r.status = OLD.status)
          AND r.delivered_at IS NOT DISTINCT FROM OLD.delivered_at
          AND r.dead_lettered_at IS NOT DISTINCT FROM OLD.dead_lettered_at
        FOR UPDATE;
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF TG_OP = 'DELETE' THEN
            DELETE FROM tidings.queue q WHERE q.message_id = OLD.id;
            DELETE FROM tidings.message_rows r WHERE r.id = OLD.id;
            RETURN OLD;
        END IF;
        -- A message that stops being delivered keeps its delivering attempt in the log, as a
        -- resend keeps it (its row holds it only while it is delivered).
        IF OLD.status = 'delivered' AND NEW.status <> 'delivered' THEN
            INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number,
                                             attempted_at, status_code, response_ms,
                                             response_excerpt)
            SELECT r.id, r.endpoint_id, r.attempts, r.last_attempted_at, r.last_status_code,
                   r.last_response_ms, r.last_excerpt
            FROM tidings.message_rows r
            WHERE r.id = OLD.id AND r.last_attempted_at IS NOT NULL
            ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING;
        END IF;
        UPDATE tidings.message_rows r
        SET event_ref = NEW.event_ref, endpoint_id = NEW.endpoint_id,
            event_type = NEW.event_type, status = NEW.status, attempts = NEW.attempts,
            max_attempts = NEW.max_attempts, created_at = NEW.created_at,
            next_attempt_at = NEW.next_attempt_at, delivered_at = NEW.delivered_at,
            dead_lettered_at = NEW.dead_lettered_at, last_error = NEW.last_error,
            last_status_code = NEW.last_status_code, last_response_ms = NEW.last_response_ms,
            dead_letter_reported_at = NEW.dead_letter_reported_at, line_key = NEW.line_key,
            line_seq = NEW.line_seq, line_batch_through = NEW.line_batch_through,
            last_attempted_at = CASE WHEN NEW.status = 'delivered' THEN r.last_attempted_at END,
            last_excerpt = CASE WHEN NEW.status = 'delivered' THEN r.last_excerpt END
        WHERE r.id = OLD.id;
    END IF;
    IF NEW.status IN ('pending', 'failed', 'in_flight', 'waiting') THEN
        INSERT INTO tidings.queue AS q (message_id, endpoint_id, status, next_attempt_at,
                                        lease_token, line_key, line_seq)
        VALUES (NEW.id, NEW.endpoint_id, NEW.status, NEW.next_attempt_at, NEW.lease_token,
                NEW.line_key, NEW.line_seq)
        ON CONFLICT (message_id) DO UPDATE
        SET endpoint_id = excluded.endpoint_id, status = excluded.status,
            next_attempt_at = excluded.next_attempt_at, lease_token = excluded.lease_token,
            line_key = excluded.line_key, line_seq = excluded.line_seq;
    ELSE
        DELETE FROM tidings.queue q WHERE q.message_id = NEW.id;
    END IF;
    -- A message that becomes delivered here is tallied as the record tallies one (its pruning,
    -- the status views and the hourly counts find it there), as delivered when it says.
    IF NEW.status = 'delivered'
       AND (TG_OP = 'INSERT' OR OLD.status IS DISTINCT FROM 'delivered') THEN
        INSERT INTO tidings.attempt_tallies (recorded_at, endpoint_ids, message_ids,
                                             response_ms, delivered)
        VALUES (coalesce(NEW.delivered_at, now()), ARRAY[NEW.endpoint_id], ARRAY[NEW.id],
                ARRAY[NEW.last_response_ms], ARRAY[true]);
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER messages_view_writes INSTEAD OF INSERT OR UPDATE OR DELETE ON tidings.messages
    FOR EACH ROW EXECUTE FUNCTION tidings.write_messages_view();


-- A delivered attempt is its message's: the record writes its time, answer and excerpt on the
-- message's row (it writes the row anyway), and the attempt log, tidings.attempt_log (the table
-- tidings.attempts was), keeps the attempts that did not deliver their message. Each of those
-- cost a row and three index entries (some 400 bytes of log), for facts the message row holds
-- as well. tidings.attempts is now a view of both: every attempt, as the table had them.
ALTER TABLE tidings.attempts RENAME TO attempt_log;
ALTER TABLE tidings.attempt_log RENAME CONSTRAINT attempts_pkey TO attempt_log_pkey;
ALTER INDEX tidings.attempts_by_endpoint_time RENAME TO attempt_log_by_endpoint_time;
ALTER INDEX tidings.attempts_by_time RENAME TO attempt_log_by_time;
ALTER INDEX tidings.attempts_once RENAME TO attempt_log_once;
ALTER TABLE tidings.message_rows ADD COLUMN last_attempted_at timestamptz;
ALTER TABLE tidings.message_rows ADD COLUMN last_excerpt text;
COMMENT ON TABLE tidings.attempt_log IS
    'The attempts that did not deliver their message (a delivered attempt is on its message''s '
    'row; tidings.attempts shows both), partitioned by UTC day.';

CREATE VIEW tidings.attempts AS
SELECT a.id, a.message_id, a.endpoint_id, a.attempt_number, a.attempted_at, a.status_code,
       a.response_ms, a.error_class, a.response_excerpt
FROM tidings.attempt_log a
UNION ALL
SELECT NULL::bigint, r.id, r.endpoint_id, r.attempts, r.last_attempted_at, r.last_status_code,
       r.last_response_ms, NULL::text, r.last_excerpt
FROM tidings.message_rows r
WHERE r.status = 'delivered' AND r.last_attempted_at IS NOT NULL;
COMMENT ON VIEW tidings.attempts IS
    'Every attempt: the attempt log, and each delivered message''s delivering attempt.';
ALTER VIEW tidings.attempts ALTER COLUMN attempted_at SET DEFAULT now();

-- An attempt inserted through the view, as into the table it was, goes to the attempt log, and
-- is tallied (for the latency figures, the hourly counts and the pruning) as recorded then.
CREATE FUNCTION tidings.write_attempts_view() RETURNS trigger
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number, attempted_at,
                                     status_code, response_ms, error_class, response_excerpt)
    VALUES (NEW.message_id, NEW.endpoint_id, NEW.attempt_number, NEW.attempted_at,
            NEW.status_code, NEW.response_ms, NEW.error_class, NEW.response_excerpt)
    RETURNING id INTO NEW.id;
    INSERT INTO tidings.attempt_tallies (recorded_at, endpoint_ids, message_ids, response_ms,
                                         delivered)
    VALUES (NEW.attempted_at, ARRAY[NEW.endpoint_id], ARRAY[NEW.message_id],
            ARRAY[NEW.response_ms], ARRAY[coalesce(NEW.status_code BETWEEN 200 AND 299, false)]);
    RETURN NEW;
END $$;

CREATE TRIGGER attempts_view_writes INSTEAD OF INSERT ON tidings.attempts
    FOR EACH ROW EXECUTE FUNCTION tidings.write_attempts_view();

-- One row per record call: each attempt it recorded (its endpoint, its message, its latency,
-- whether its answer was a success; NULL for a message delivered before this migration, which
-- 0151 names for its pruning alone). The latency percentiles and the hourly counts are rolled
-- up from it, and delivered messages are pruned from it (a message delivered in a day leaves
-- with that day's partition, once the delivered retention is over). Some 30 bytes an attempt,
-- with no index but a summary of each partition's times.
CREATE TABLE tidings.attempt_tallies (
    recorded_at  timestamptz NOT NULL DEFAULT now(),
    endpoint_ids bigint[] NOT NULL,
    message_ids  bigint[] NOT NULL,
    response_ms  integer[] NOT NULL,
    delivered    boolean[] NOT NULL
) PARTITION BY RANGE (recorded_at);
CREATE TABLE tidings.attempt_tallies_default PARTITION OF tidings.attempt_tallies DEFAULT;
CREATE INDEX attempt_tallies_by_time ON tidings.attempt_tallies USING brin (recorded_at);
COMMENT ON TABLE tidings.attempt_tallies IS
    'Per record call, every attempt it recorded: endpoint, message, latency, delivered; '
    'partitioned by UTC day.';

-- Per endpoint and minute, the attempts that delivered and those that did not, rolled up by the
-- percentiles job from the tallies (the hourly chart of the last day).
CREATE TABLE tidings.attempt_minutes (
    endpoint_id bigint NOT NULL,
    minute      timestamptz NOT NULL,
    delivered   integer NOT NULL,
    failed      integer NOT NULL,
    PRIMARY KEY (endpoint_id, minute)
);

-- The day partitions of the attempt log and of the tallies, made and dropped alike.
CREATE FUNCTION tidings.create_day_partitions(parent text, from_day date, days integer)
RETURNS integer
LANGUAGE plpgsql
AS $$
DECLARE
    day date;
    created integer := 0;
    name text;
BEGIN
    IF parent NOT IN ('attempt_log', 'attempt_tallies') THEN
        RAISE EXCEPTION 'tidings.create_day_partitions: % has no day partitions', parent
            USING ERRCODE = '22023';
    END IF;
    FOR i IN 0 .. days - 1 LOOP
        day := from_day + i;
        name := tidings.day_partition_name(parent, day);
        IF to_regclass('tidings.' || name) IS NULL THEN
            EXECUTE format(
                'CREATE TABLE tidings.%I PARTITION OF tidings.%I FOR VALUES FROM (%L) TO (%L)',
                name, parent, day::timestamp AT TIME ZONE 'UTC',
                (day + 1)::timestamp AT TIME ZONE 'UTC');
            created := created + 1;
        END IF;
    END LOOP;
    RETURN created;
END $$;

-- The attempt log's partitions keep the names they had (attempts_YYYYMMDD).
CREATE FUNCTION tidings.day_partition_name(parent text, day date) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$
    SELECT CASE parent WHEN 'attempt_log' THEN 'attempts_' ELSE parent || '_' END
           || to_char(day, 'YYYYMMDD')
$$;

CREATE OR REPLACE FUNCTION tidings.create_attempt_partitions(from_day date, days integer)
RETURNS integer
LANGUAGE sql
AS $$
    SELECT tidings.create_day_partitions('attempt_log', from_day, days)
           + tidings.create_day_partitions('attempt_tallies', from_day, days)
$$;

CREATE OR REPLACE FUNCTION tidings.ensure_attempt_partitions(
    from_day date, days integer, lock_timeout_ms integer
) RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    day date;
    created integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    FOR i IN 0 .. days - 1 LOOP
        day := from_day + i;
        -- A day whose rows already went to a default partition gets no partition of its own
        -- (attaching one would move them under a long lock): they leave from the default.
        IF to_regclass('tidings.' || tidings.day_partition_name('attempt_log', day)) IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM tidings.attempts_default
               WHERE attempted_at >= day::timestamp AT TIME ZONE 'UTC'
                 AND attempted_at < (day + 1)::timestamp AT TIME ZONE 'UTC') THEN
            created := created + tidings.create_day_partitions('attempt_log', day, 1);
        END IF;
        IF to_regclass('tidings.' || tidings.day_partition_name('attempt_tallies', day)) IS NULL
           AND NOT EXISTS (
               SELECT 1 FROM tidings.attempt_tallies_default
               WHERE recorded_at >= day::timestamp AT TIME ZONE 'UTC'
                 AND recorded_at < (day + 1)::timestamp AT TIME ZONE 'UTC') THEN
            created := created + tidings.create_day_partitions('attempt_tallies', day, 1);
        END IF;
    END LOOP;
    RETURN created;
END $$;

CREATE OR REPLACE FUNCTION tidings.oldest_attempt_partition(cutoff timestamptz) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT c.relname::text
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'tidings.attempt_log'::regclass
      AND c.relname ~ '^attempts_[0-9]{8}$'
      AND (to_date(substr(c.relname, 10), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff
    ORDER BY c.relname
    LIMIT 1
$$;

CREATE OR REPLACE FUNCTION tidings.drop_attempt_partition(partition text, lock_timeout_ms integer)
RETURNS boolean
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF NOT EXISTS (
        SELECT 1 FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
        WHERE c.relname = partition
          AND ((i.inhparent = 'tidings.attempt_log'::regclass
                AND partition ~ '^attempts_[0-9]{8}$')
               OR (i.inhparent = 'tidings.attempt_tallies'::regclass
                   AND partition ~ '^attempt_tallies_[0-9]{8}$'))) THEN
        RETURN false;
    END IF;
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    EXECUTE format('DROP TABLE tidings.%I', partition);
    RETURN true;
END $$;

-- The oldest day partition of the tallies whose whole day ended at or before cutoff.
CREATE FUNCTION tidings.oldest_tally_partition(cutoff timestamptz) RETURNS text
LANGUAGE sql STABLE
AS $$
    SELECT c.relname::text
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'tidings.attempt_tallies'::regclass
      AND c.relname ~ '^attempt_tallies_[0-9]{8}$'
      AND (to_date(substr(c.relname, 17), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff
    ORDER BY c.relname
    LIMIT 1
$$;

-- Prunes, from the tallies of a day partition after ctid after_ctid that name batch_size
-- messages, the messages they delivered that are still delivered (not resent since) and were
-- delivered before cutoff, with their kept attempts, and the events their deletion leaves
-- without messages whose idempotency window (created before events_cutoff) is over. Rows
-- another session holds are left (the partition is not dropped while any is). Returns the
-- messages named, the messages and events deleted, the last ctid read and the messages held.
CREATE FUNCTION tidings.prune_tallied_messages(
    partition text, after_ctid tid, batch_size integer, cutoff timestamptz,
    events_cutoff timestamptz
) RETURNS TABLE (named integer, messages integer, events integer, last_ctid tid, held integer)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    IF partition !~ '^attempt_tallies_[0-9]{8}$' THEN
        RAISE EXCEPTION 'tidings.prune_tallied_messages: % is not a tally partition', partition
            USING ERRCODE = '22023';
    END IF;
    RETURN QUERY EXECUTE format($q$
        -- The next tallies until they name batch_size messages (a tally names at least one).
        WITH batch AS MATERIALIZED (
            SELECT x.at, x.message_ids, x.delivered
            FROM (
                SELECT t.ctid AS at, t.message_ids, t.delivered,
                       sum(cardinality(t.message_ids)) OVER (ORDER BY t.ctid) AS named
                FROM tidings.%I t
                WHERE t.ctid > $1
                ORDER BY t.ctid
                LIMIT $2
            ) x
            WHERE x.named - cardinality(x.message_ids) < $2
        ),
        named AS (
            SELECT DISTINCT n.id
            FROM batch b
            CROSS JOIN LATERAL unnest(b.message_ids, b.delivered) AS n (id, delivered)
            -- NULL: a message delivered before tallies were written (0151 names it so).
            WHERE n.delivered IS NOT false
        ),
        candidates AS (
            SELECT m.id
            FROM tidings.message_rows m
            WHERE m.id = ANY (ARRAY(SELECT n.id FROM named n))
              AND m.status = 'delivered' AND m.delivered_at < $3
              AND NOT EXISTS (SELECT 1 FROM tidings.queue q WHERE q.message_id = m.id)
        ),
        -- Checked again on the row as it is once locked (a resend since the snapshot makes it
        -- live again).
        doomed AS (
            SELECT m.id
            FROM tidings.message_rows m
            WHERE m.id = ANY (ARRAY(SELECT c.id FROM candidates c))
              AND m.status = 'delivered' AND m.delivered_at < $3
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
              AND ev.created_at < $4
              AND NOT EXISTS (SELECT 1 FROM tidings.message_rows other
                              WHERE other.event_ref = ev.id
                                AND other.id NOT IN (SELECT id FROM gone))
            RETURNING ev.id
        )
        SELECT (SELECT coalesce(sum(cardinality(b.message_ids)), 0) FROM batch b)::integer,
               (SELECT count(*) FROM gone)::integer,
               (SELECT count(*) FROM orphaned)::integer,
               (SELECT max(b.at) FROM batch b),
               ((SELECT count(*) FROM candidates) - (SELECT count(*) FROM doomed))::integer
    $q$, partition) USING after_ctid, batch_size, cutoff, events_cutoff;
END $$;

-- The tallies a default partition took (recorded while no day partition covered their day, the
-- pruner not having run for days): up to batch_size of those recorded before cutoff have their
-- delivered messages pruned as above, skipping those another session holds, and go themselves
-- unless they name one of those.
CREATE FUNCTION tidings.prune_default_tallies(
    batch_size integer, cutoff timestamptz, events_cutoff timestamptz
) RETURNS TABLE (named integer, messages integer, events integer)
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    -- Tallies until they name batch_size messages (a tally names at least one).
    WITH locked AS MATERIALIZED (
        SELECT t.ctid AS at, t.message_ids, t.delivered FROM tidings.attempt_tallies_default t
        WHERE t.recorded_at < cutoff
        LIMIT batch_size
        FOR UPDATE SKIP LOCKED
    ),
    batch AS MATERIALIZED (
        SELECT x.at, x.message_ids, x.delivered
        FROM (
            SELECT l.*, sum(cardinality(l.message_ids)) OVER (ORDER BY l.at) AS named
            FROM locked l
        ) x
        WHERE x.named - cardinality(x.message_ids) < batch_size
    ),
    named AS (
        SELECT DISTINCT n.id
        FROM batch b
        CROSS JOIN LATERAL unnest(b.message_ids, b.delivered) AS n (id, delivered)
        WHERE n.delivered IS NOT false
    ),
    candidates AS (
        SELECT m.id
        FROM tidings.message_rows m
        WHERE m.id = ANY (ARRAY(SELECT n.id FROM named n))
          AND m.status = 'delivered' AND m.delivered_at < cutoff
          AND NOT EXISTS (SELECT 1 FROM tidings.queue q WHERE q.message_id = m.id)
    ),
    -- Checked again on the row as it is once locked (a resend since the snapshot makes it live
    -- again).
    doomed AS (
        SELECT m.id
        FROM tidings.message_rows m
        WHERE m.id = ANY (ARRAY(SELECT c.id FROM candidates c))
          AND m.status = 'delivered' AND m.delivered_at < cutoff
        FOR UPDATE SKIP LOCKED
    ),
    held AS (
        SELECT c.id FROM candidates c
        EXCEPT
        SELECT d.id FROM doomed d
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
          AND ev.created_at < events_cutoff
          AND NOT EXISTS (SELECT 1 FROM tidings.message_rows other
                          WHERE other.event_ref = ev.id
                            AND other.id NOT IN (SELECT id FROM gone))
        RETURNING ev.id
    ),
    tallies_gone AS (
        -- A tally naming a message another session holds stays for the next run.
        DELETE FROM tidings.attempt_tallies_default t
        WHERE t.ctid IN (SELECT b.at FROM batch b)
          AND NOT (t.message_ids && ARRAY(SELECT h.id FROM held h))
    )
    SELECT (SELECT coalesce(sum(cardinality(b.message_ids)), 0) FROM batch b)::integer,
           (SELECT count(*) FROM gone)::integer,
           (SELECT count(*) FROM orphaned)::integer
$$;

-- The tallies' partitions from yesterday on. What was recorded before this migration is tallied
-- by the next (0151, outside a transaction, while deliveries go on): the attempts logged until
-- now, and the messages delivered until now, as this row says.
SELECT tidings.create_day_partitions('attempt_tallies', current_date - 1, 5);
INSERT INTO tidings.job_state (job, details)
VALUES ('tally_backfill',
        jsonb_build_object('attempts_through',
                           (SELECT coalesce(max(a.id), 0) FROM tidings.attempt_log a)));


-- The claim, over the queue (claim_due_v2, 0094, replaced in place: same arguments, same answer).
CREATE OR REPLACE FUNCTION tidings.claim_due_v2(
    p_batch_size            integer,
    p_lease_s               double precision,
    p_probe_lease_s         double precision,
    p_inline_payload_bytes  integer,
    p_max_in_flight         integer,
    p_slow_max_in_flight    integer,
    p_untried_max_in_flight integer
) RETURNS TABLE (message_id bigint, endpoint_id bigint, event_type text, event_id text,
                 attempts integer, lease_token uuid, payload text, slow boolean,
                 untried boolean)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
DECLARE
    v_capacity   integer;
    v_endpoints  bigint[];
    v_quotas     integer[];
    v_tokens     double precision[];
    v_slow       boolean[];
    v_untried    boolean[];
    v_caps       integer[];
    v_picked     bigint[];
BEGIN
    -- 1. Capacity: no more than max_in_flight rows in flight in all (live leases only).
    SELECT least(p_batch_size, greatest(0, p_max_in_flight - count(*)))::integer
    INTO v_capacity
    FROM (
        SELECT 1 FROM tidings.queue q
        WHERE q.status = 'in_flight' AND q.next_attempt_at > now()
        LIMIT p_max_in_flight
    ) leased_now;
    IF v_capacity <= 0 THEN
        RETURN;
    END IF;

    -- 2. Who gets how many rows this round.
    WITH RECURSIVE queued AS (
        -- Loose index scan of queue_claimable (endpoint_id, next_attempt_at): each step jumps to
        -- the first entry after the previous endpoint, which is the next endpoint's earliest due
        -- row, so its due-ness is known from that one probe.
        (SELECT q.endpoint_id, q.next_attempt_at
         FROM tidings.queue q
         WHERE q.status IN ('pending', 'failed')
         ORDER BY q.endpoint_id, q.next_attempt_at
         LIMIT 1)
        UNION ALL
        SELECT nxt.endpoint_id, nxt.next_attempt_at
        FROM queued q
        CROSS JOIN LATERAL (
            SELECT n.endpoint_id, n.next_attempt_at
            FROM tidings.queue n
            WHERE n.status IN ('pending', 'failed')
              AND n.endpoint_id > q.endpoint_id
            ORDER BY n.endpoint_id, n.next_attempt_at
            LIMIT 1
        ) nxt
    ),
    -- The same through queue_in_flight: each endpoint's earliest lease to end, due when it has.
    leased AS (
        (SELECT q.endpoint_id, q.next_attempt_at
         FROM tidings.queue q
         WHERE q.status = 'in_flight'
         ORDER BY q.endpoint_id, q.next_attempt_at
         LIMIT 1)
        UNION ALL
        SELECT nxt.endpoint_id, nxt.next_attempt_at
        FROM leased l
        CROSS JOIN LATERAL (
            SELECT n.endpoint_id, n.next_attempt_at
            FROM tidings.queue n
            WHERE n.status = 'in_flight'
              AND n.endpoint_id > l.endpoint_id
            ORDER BY n.endpoint_id, n.next_attempt_at
            LIMIT 1
        ) nxt
    ),
    due_now AS (
        SELECT q.endpoint_id FROM queued q WHERE q.next_attempt_at <= now()
        UNION
        SELECT l.endpoint_id FROM leased l WHERE l.next_attempt_at <= now()
    ),
    candidate AS (
        -- Due endpoints that are enabled and whose circuit lets something through: closed,
        -- cooled down after opening, or half open with a probe gone stale.
        -- Slow: an attempt of the last slow_until hold was slow. Untried: no attempt ever
        -- answered. A slow or untried endpoint, and one with a limit of its own, has a cap on
        -- its rows in flight.
        -- An endpoint's own cap may only lower the lane's (least() passes over NULLs): an
        -- application's token sets max_in_flight, and must not lift a slow or untried endpoint
        -- past the deployment's cap.
        SELECT s.*,
               CASE WHEN s.slow THEN least(s.max_in_flight, p_slow_max_in_flight)
                    WHEN s.untried THEN least(s.max_in_flight, p_untried_max_in_flight)
                    ELSE s.max_in_flight END AS cap
        FROM (
        SELECT e.id AS endpoint_id, e.app_id, e.rate_limit_per_s, h.state, e.max_in_flight,
               coalesce(h.slow_until > now(), false) AS slow,
               (h.last_success_at IS NULL AND h.last_failure_at IS NULL) AS untried
        FROM due_now q
        JOIN tidings.endpoints e ON e.id = q.endpoint_id
        JOIN tidings.endpoint_health h ON h.endpoint_id = q.endpoint_id
        WHERE e.enabled AND e.deleted_at IS NULL
          AND (h.state = 'closed'
               OR tidings.probe_may_start(h.state, h.opened_at, h.cooldown_s,
                                          h.probe_started_at, p_probe_lease_s))
        ) s
    ),
    bucket AS MATERIALIZED (
        -- The health rows of due rate-limited and capped candidates, read under a lock that the
        -- claim keeps until it commits (SKIP LOCKED: a row another claimer holds is skipped this
        -- round, so two claimers never spend the same tokens nor fill the same cap). The rows in
        -- flight counted here are an estimate (this statement's snapshot may predate another
        -- claimer's commit); step 2b counts again under the lock.
        SELECT h.endpoint_id,
               CASE WHEN c.rate_limit_per_s IS NOT NULL THEN
                   least(greatest(c.rate_limit_per_s, 1),
                         h.rate_tokens
                         + extract(epoch FROM now() - h.rate_refilled_at) * c.rate_limit_per_s)
               END AS tokens,
               CASE WHEN c.cap IS NOT NULL THEN
                   c.cap - tidings.rows_in_flight(c.endpoint_id, c.cap)
               END AS room
        FROM candidate c
        JOIN tidings.endpoint_health h ON h.endpoint_id = c.endpoint_id
        WHERE c.rate_limit_per_s IS NOT NULL OR c.cap IS NOT NULL
        FOR UPDATE OF h SKIP LOCKED
    ),
    eligible AS MATERIALIZED (
        SELECT c.endpoint_id, c.app_id, b.tokens, c.slow, c.untried, c.cap,
               least(CASE WHEN c.state = 'closed' THEN v_capacity ELSE 1 END,
                     CASE WHEN c.rate_limit_per_s IS NULL THEN v_capacity
                          ELSE floor(b.tokens)::integer END,
                     coalesce(b.room, v_capacity)) AS allowance
        FROM candidate c
        LEFT JOIN bucket b ON b.endpoint_id = c.endpoint_id
        WHERE (c.rate_limit_per_s IS NULL AND c.cap IS NULL) OR b.endpoint_id IS NOT NULL
    ),
    app_turn AS MATERIALIZED (
        -- Applications with work in rotation order: those after the cursor first, then the rest
        -- from the start. Equal parts; the first (capacity mod count) get one more, so with more
        -- applications than rows, the first `capacity` get one each.
        SELECT t.app_id, t.turn, t.apps, t.after_app_id,
               v_capacity / t.apps + CASE WHEN t.turn <= v_capacity % t.apps THEN 1 ELSE 0 END
                   AS quota
        FROM (
            SELECT a.app_id, r.after_app_id,
                   row_number() OVER (ORDER BY a.app_id <= r.after_app_id, a.app_id) AS turn,
                   count(*) OVER () AS apps
            FROM (SELECT DISTINCT g.app_id FROM eligible g WHERE g.allowance > 0) a
            CROSS JOIN tidings.claim_rotation r
        ) t
    ),
    endpoint_turn AS MATERIALIZED (
        -- The same within each application, from the application's own cursor, each endpoint's
        -- part capped by its allowance (one row for a probe candidate, the whole tokens of a
        -- rate-limited endpoint). A part left unused is not passed on: the claimer claims again
        -- at once after a round that leased rows.
        SELECT t.endpoint_id, t.app_id, t.tokens, t.slow, t.untried, t.cap, t.turn, t.endpoints,
               t.after_endpoint_id,
               a.quota AS app_quota,
               least(t.allowance,
                     a.quota / t.endpoints
                     + CASE WHEN t.turn <= a.quota % t.endpoints THEN 1 ELSE 0 END) AS quota
        FROM (
            SELECT g.endpoint_id, g.app_id, g.tokens, g.slow, g.untried, g.cap, g.allowance,
                   ap.claim_after_endpoint_id AS after_endpoint_id,
                   row_number() OVER (PARTITION BY g.app_id
                                      ORDER BY g.endpoint_id <= ap.claim_after_endpoint_id,
                                               g.endpoint_id) AS turn,
                   count(*) OVER (PARTITION BY g.app_id) AS endpoints
            FROM eligible g
            JOIN tidings.applications ap ON ap.id = g.app_id
            WHERE g.allowance > 0
        ) t
        JOIN app_turn a ON a.app_id = t.app_id
    ),
    -- The cursors move to the last application / endpoint that got the larger part, when the
    -- parts were unequal (else every one got the same and the order does not matter): one small
    -- write per round at most, plus one per application with more due endpoints than its part.
    -- Read without a lock above; moved only if no other claimer moved it since (compare and
    -- set), and only if its row is free (SKIP LOCKED): a claimer never waits for a cursor, and
    -- a cursor never moves backwards.
    global_moved AS (
        UPDATE tidings.claim_rotation r
        SET after_app_id = a.app_id
        FROM app_turn a
        WHERE a.turn = v_capacity % a.apps
          AND r.after_app_id = a.after_app_id
          AND r.singleton IN (SELECT f.singleton FROM tidings.claim_rotation f
                              FOR NO KEY UPDATE SKIP LOCKED)
    ),
    app_moves AS (
        SELECT t.app_id, t.endpoint_id, t.after_endpoint_id
        FROM endpoint_turn t
        WHERE t.turn = t.app_quota % t.endpoints
    ),
    app_moved AS (
        UPDATE tidings.applications ap
        SET claim_after_endpoint_id = mv.endpoint_id
        FROM app_moves mv
        WHERE ap.id = mv.app_id
          AND ap.claim_after_endpoint_id = mv.after_endpoint_id
          AND ap.id IN (SELECT f.id FROM tidings.applications f
                        WHERE f.id IN (SELECT m2.app_id FROM app_moves m2)
                        FOR NO KEY UPDATE OF f SKIP LOCKED)
    )
    SELECT array_agg(t.endpoint_id), array_agg(t.quota), array_agg(t.tokens),
           array_agg(t.slow), array_agg(t.untried), array_agg(t.cap)
    INTO v_endpoints, v_quotas, v_tokens, v_slow, v_untried, v_caps
    FROM endpoint_turn t
    WHERE t.quota > 0;

    IF v_endpoints IS NULL THEN
        RETURN;
    END IF;

    -- 2b. The capped endpoints' rows in flight, counted again by a statement whose snapshot is
    -- younger than the locks step 2 took: every claimer that leased rows for them before has
    -- committed (it held the lock), and none can lease more until this claim commits, so the
    -- cap holds however many claimers run at once.
    IF EXISTS (SELECT 1 FROM unnest(v_caps) AS c (cap) WHERE c.cap IS NOT NULL) THEN
        SELECT array_agg(CASE WHEN p.cap IS NULL THEN p.quota
                              ELSE least(p.quota,
                                         greatest(0, p.cap - tidings.rows_in_flight(
                                                                 p.endpoint_id, p.cap)))
                         END ORDER BY p.ord)
        INTO v_quotas
        FROM unnest(v_endpoints, v_quotas, v_caps) WITH ORDINALITY
             AS p (endpoint_id, quota, cap, ord);
    END IF;

    -- 3. Each endpoint's part, its message rows locked.
    WITH part AS (
        SELECT p.endpoint_id, p.quota, p.tokens, p.slow, p.untried
        FROM unnest(v_endpoints, v_quotas, v_tokens, v_slow, v_untried)
             AS p (endpoint_id, quota, tokens, slow, untried)
        WHERE p.quota > 0
    ),
    -- Each endpoint's part: first its leases that ended (a sender died, or outran its lease),
    -- then its due rows, oldest first. A message whose queue row another transaction holds
    -- (another claimer, a sender beginning or recording it, a deletion or a sweep) is skipped,
    -- never waited for, and the part is filled from the rows after it. The claim locks nothing
    -- else, so it never waits for anyone: whoever locks a queue row and then its message row
    -- (the order every writer takes) cannot wait for it either.
    expired AS MATERIALIZED (
        SELECT due.message_id, p.endpoint_id
        FROM part p
        CROSS JOIN LATERAL (
            SELECT q.message_id
            FROM tidings.queue q
            WHERE q.endpoint_id = p.endpoint_id
              AND q.status = 'in_flight'
              AND q.next_attempt_at <= now()
            ORDER BY q.next_attempt_at
            LIMIT p.quota
            FOR NO KEY UPDATE SKIP LOCKED
        ) due
    ),
    picked AS MATERIALIZED (
        SELECT due.message_id
        FROM part p
        CROSS JOIN LATERAL (
            SELECT q.message_id
            FROM tidings.queue q
            WHERE q.endpoint_id = p.endpoint_id
              AND q.status IN ('pending', 'failed')
              AND q.next_attempt_at <= now()
            ORDER BY q.next_attempt_at
            LIMIT p.quota - (SELECT count(*) FROM expired x WHERE x.endpoint_id = p.endpoint_id)
            FOR NO KEY UPDATE SKIP LOCKED
        ) due
        UNION ALL
        SELECT x.message_id FROM expired x
    )
    SELECT array_agg(pk.message_id) INTO v_picked FROM picked pk;
    IF v_picked IS NULL THEN
        RETURN;
    END IF;

    -- 4. Leased, and the buckets debited, by a statement whose snapshot is younger than the locks
    -- step 3 took: a row another claimer leased and committed meanwhile shows as in flight and is
    -- left out, as is one a sender began or recorded since; the rows it writes are those step 3
    -- locked.
    RETURN QUERY
    WITH part AS (
        SELECT p.endpoint_id, p.quota, p.tokens, p.slow, p.untried
        FROM unnest(v_endpoints, v_quotas, v_tokens, v_slow, v_untried)
             AS p (endpoint_id, quota, tokens, slow, untried)
        WHERE p.quota > 0
    ),
    -- Leased under a fresh token, still due (a row a sender's begin or record changed since
    -- it was picked is left as it is now).
    leased AS (
        UPDATE tidings.queue q
        SET status = 'in_flight',
            lease_token = gen_random_uuid(),
            next_attempt_at = now() + p_lease_s * interval '1 second'
        WHERE q.message_id = ANY (v_picked)
          AND q.status IN ('pending', 'failed', 'in_flight')
          AND q.next_attempt_at <= now()
        RETURNING q.message_id, q.endpoint_id, q.lease_token
    ),
    spent AS (
        UPDATE tidings.endpoint_health h
        SET rate_tokens = p.tokens - c.taken, rate_refilled_at = now()
        FROM part p
        JOIN (SELECT l.endpoint_id, count(*) AS taken FROM leased l GROUP BY l.endpoint_id) c
            ON c.endpoint_id = p.endpoint_id
        WHERE h.endpoint_id = p.endpoint_id AND p.tokens IS NOT NULL
    )
    SELECT l.message_id, l.endpoint_id, r.event_type, ev.event_id, r.attempts, l.lease_token,
           CASE WHEN octet_length(ev.payload::text) <= p_inline_payload_bytes
                THEN ev.payload::text END,
           pt.slow, pt.untried
    FROM leased l
    JOIN part pt ON pt.endpoint_id = l.endpoint_id
    CROSS JOIN LATERAL (
        SELECT r.event_ref, r.event_type, r.attempts FROM tidings.message_rows r
        WHERE r.id = l.message_id
    ) r
    CROSS JOIN LATERAL (
        SELECT e.event_id, e.payload FROM tidings.events e WHERE e.id = r.event_ref
    ) ev
    ORDER BY l.message_id;
END $$;



-- The begin, over the queue (begin_attempts_v4, 0143, replaced in place). Its statements are
-- planned once per session, for any values (a generic plan, which the plan guards hold to
-- reading by key): the five plans for the values at hand that PostgreSQL makes first otherwise
-- cost about 5 ms each in every new sender environment, and it settles on the generic plan all
-- the same. (The record keeps them: its consequences' plan for the values at hand reads no
-- endpoint when nothing crossed a threshold, which a generic plan cannot know.)
CREATE OR REPLACE FUNCTION tidings.begin_attempts_v4(
    p_ids bigint[],
    p_tokens uuid[],
    p_attempts integer[],
    p_want_payload boolean[],
    p_lease_s double precision,
    p_hold_back_s double precision
) RETURNS TABLE (
    message_id bigint,
    endpoint_id bigint,
    permitted boolean,
    lease_token uuid,
    event_type text,
    event_id text,
    attempts integer,
    max_attempts integer,
    url text,
    timeout_ms integer,
    rate_limit_per_s double precision,
    max_in_flight integer,
    retry_schedule integer[],
    secret_data_keys bigint[],
    secrets bytea[],
    payload text,
    payload_format text,
    event_created_at timestamptz,
    credential_ids bigint[],
    credential_kinds text[],
    credential_data_keys bigint[],
    credentials bytea[],
    line_key text,
    line_seq bigint,
    ordering_key text,
    batch_of bigint,
    fifo_batch_size integer
)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
    SET plan_cache_mode = force_generic_plan
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH request AS (
        SELECT r.id, r.token, r.attempt, r.want_payload
        FROM unnest(p_ids, p_tokens, p_attempts, p_want_payload)
            AS r(id, token, attempt, want_payload)
    ),
    held AS (
        SELECT q.message_id AS id, q.endpoint_id, r.token, r.attempt, r.want_payload,
               -- A rate-limited endpoint's requests spend the tokens the claim takes from its
               -- bucket: a retry that came back through the queue has none.
               q.status = 'failed' AND e.rate_limit_per_s IS NOT NULL AS without_token
        FROM request r
        -- By primary key alone: OFFSET 0 keeps the conditions below out of the look-ups, where
        -- they would let the planner scan a partial index of the queue instead, once per row.
        CROSS JOIN LATERAL (
            SELECT q.message_id, q.endpoint_id, q.status, q.lease_token
            FROM tidings.queue q
            WHERE q.message_id = r.id
            OFFSET 0
        ) q
        CROSS JOIN LATERAL (
            SELECT m.attempts FROM tidings.message_rows m WHERE m.id = r.id OFFSET 0
        ) m
        JOIN tidings.endpoints e ON e.id = q.endpoint_id
        WHERE q.lease_token = r.token AND m.attempts = r.attempt - 1
          AND q.status IN ('in_flight', 'failed')
    ),
    probe AS (
        UPDATE tidings.endpoint_health h
        SET state = 'half_open', probe_token = c.token, probe_started_at = now()
        FROM (SELECT DISTINCT ON (held.endpoint_id) held.endpoint_id, held.token
              FROM held WHERE NOT held.without_token
              ORDER BY held.endpoint_id, held.id) c
        WHERE h.endpoint_id = c.endpoint_id
          AND tidings.probe_may_start(h.state, h.opened_at, h.cooldown_s, h.probe_started_at,
                                      p_lease_s)
        RETURNING h.endpoint_id, h.probe_token
    ),
    verdict AS (
        SELECT held.id, held.endpoint_id, held.token, held.attempt, held.want_payload,
               coalesce(e.enabled AND e.deleted_at IS NULL
                        AND (h.state = 'closed'
                             OR (h.state = 'half_open' AND h.probe_token = held.token)
                             OR p.probe_token = held.token)
                        AND NOT held.without_token,
                        false) AS permitted,
               CASE WHEN h.state = 'open'
                    THEN h.opened_at + h.cooldown_s * interval '1 second' END AS cooldown_ends_at
        FROM held
        JOIN tidings.endpoints e ON e.id = held.endpoint_id
        JOIN tidings.endpoint_health h ON h.endpoint_id = held.endpoint_id
        LEFT JOIN probe p ON p.endpoint_id = held.endpoint_id
    ),
    -- The messages a permitted head of a batching FIFO endpoint carries: the next waiting
    -- ones of its line, up to the batch size, and on a retry only those of its first attempt
    -- (line_batch_through), so every attempt of a batch sends the same messages.
    members AS (
        SELECT v.id AS head_id, w.message_id AS id, w.line_seq
        FROM verdict v
        JOIN tidings.message_rows hm ON hm.id = v.id
        JOIN tidings.endpoints e ON e.id = v.endpoint_id
        CROSS JOIN LATERAL (
            SELECT w.message_id, w.line_seq
            FROM tidings.queue w
            WHERE w.endpoint_id = hm.endpoint_id AND w.line_key = hm.line_key
              AND w.status = 'waiting' AND w.line_seq > hm.line_seq
              AND (hm.line_batch_through IS NULL OR w.line_seq <= hm.line_batch_through)
            ORDER BY w.line_seq
            LIMIT e.fifo_batch_size - 1
        ) w
        WHERE v.permitted AND hm.line_key IS NOT NULL
          AND e.ordering = 'fifo' AND e.fifo_batch_size > 1
    ),
    -- A fresh token: a second copy of the queue message finds the row no longer its own. The
    -- lease is left as it is when it lasts long enough already (the claim's allowance for the
    -- time in the queue makes that the rule), so the update changes no indexed column.
    started AS (
        UPDATE tidings.queue q
        SET status = 'in_flight',
            lease_token = gen_random_uuid(),
            next_attempt_at = greatest(q.next_attempt_at,
                                       now() + p_lease_s * interval '1 second')
        FROM verdict v
        WHERE q.message_id = v.id AND v.permitted
          AND q.lease_token = v.token AND q.status IN ('in_flight', 'failed')
        RETURNING q.message_id AS id, q.endpoint_id, q.lease_token, v.want_payload
    ),
    -- A batching FIFO head fixes, at its first attempt, the last place its batch carries.
    batched AS (
        UPDATE tidings.message_rows m
        SET line_batch_through = coalesce(
                (SELECT max(mb.line_seq) FROM members mb WHERE mb.head_id = m.id), m.line_seq)
        FROM started s
        JOIN tidings.message_rows hm ON hm.id = s.id
        JOIN tidings.endpoints e ON e.id = hm.endpoint_id
        WHERE m.id = s.id AND hm.line_batch_through IS NULL AND hm.line_key IS NOT NULL
          AND e.ordering = 'fifo' AND e.fifo_batch_size > 1
    ),
    held_back AS (
        UPDATE tidings.queue q
        SET status = tidings.unleased_status(m.attempts),
            lease_token = NULL,
            next_attempt_at = greatest(v.cooldown_ends_at,
                                       now() + p_hold_back_s * interval '1 second')
        FROM verdict v
        JOIN tidings.message_rows m ON m.id = v.id
        WHERE q.message_id = v.id AND NOT v.permitted
          AND q.lease_token = v.token AND q.status IN ('in_flight', 'failed')
        RETURNING q.message_id AS id, v.want_payload
    ),
    -- The signing secrets of the endpoints begun, newest first: the current one and those still
    -- in their overlap, encrypted (tidings.endpoint_secrets, migration 0070; the sender
    -- decrypts); and their receiver credentials, encrypted (tidings.endpoint_credentials): NULL
    -- arrays for an endpoint without any, which is all the sender then does about them. Read
    -- once per endpoint, not once per row.
    endpoint_keys AS (
        SELECT d.endpoint_id, sk.data_keys, sk.ciphertexts, cr.ids AS credential_ids,
               cr.kinds AS credential_kinds, cr.data_keys AS credential_data_keys,
               cr.ciphertexts AS credentials
        FROM (SELECT DISTINCT s.endpoint_id FROM started s) d
        LEFT JOIN LATERAL (
            SELECT array_agg(es.data_key_id ORDER BY es.id DESC) AS data_keys,
                   array_agg(es.ciphertext ORDER BY es.id DESC) AS ciphertexts
            FROM tidings.endpoint_secrets es
            WHERE es.endpoint_id = d.endpoint_id
              AND (es.expires_at IS NULL OR es.expires_at > now())
        ) sk ON true
        LEFT JOIN LATERAL (
            SELECT array_agg(ec.id ORDER BY ec.id) AS ids,
                   array_agg(ec.kind ORDER BY ec.id) AS kinds,
                   array_agg(ec.data_key_id ORDER BY ec.id) AS data_keys,
                   array_agg(ec.ciphertext ORDER BY ec.id) AS ciphertexts
            FROM tidings.endpoint_credentials ec
            WHERE ec.endpoint_id = d.endpoint_id
        ) cr ON true
    ),
    -- What the answer reports: the rows begun, with their new lease, and those held back.
    answered AS (
        SELECT s.id, s.lease_token, s.want_payload FROM started s
        UNION ALL
        SELECT hb.id, NULL::uuid, hb.want_payload FROM held_back hb
    )
    SELECT a.id, m.endpoint_id, a.lease_token IS NOT NULL, a.lease_token,
           m.event_type, ev.event_id, m.attempts,
           coalesce(m.max_attempts, e.max_attempts),
           e.url, e.timeout_ms, e.rate_limit_per_s, e.max_in_flight, e.retry_schedule,
           k.data_keys,
           k.ciphertexts,
           CASE WHEN a.want_payload THEN ev.payload::text END,
           e.payload_format, ev.created_at,
           k.credential_ids, k.credential_kinds, k.credential_data_keys, k.credentials,
           m.line_key, m.line_seq, ev.ordering_key, NULL::bigint, e.fifo_batch_size
    FROM answered a
    JOIN tidings.message_rows m ON m.id = a.id
    JOIN tidings.endpoints e ON e.id = m.endpoint_id
    JOIN tidings.events ev ON ev.id = m.event_ref
    -- The permitted rows' secrets and credentials (a row held back gets none).
    LEFT JOIN endpoint_keys k ON k.endpoint_id = m.endpoint_id AND a.lease_token IS NOT NULL
    UNION ALL
    -- The started heads' batch members: sent with their head, under its lease.
    SELECT w.id, w.endpoint_id, true, NULL::uuid, w.event_type, ev.event_id, w.attempts,
           NULL::integer, e.url, e.timeout_ms, e.rate_limit_per_s, e.max_in_flight,
           e.retry_schedule, NULL::bigint[], NULL::bytea[], ev.payload::text, e.payload_format,
           ev.created_at, NULL::bigint[], NULL::text[], NULL::bigint[], NULL::bytea[],
           w.line_key, w.line_seq, ev.ordering_key, mb.head_id, e.fifo_batch_size
    FROM members mb
    JOIN started s ON s.id = mb.head_id
    JOIN tidings.message_rows w ON w.id = mb.id
    JOIN tidings.endpoints e ON e.id = w.endpoint_id
    JOIN tidings.events ev ON ev.id = w.event_ref
    ORDER BY 1;
END $$;



-- The record, over the queue and the message rows (record_outcomes_v1, 0142, replaced in place).
CREATE OR REPLACE FUNCTION tidings.record_outcomes_v1(
    p_outcomes jsonb,
    p_health_endpoint_ids bigint[],
    p_has_success boolean[],
    p_trailing_failures integer[],
    p_last_success_at timestamptz[],
    p_last_failure_at timestamptz[],
    p_disable_ids bigint[],
    p_disable_reasons text[],
    p_base_cooldown_s double precision,
    p_max_cooldown_s double precision,
    OUT written_ids bigint[],
    OUT transitions json,
    OUT disabled_ids bigint[]
)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_lifecycle jsonb;
    -- From statement 1: the endpoints whose attempts this call recorded (on their messages or in
    -- the attempt log), whether the call carried outcomes at all, and the message changes
    -- operational events report.
    v_logged_endpoints bigint[];
    v_any_outcome boolean;
    v_message_changes jsonb;
    v_counted bigint[];
BEGIN
    -- 1. The delivery's own writes. A call whose outcomes all delivered their messages, none of
    -- them carrying a FIFO batch (most calls, by far), makes them through a statement without the
    -- steps of retries, batches and operational events: each step costs its executor start-up and
    -- shutdown on every call even when it has no row to act on. It writes what the full statement
    -- below would write for such a call, by the same guards.
    IF NOT jsonb_path_exists(p_outcomes,
                             '$[*] ? (@.status != "delivered" || @.members != null)') THEN
        WITH outcome AS (
            SELECT *
            FROM jsonb_to_recordset(p_outcomes)
                AS o(id bigint, token uuid, endpoint_id bigint, attempt_number integer,
                     attempted_at timestamptz, status_code integer, response_ms integer,
                     error_class text, excerpt text)
        ),
        settled AS (
            DELETE FROM tidings.queue q
            USING outcome o
            WHERE q.message_id = ANY (ARRAY(SELECT oo.id FROM outcome oo))
              AND q.message_id = o.id
              AND q.lease_token = o.token
              AND q.status::text = 'in_flight'
              AND EXISTS (SELECT 1 FROM tidings.message_rows m
                          WHERE m.id = o.id AND m.attempts = o.attempt_number - 1)
            RETURNING q.message_id
        ),
        written AS (
            UPDATE tidings.message_rows m
            SET status = 'delivered',
                attempts = m.attempts + 1,
                delivered_at = now(),
                dead_lettered_at = NULL,
                dead_letter_reported_at = NULL,
                last_error = o.error_class,
                last_status_code = o.status_code,
                last_response_ms = o.response_ms,
                last_attempted_at = o.attempted_at,
                last_excerpt = o.excerpt
            FROM outcome o
            WHERE m.id = ANY (ARRAY(SELECT s.message_id FROM settled s))
              AND m.id = o.id
            RETURNING m.id, m.endpoint_id, m.line_key
        ),
        delivered_before AS (
            SELECT o.id
            FROM outcome o
            JOIN tidings.message_rows m ON m.id = o.id
            -- Looked up by key (a join alone may be planned as a scan of message_rows).
            WHERE m.id = ANY (ARRAY(SELECT oo.id FROM outcome oo))
              AND NOT EXISTS (SELECT 1 FROM written w WHERE w.id = o.id)
              AND m.status = 'delivered' AND m.attempts = o.attempt_number
              AND m.last_attempted_at = o.attempted_at
        ),
        logged AS (
            INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number,
                                             attempted_at, status_code, response_ms, error_class,
                                             response_excerpt)
            SELECT o.id, o.endpoint_id, o.attempt_number, o.attempted_at,
                   o.status_code, o.response_ms, o.error_class, o.excerpt
            FROM outcome o
            WHERE NOT EXISTS (SELECT 1 FROM written w WHERE w.id = o.id)
              AND NOT EXISTS (SELECT 1 FROM delivered_before d WHERE d.id = o.id)
            ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING
            RETURNING message_id, endpoint_id
        ),
        tallied AS (
            INSERT INTO tidings.attempt_tallies (endpoint_ids, message_ids, response_ms,
                                                 delivered)
            SELECT array_agg(t.endpoint_id), array_agg(t.id), array_agg(t.response_ms),
                   array_agg(coalesce(t.status_code BETWEEN 200 AND 299, false))
            FROM (SELECT w.endpoint_id, w.id, o.response_ms, o.status_code
                  FROM written w JOIN outcome o ON o.id = w.id
                  UNION ALL
                  SELECT l.endpoint_id, l.message_id, o.response_ms, o.status_code
                  FROM logged l JOIN outcome o ON o.id = l.message_id) t
            HAVING count(*) > 0
        ),
        line_noted AS (
            INSERT INTO tidings.fifo_line_moves (endpoint_id, ordering_key)
            SELECT DISTINCT w.endpoint_id, w.line_key
            FROM written w
            WHERE w.line_key IS NOT NULL
        )
        SELECT (SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}')
                FROM (SELECT id FROM written UNION SELECT id FROM delivered_before) w),
               (SELECT coalesce(array_agg(DISTINCT n.endpoint_id), '{}')
                FROM (SELECT w.endpoint_id FROM written w
                      UNION ALL
                      SELECT l.endpoint_id FROM logged l) n),
               EXISTS (SELECT 1 FROM outcome)
        INTO written_ids, v_logged_endpoints, v_any_outcome;
    ELSE
        WITH outcome AS (
            SELECT *
            FROM jsonb_to_recordset(p_outcomes)
                AS o(id bigint, token uuid, endpoint_id bigint, status tidings.message_status,
                     retry_at timestamptz, keep_lease boolean, attempt_number integer,
                     attempted_at timestamptz, status_code integer, response_ms integer,
                     error_class text, excerpt text, members bigint[])
        ),
        -- The outcomes still held by the lease and attempt they were made under: a settled message
        -- leaves the queue, a retried one waits there for its retry (keeping its lease when its
        -- retry travels through the delivery queue). Only in-flight rows carry the lease of an
        -- attempt begun. Their status is compared as text so that the rows are found by their
        -- primary key: an equality on the enum would let the planner read all of queue_in_flight
        -- instead, which its statistics may call nearly empty while it holds every lease of the
        -- moment and the dead entries of those that ended (milliseconds a call under load).
        settled AS (
            DELETE FROM tidings.queue q
            USING outcome o
            WHERE q.message_id = ANY (ARRAY(SELECT oo.id FROM outcome oo))
              AND q.message_id = o.id
              AND q.lease_token = o.token
              AND q.status::text = 'in_flight'
              AND o.status IN ('delivered', 'dead_letter')
              AND EXISTS (SELECT 1 FROM tidings.message_rows m
                          WHERE m.id = o.id AND m.attempts = o.attempt_number - 1)
            RETURNING q.message_id
        ),
        retried AS (
            UPDATE tidings.queue q
            SET status = 'failed',
                next_attempt_at = o.retry_at,
                lease_token = CASE WHEN o.keep_lease THEN q.lease_token END
            FROM outcome o
            WHERE q.message_id = ANY (ARRAY(SELECT oo.id FROM outcome oo))
              AND q.message_id = o.id
              AND q.lease_token = o.token
              AND q.status::text = 'in_flight'
              AND o.status = 'failed'
              AND EXISTS (SELECT 1 FROM tidings.message_rows m
                          WHERE m.id = o.id AND m.attempts = o.attempt_number - 1)
            RETURNING q.message_id
        ),
        -- The message rows: no column an index holds changes here (a HOT update).
        written AS (
            UPDATE tidings.message_rows m
            SET status = o.status,
                attempts = m.attempts + 1,
                delivered_at = CASE WHEN o.status = 'delivered' THEN now() END,
                dead_lettered_at = CASE WHEN o.status = 'dead_letter' THEN now() END,
                -- A new dead letter is one the scheduled report has yet to report.
                dead_letter_reported_at = NULL,
                last_error = o.error_class,
                last_status_code = o.status_code,
                last_response_ms = o.response_ms,
                last_attempted_at = o.attempted_at,
                last_excerpt = o.excerpt
            FROM outcome o
            WHERE m.id = ANY (ARRAY(SELECT s.message_id FROM settled s
                                    UNION ALL
                                    SELECT r.message_id FROM retried r))
              AND m.id = o.id
            RETURNING m.id, m.status, m.attempts, m.endpoint_id, m.event_type, m.dead_lettered_at,
                      m.line_key, m.line_seq, m.line_batch_through
        ),
        -- The messages a FIFO head's batch carried (begin_attempts_v4) share its outcome:
        -- delivered or dead-lettered with it (and out of the queue), or waiting with it for its
        -- retry. Guarded by the head's write (its lease and attempt) and by each member still
        -- waiting behind it in its line.
        carried AS (
            SELECT c.id, h.id AS head_id, h.status AS head_status, h.endpoint_id, h.line_key,
                   h.line_seq, h.line_batch_through
            FROM written h
            JOIN outcome o ON o.id = h.id
            CROSS JOIN LATERAL unnest(o.members) AS c (id)
            WHERE o.members IS NOT NULL
        ),
        members_settled AS (
            DELETE FROM tidings.queue q
            USING carried c
            WHERE q.message_id = ANY (ARRAY(SELECT cc.id FROM carried cc))
              AND q.message_id = c.id
              AND c.head_status IN ('delivered', 'dead_letter')
              AND q.status = 'waiting'
              AND q.endpoint_id = c.endpoint_id AND q.line_key = c.line_key
              AND q.line_seq > c.line_seq AND q.line_seq <= c.line_batch_through
            RETURNING q.message_id, c.head_id
        ),
        members_waiting AS (
            SELECT q.message_id, c.head_id
            FROM carried c
            JOIN tidings.queue q ON q.message_id = c.id
            WHERE c.head_status NOT IN ('delivered', 'dead_letter')
              AND q.status = 'waiting'
              AND q.endpoint_id = c.endpoint_id AND q.line_key = c.line_key
              AND q.line_seq > c.line_seq AND q.line_seq <= c.line_batch_through
        ),
        batch_written AS (
            UPDATE tidings.message_rows m
            SET status = CASE WHEN h.status IN ('delivered', 'dead_letter') THEN h.status
                              ELSE 'waiting' END,
                attempts = m.attempts + 1,
                delivered_at = CASE WHEN h.status = 'delivered' THEN now() END,
                dead_lettered_at = CASE WHEN h.status = 'dead_letter' THEN now() END,
                dead_letter_reported_at = NULL,
                last_error = o.error_class,
                last_status_code = o.status_code,
                last_response_ms = o.response_ms,
                last_attempted_at = o.attempted_at,
                last_excerpt = o.excerpt
            FROM (SELECT ms.message_id, ms.head_id FROM members_settled ms
                  UNION ALL
                  SELECT mw.message_id, mw.head_id FROM members_waiting mw) mb
            JOIN written h ON h.id = mb.head_id
            JOIN outcome o ON o.id = h.id
            WHERE m.id = mb.message_id
            RETURNING m.id, m.status, m.attempts, m.endpoint_id, m.event_type, m.dead_lettered_at,
                      h.id AS head_id
        ),
        -- What the attempt log holds: the attempts that did not deliver their message (a
        -- delivered one is on its message's row), and any attempt this call could not write to
        -- its message (its lease had gone: the attempt happened all the same). A delivered
        -- attempt already on its row was written by an earlier call, whose answer was lost with
        -- the connection; so was a logged one whose insert finds it there (attempted_at is the
        -- sender's own clock reading).
        delivered_before AS (
            SELECT o.id
            FROM outcome o
            JOIN tidings.message_rows m ON m.id = o.id
            WHERE o.status = 'delivered'
              AND NOT EXISTS (SELECT 1 FROM written w WHERE w.id = o.id)
              AND m.status = 'delivered' AND m.attempts = o.attempt_number
              AND m.last_attempted_at = o.attempted_at
        ),
        logged AS (
            INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number, attempted_at,
                                             status_code, response_ms, error_class,
                                             response_excerpt)
            SELECT o.id, o.endpoint_id, o.attempt_number, o.attempted_at,
                   o.status_code, o.response_ms, o.error_class, o.excerpt
            FROM outcome o
            WHERE (o.status <> 'delivered'
                   OR NOT EXISTS (SELECT 1 FROM written w WHERE w.id = o.id))
              AND NOT EXISTS (SELECT 1 FROM delivered_before d WHERE d.id = o.id)
            ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING
            RETURNING message_id, endpoint_id
        ),
        batch_logged AS (
            INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number, attempted_at,
                                             status_code, response_ms, error_class,
                                             response_excerpt)
            SELECT b.id, b.endpoint_id, b.attempts, o.attempted_at,
                   o.status_code, o.response_ms, o.error_class, o.excerpt
            FROM batch_written b
            JOIN outcome o ON o.id = b.head_id
            WHERE b.status <> 'delivered'
            ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING
        ),
        -- Every attempt this call recorded, one row for the call (endpoint, message, latency,
        -- whether the answer was a success): what the latency figures, the hourly counts and the
        -- pruning of delivered messages read.
        tallied AS (
            INSERT INTO tidings.attempt_tallies (endpoint_ids, message_ids, response_ms, delivered)
            SELECT array_agg(t.endpoint_id), array_agg(t.id), array_agg(t.response_ms),
                   array_agg(coalesce(t.status_code BETWEEN 200 AND 299, false))
            FROM (SELECT w.endpoint_id, w.id, o.response_ms, o.status_code
                  FROM written w JOIN outcome o ON o.id = w.id
                  UNION ALL
                  SELECT b.endpoint_id, b.id, o.response_ms, o.status_code
                  FROM batch_written b JOIN outcome o ON o.id = b.head_id
                  UNION ALL
                  SELECT l.endpoint_id, l.message_id, o.response_ms, o.status_code
                  FROM logged l JOIN outcome o ON o.id = l.message_id
                  WHERE NOT EXISTS (SELECT 1 FROM written w WHERE w.id = l.message_id)) t
            HAVING count(*) > 0
        ),
        -- A FIFO head settled: its line may move on, which the sender asks for next
        -- (tidings.advance_lines_v1) and the claimer does should the sender not.
        line_noted AS (
            INSERT INTO tidings.fifo_line_moves (endpoint_id, ordering_key)
            SELECT DISTINCT w.endpoint_id, w.line_key
            FROM written w
            WHERE w.line_key IS NOT NULL AND w.status IN ('delivered', 'dead_letter')
        ),
        recorded_before AS (
            SELECT d.id FROM delivered_before d
            UNION ALL
            SELECT o.id
            FROM outcome o
            WHERE o.status <> 'delivered'
              AND NOT EXISTS (SELECT 1 FROM written w WHERE w.id = o.id)
              AND NOT EXISTS (SELECT 1 FROM logged l WHERE l.message_id = o.id)
        ),
        message_change AS (
            -- Messages dead-lettered, and those failing for the Nth time that will be retried (a
            -- batch's messages with their head, whose attempt they shared), with what their
            -- operational events say of that attempt.
            SELECT w.id, w.endpoint_id, w.event_type, w.attempts, w.dead_lettered_at,
                   CASE WHEN w.status = 'dead_letter' THEN 'message.attempt.exhausted'
                        ELSE 'message.attempt.failing' END AS event_type_out,
                   o.status_code, o.error_class, o.attempted_at
            FROM (SELECT w.id, w.status, w.attempts, w.endpoint_id, w.event_type,
                         w.dead_lettered_at, w.id AS head_id
                  FROM written w
                  UNION ALL
                  SELECT b.id, b.status, b.attempts, b.endpoint_id, b.event_type,
                         b.dead_lettered_at, b.head_id
                  FROM batch_written b) w
            JOIN outcome o ON o.id = w.head_id
            WHERE w.status = 'dead_letter'
               OR (w.status IN ('failed', 'waiting')
                   AND w.attempts = (SELECT s.value FROM tidings.settings s
                                     WHERE s.name = 'operational_failing_attempt'))
        )
        SELECT (SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}')
                FROM (SELECT id FROM written UNION SELECT id FROM recorded_before) w),
               (SELECT coalesce(array_agg(DISTINCT n.endpoint_id), '{}')
                FROM (SELECT w.endpoint_id FROM written w
                      UNION ALL
                      SELECT l.endpoint_id FROM logged l) n),
               EXISTS (SELECT 1 FROM outcome),
               (SELECT jsonb_agg(to_jsonb(mc)) FROM message_change mc)
        INTO written_ids, v_logged_endpoints, v_any_outcome, v_message_changes;
    END IF;

    -- 2. The consequences. The summaries to apply: a batch written a second time counts once
    -- (only endpoints whose attempts were new), and a batch of successes against a closed
    -- circuit without failures, whose last success is already known to the second, changes
    -- nothing. Read without a lock: another sender's uncommitted failure is then simply
    -- ordered after it. (An endpoint that never succeeded has no last success: NULL must not
    -- skip it.)
    SELECT coalesce(array_agg(s.endpoint_id), '{}')
    INTO v_counted
    FROM unnest(p_health_endpoint_ids, p_has_success, p_trailing_failures,
                p_last_success_at, p_last_failure_at)
        AS s(endpoint_id, has_success, trailing_failures, last_success_at, last_failure_at)
    JOIN tidings.endpoint_health h ON h.endpoint_id = s.endpoint_id
    WHERE (s.endpoint_id = ANY (v_logged_endpoints) OR NOT v_any_outcome)
      AND NOT (s.trailing_failures = 0 AND h.state = 'closed'
               AND h.consecutive_failures = 0
               AND h.last_success_at IS NOT NULL
               AND h.last_success_at >= s.last_success_at - interval '1 second');

    IF cardinality(v_counted) = 0 AND v_message_changes IS NULL
       AND coalesce(cardinality(p_disable_ids), 0) = 0 THEN
        transitions := '[]';
        disabled_ids := '{}';
        RETURN;
    END IF;

    WITH summary AS (
        SELECT *
        FROM unnest(p_health_endpoint_ids, p_has_success, p_trailing_failures,
                    p_last_success_at, p_last_failure_at)
            AS s(endpoint_id, has_success, trailing_failures, last_success_at, last_failure_at)
    ),
    counted AS (
        SELECT s.* FROM summary s WHERE s.endpoint_id = ANY (v_counted)
    ),
    before AS (
        -- Locking returns each row's newest committed version, so what follows computes from it.
        SELECT h.endpoint_id, h.state, h.consecutive_failures, h.failure_threshold, h.cooldown_s,
               h.opened_at, h.probe_token, h.probe_started_at, h.last_success_at,
               h.last_failure_at
        FROM tidings.endpoint_health h
        WHERE h.endpoint_id IN (SELECT c.endpoint_id FROM counted c)
        ORDER BY h.endpoint_id
        FOR UPDATE
    ),
    next_state AS (
        SELECT b.*, s.has_success, s.trailing_failures,
               CASE
                   WHEN s.has_success THEN
                       CASE WHEN s.trailing_failures >= b.failure_threshold
                            THEN 'open' ELSE 'closed' END
                   WHEN s.trailing_failures = 0 THEN b.state::text
                   WHEN b.state = 'half_open' THEN 'open'
                   WHEN b.state = 'closed'
                        AND b.consecutive_failures + s.trailing_failures >= b.failure_threshold
                       THEN 'open'
                   ELSE b.state::text
               END::tidings.circuit_state AS new_state,
               greatest(b.last_success_at, s.last_success_at) AS new_last_success_at,
               greatest(b.last_failure_at, s.last_failure_at) AS new_last_failure_at
        FROM counted s
        JOIN before b ON b.endpoint_id = s.endpoint_id
    ),
    health AS (
        UPDATE tidings.endpoint_health h
        SET consecutive_failures = CASE WHEN n.has_success THEN n.trailing_failures
                                        ELSE n.consecutive_failures + n.trailing_failures END,
            state = n.new_state,
            cooldown_s = CASE
                WHEN n.has_success THEN p_base_cooldown_s
                -- A circuit that opens from closed waits the configured cooldown, whatever the
                -- health row was created with.
                WHEN n.state = 'closed' AND n.new_state = 'open' THEN p_base_cooldown_s
                WHEN n.state = 'half_open' AND n.trailing_failures > 0
                    THEN least(n.cooldown_s * 2, p_max_cooldown_s)
                ELSE n.cooldown_s END,
            opened_at = CASE
                WHEN n.new_state <> 'open' THEN NULL
                WHEN n.has_success OR n.state <> 'open' THEN now()
                ELSE n.opened_at END,
            probe_token = CASE WHEN n.new_state = 'half_open' THEN n.probe_token END,
            probe_started_at = CASE WHEN n.new_state = 'half_open' THEN n.probe_started_at END,
            last_success_at = n.new_last_success_at,
            last_failure_at = n.new_last_failure_at
        FROM next_state n
        WHERE h.endpoint_id = n.endpoint_id
        RETURNING h.endpoint_id, h.state, h.cooldown_s, h.consecutive_failures,
                  h.failure_threshold, h.last_success_at, h.last_failure_at
    ),
    disabled AS (
        UPDATE tidings.endpoints e
        SET enabled = false, disabled_reason = d.reason, disabled_at = now(), updated_at = now()
        FROM unnest(p_disable_ids, p_disable_reasons) AS d(id, reason)
        WHERE e.id = d.id AND e.enabled
          -- For an attempt logged now, as the health summaries count (a batch written a second
          -- time disables nothing).
          AND (d.id = ANY (v_logged_endpoints) OR NOT v_any_outcome)
        RETURNING e.id, e.app_id, e.url, e.disabled_reason, e.disabled_at
    ),
    message_change AS (
        SELECT *
        FROM jsonb_to_recordset(v_message_changes)
            AS mc(id bigint, endpoint_id bigint, event_type text, attempts integer,
                  dead_lettered_at timestamptz, event_type_out text, status_code integer,
                  error_class text, attempted_at timestamptz)
    ),
    crossing AS (
        -- The highest share of the failure threshold this batch's failures reached from below
        -- (a run of failures counts from its last success), and first successes after a run that
        -- reached half of it.
        SELECT h.endpoint_id, h.consecutive_failures, h.failure_threshold,
               h.last_success_at, h.last_failure_at, b.last_success_at AS old_last_success_at,
               b.consecutive_failures AS old_failures,
               (SELECT max(l.pct) FROM (VALUES (50), (70), (90), (100)) AS l(pct)
                WHERE h.consecutive_failures >= ceil(h.failure_threshold * l.pct / 100.0)
                  AND (n.has_success
                       OR b.consecutive_failures < ceil(h.failure_threshold * l.pct / 100.0)))
                   AS pct,
               n.has_success
                   AND b.consecutive_failures >= ceil(b.failure_threshold * 50 / 100.0)
                   AS recovered
        FROM health h
        JOIN before b ON b.endpoint_id = h.endpoint_id
        JOIN next_state n ON n.endpoint_id = h.endpoint_id
        WHERE h.consecutive_failures <> b.consecutive_failures
    ),
    lifecycle AS (
        SELECT jsonb_build_object(
                   'event_type', mc.event_type_out,
                   'event_id', 'msg_' || mc.id || '.' ||
                       CASE WHEN mc.event_type_out = 'message.attempt.exhausted'
                            THEN 'exhausted.' || extract(epoch FROM mc.dead_lettered_at)::numeric
                            ELSE 'failing' END,
                   'application_id', e.app_id, 'application_uid', a.uid,
                   'endpoint_id', e.id, 'endpoint_url', e.url,
                   'data', jsonb_build_object(
                       'message_id', mc.id, 'event_type', mc.event_type,
                       'attempt_count', mc.attempts,
                       'last_attempt', jsonb_build_object(
                           'status_code', mc.status_code, 'error_class', mc.error_class,
                           'attempted_at', tidings.lifecycle_time(mc.attempted_at)))) AS element
        FROM message_change mc
        -- Looked up per changed message (OFFSET 0 keeps the planner from turning the look-up
        -- into a join that reads the table first), so a batch that changes none reads no
        -- endpoint.
        CROSS JOIN LATERAL (SELECT e.id, e.app_id, e.url FROM tidings.endpoints e
                            WHERE e.id = mc.endpoint_id OFFSET 0) e
        CROSS JOIN LATERAL (SELECT a.uid FROM tidings.applications a
                            WHERE a.id = e.app_id OFFSET 0) a
        UNION ALL
        SELECT jsonb_build_object(
                   'event_type', CASE WHEN k.failing THEN 'endpoint.failing'
                                      ELSE 'endpoint.recovered' END,
                   'event_id', 'ep_' || c.endpoint_id || '.' ||
                       CASE WHEN k.failing
                            THEN 'failing.' || coalesce(
                                     extract(epoch FROM c.last_success_at)::numeric::text,
                                     'never') || '.' || c.pct
                            ELSE 'recovered.' || coalesce(
                                     extract(epoch FROM c.old_last_success_at)::numeric::text,
                                     'never') || '.' ||
                                 extract(epoch FROM c.last_success_at)::numeric END,
                   'application_id', e.app_id, 'application_uid', a.uid,
                   'endpoint_id', e.id, 'endpoint_url', e.url,
                   'data', CASE WHEN k.failing THEN jsonb_build_object(
                               'consecutive_failures', c.consecutive_failures,
                               'failure_threshold', c.failure_threshold,
                               'threshold_percent', c.pct,
                               'last_failure_at', tidings.lifecycle_time(c.last_failure_at))
                           ELSE jsonb_build_object(
                               'failed_attempts', c.old_failures,
                               'recovered_at', tidings.lifecycle_time(c.last_success_at))
                           END)
        FROM crossing c
        -- A batch can end one run of failures (recovered) and start another that reaches a
        -- level (failing): both are reported.
        CROSS JOIN (VALUES (true), (false)) AS k(failing)
        JOIN tidings.endpoints e ON e.id = c.endpoint_id
        JOIN tidings.applications a ON a.id = e.app_id
        WHERE (k.failing AND c.pct IS NOT NULL) OR (NOT k.failing AND c.recovered)
        UNION ALL
        SELECT jsonb_build_object(
                   'event_type', 'endpoint.disabled',
                   'event_id', 'ep_' || d.id || '.disabled.' ||
                       extract(epoch FROM d.disabled_at)::numeric,
                   'application_id', d.app_id, 'application_uid', a.uid,
                   'endpoint_id', d.id, 'endpoint_url', d.url,
                   'data', jsonb_build_object(
                       'reason', 'gone', 'detail', d.disabled_reason,
                       'disabled_at', tidings.lifecycle_time(d.disabled_at)))
        FROM disabled d
        JOIN tidings.applications a ON a.id = d.app_id
    )
    SELECT (SELECT coalesce(json_agg(json_build_object(
                        'endpoint_id', h.endpoint_id, 'from', b.state, 'to', h.state,
                        'cooldown_s', h.cooldown_s) ORDER BY h.endpoint_id), '[]')
            FROM health h JOIN before b ON b.endpoint_id = h.endpoint_id
            WHERE h.state <> b.state),
           (SELECT coalesce(array_agg(d.id ORDER BY d.id), '{}') FROM disabled d),
           (SELECT jsonb_agg(l.element) FROM lifecycle l)
    INTO transitions, disabled_ids, v_lifecycle;


    IF v_lifecycle IS NOT NULL THEN
        PERFORM tidings.emit_lifecycle_v1(v_lifecycle);
    END IF;
END $$;



-- The fan-out writes each new message's row and its queue row (enqueue_into_v1, 0131).
CREATE OR REPLACE FUNCTION tidings.enqueue_into_v1(events jsonb, p_app_id bigint, application text)
RETURNS TABLE (item integer, event_ref bigint, created boolean, message_ids bigint[])
LANGUAGE plpgsql
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_app_id    bigint := p_app_id;
    v_types     text[];
    v_ids       text[];
    v_payloads  jsonb[];
    v_targets   jsonb[];
    v_channels  jsonb[];
    v_keys      jsonb[];
    v_count     integer;
    v_bad       record;
    v_created   bigint[];
    v_where     text;
    v_limit     bigint;
    v_live      boolean;
BEGIN
    IF events IS NULL OR jsonb_typeof(events) <> 'array' THEN
        RAISE EXCEPTION 'tidings.enqueue: events must be a JSON array' USING ERRCODE = '22023';
    END IF;
    v_count := jsonb_array_length(events);
    IF v_count = 0 THEN
        RETURN;
    END IF;

    SELECT array_agg(CASE WHEN jsonb_typeof(e -> 'event_type') = 'string' THEN e ->> 'event_type' END
                     ORDER BY ord),
           array_agg(CASE
                         WHEN e -> 'event_id' IS NULL OR jsonb_typeof(e -> 'event_id') = 'null'
                             THEN gen_random_uuid()::text
                         WHEN jsonb_typeof(e -> 'event_id') = 'string' THEN e ->> 'event_id'
                     END ORDER BY ord),
           array_agg(e -> 'payload' ORDER BY ord),
           array_agg(e -> 'endpoint_ids' ORDER BY ord),
           array_agg(e -> 'channels' ORDER BY ord),
           array_agg(e -> 'ordering_key' ORDER BY ord)
    INTO v_types, v_ids, v_payloads, v_targets, v_channels, v_keys
    FROM jsonb_array_elements(events) WITH ORDINALITY AS input (e, ord);

    -- The first bad element, named by its position, so the caller can point at the field.
    SELECT u.ord - 1 AS pos,
           CASE
               WHEN u.event_type IS NULL OR u.event_type = '' THEN 'event_type'
               WHEN length(u.event_type) > 200 THEN 'event_type_length'
               WHEN u.payload IS NULL OR jsonb_typeof(u.payload) = 'null' THEN 'payload'
               WHEN u.event_id IS NULL OR u.event_id = '' OR length(u.event_id) > 200 THEN 'event_id'
               WHEN u.targets IS NOT NULL AND jsonb_typeof(u.targets) NOT IN ('array', 'null')
                   THEN 'endpoint_ids'
               WHEN c.bad THEN 'channels'
               WHEN k.bad THEN 'ordering_key'
           END AS problem
    INTO v_bad
    FROM unnest(v_types, v_ids, v_payloads, v_targets, v_channels, v_keys) WITH ORDINALITY
         AS u (event_type, event_id, payload, targets, channels, ordering_key, ord)
    -- ordering_key: absent, null, or a string of 1 to 200 characters.
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_typeof(u.ordering_key), 'null') <> 'null' AND (
                   jsonb_typeof(u.ordering_key) <> 'string'
                   OR length(u.ordering_key #>> '{}') NOT BETWEEN 1 AND 200) AS bad
    ) k
    -- channels: absent, null, or an array of at most 10 channel names (the uid syntax).
    CROSS JOIN LATERAL (
        SELECT coalesce(jsonb_typeof(u.channels), 'null') <> 'null' AND (
                   jsonb_typeof(u.channels) <> 'array'
                   OR jsonb_array_length(u.channels) > 10
                   OR EXISTS (SELECT 1 FROM jsonb_array_elements(u.channels) AS n (name)
                              WHERE jsonb_typeof(n.name) <> 'string'
                                 OR (n.name #>> '{}') !~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$'))
               AS bad
    ) c
    WHERE u.event_type IS NULL OR u.event_type = '' OR length(u.event_type) > 200
       OR u.payload IS NULL OR jsonb_typeof(u.payload) = 'null'
       OR u.event_id IS NULL OR u.event_id = '' OR length(u.event_id) > 200
       OR (u.targets IS NOT NULL AND jsonb_typeof(u.targets) NOT IN ('array', 'null'))
       OR c.bad OR k.bad
    ORDER BY u.ord
    LIMIT 1;
    IF FOUND THEN
        v_where := CASE WHEN v_count = 1 THEN '' ELSE format('events[%s].', v_bad.pos) END;
        RAISE EXCEPTION 'tidings.enqueue: %', format('%s%s', replace(v_where, '].', ']: '), CASE v_bad.problem
                WHEN 'event_type' THEN 'event_type must be a non-empty string'
                WHEN 'event_type_length' THEN 'event_type is longer than 200 characters'
                WHEN 'payload' THEN 'payload must not be null'
                WHEN 'event_id' THEN 'event_id must be 1 to 200 characters'
                WHEN 'channels' THEN 'channels must be an array of at most 10 channel names, '
                    'each 1 to 200 letters, digits, ''.'', ''_'', '':'' or ''-'', starting with a '
                    'letter or digit'
                WHEN 'ordering_key' THEN 'ordering_key must be a string of 1 to 200 characters'
                ELSE 'endpoint_ids must be an array of endpoint ids'
            END)
            USING ERRCODE = '22023',
                  DETAIL = v_where || CASE WHEN v_bad.problem = 'event_type_length'
                                           THEN 'event_type' ELSE v_bad.problem END;
    END IF;

    -- Payloads over the deployment's limit, measured as the API measures them: the JSON text
    -- without insignificant whitespace, in UTF-8 bytes. jsonb's own text only adds a space after
    -- each separator, so a payload whose text fits needs no closer look, and one whose text is
    -- over twice the limit is over it (at most every other byte is such a space): the exact
    -- count (a scan of the text) is left to the few in between.
    SELECT s.value INTO v_limit FROM tidings.settings s WHERE s.name = 'max_payload_bytes';
    SELECT p.ord - 1 AS pos,
           CASE WHEN octet_length(p.text) <= 2 * v_limit
                THEN tidings.compact_json_bytes(p.text) END AS size
    INTO v_bad
    FROM (SELECT u.ord, u.payload::text AS text
          FROM unnest(v_payloads) WITH ORDINALITY AS u (payload, ord)) p
    WHERE octet_length(p.text) > v_limit
      AND (octet_length(p.text) > 2 * v_limit OR tidings.compact_json_bytes(p.text) > v_limit)
    ORDER BY p.ord
    LIMIT 1;
    IF FOUND THEN
        v_where := CASE WHEN v_count = 1 THEN '' ELSE format('events[%s].', v_bad.pos) END;
        RAISE EXCEPTION 'tidings.enqueue: %payload is %; the limit is % bytes',
            replace(v_where, '].', ']: '),
            coalesce(v_bad.size || ' bytes', format('over %s bytes', 2 * v_limit)), v_limit
            USING ERRCODE = '54000', DETAIL = v_where || 'payload',
                  HINT = 'the limit is the deployment''s TIDINGS_MAX_PAYLOAD_BYTES';
    END IF;

    -- Named endpoints must exist in the application and not be deleted (a disabled one is
    -- skipped, not refused). Another application's endpoint is refused as an unknown one is.
    SELECT t.ord - 1 AS pos,
           array_agg(t.wanted ORDER BY t.wanted) AS unknown
    INTO v_bad
    FROM (
        SELECT u.ord,
               CASE WHEN jsonb_typeof(w.value) = 'number'
                         AND w.value::text ~ '^[0-9]{1,19}$'
                         AND w.value::text::numeric <= 9223372036854775807
                    THEN w.value::text::bigint END AS wanted
        FROM unnest(v_targets) WITH ORDINALITY AS u (targets, ord)
        CROSS JOIN LATERAL jsonb_array_elements(
            CASE WHEN jsonb_typeof(u.targets) = 'array' THEN u.targets ELSE '[]' END) AS w
    ) t
    WHERE t.wanted IS NULL OR NOT EXISTS (
        SELECT 1 FROM tidings.endpoints e
        WHERE e.id = t.wanted AND e.app_id = v_app_id AND e.deleted_at IS NULL)
    GROUP BY t.ord
    ORDER BY t.ord
    LIMIT 1;
    IF FOUND THEN
        v_where := CASE WHEN v_count = 1 THEN '' ELSE format('events[%s].', v_bad.pos) END;
        RAISE EXCEPTION 'tidings.enqueue: %unknown endpoint ids: %',
            replace(v_where, '].', ']: '), v_bad.unknown
            USING ERRCODE = '23503', DETAIL = v_where || 'endpoint_ids';
    END IF;

    -- New events in key order, then their fan-out in one statement, which writes nothing if the
    -- application is deleted in its snapshot (the one its endpoints are read in).
    WITH live AS (
        SELECT 1 FROM tidings.applications a WHERE a.id = v_app_id AND a.deleted_at IS NULL
    ),
    firsts AS (
        SELECT DISTINCT ON (u.event_type, u.event_id) u.event_type, u.event_id, u.payload, u.targets,
               CASE WHEN jsonb_typeof(u.channels) = 'array' AND jsonb_array_length(u.channels) > 0
                    THEN ARRAY(SELECT jsonb_array_elements_text(u.channels)) END AS channels,
               u.ordering_key #>> '{}' AS ordering_key, u.ord
        FROM unnest(v_types, v_ids, v_payloads, v_targets, v_channels, v_keys) WITH ORDINALITY
             AS u (event_type, event_id, payload, targets, channels, ordering_key, ord)
        WHERE EXISTS (SELECT 1 FROM live)
        ORDER BY u.event_type, u.event_id, u.ord
    ),
    inserted AS (
        INSERT INTO tidings.events AS ev (app_id, event_type, event_id, payload, channels,
                                          ordering_key)
        SELECT v_app_id, f.event_type, f.event_id, f.payload, f.channels, f.ordering_key
        FROM firsts f
        ORDER BY f.event_type, f.event_id
        ON CONFLICT ON CONSTRAINT events_idempotency_key DO NOTHING
        RETURNING ev.id, ev.event_type, ev.event_id
    ),
    -- Each new event's targets: the named endpoints, or else the subscribers of its type in its
    -- application (found through subscriptions_by_app_and_type, so the cost follows those
    -- subscribers, neither the application's other endpoints nor other applications'). The two
    -- branches exclude each other, so "named" tells which one an endpoint came from.
    targets AS (
        SELECT i.id AS event_ref, i.event_type, f.payload, f.channels, f.ordering_key, f.ord,
               t.endpoint_id, t.named
        FROM inserted i
        JOIN firsts f ON f.event_type = i.event_type AND f.event_id = i.event_id
        CROSS JOIN LATERAL (
            SELECT s.endpoint_id, false AS named
            FROM tidings.subscriptions s
            WHERE jsonb_typeof(f.targets) IS DISTINCT FROM 'array'
              AND s.app_id = v_app_id
              AND s.event_type IN (i.event_type, '*')
            UNION
            SELECT named.value::bigint, true
            FROM jsonb_array_elements_text(
                CASE WHEN jsonb_typeof(f.targets) = 'array' THEN f.targets ELSE '[]' END) AS named
        ) t
    ),
    -- A subscriber's channels and filter decide on the endpoint row read here (not in targets:
    -- a second read of endpoints there led the planner to run the subscribers' look-up once per
    -- event and endpoint). A subscriber with channels needs one of the event's; its filter sees
    -- the payload and the event type (as $"event_type"). Named endpoints take the event as is.
    routed AS MATERIALIZED (
        SELECT t.event_ref, e.id AS endpoint_id, t.event_type, t.ord,
               CASE WHEN e.ordering = 'fifo' THEN coalesce(t.ordering_key, '') END AS line_key
        FROM targets t
        JOIN tidings.endpoints e ON e.id = t.endpoint_id
        WHERE e.enabled AND e.deleted_at IS NULL AND e.app_id = v_app_id
          AND (t.named
               OR ((e.channels IS NULL OR e.channels && t.channels)
                   AND (e.filter_path IS NULL
                        OR jsonb_path_match(t.payload, e.filter_path,
                                            jsonb_build_object('event_type', t.event_type),
                                            true))))
    ),
    -- A FIFO endpoint's messages wait in their line, placed in the order the events came in
    -- (the batch's order: the events themselves are inserted in key order); the line's advancer
    -- makes the first of an idle line its head (tidings.advance_lines_v1, called by the claimer).
    in_line AS (
        SELECT r.event_ref, r.endpoint_id,
               row_number() OVER (ORDER BY r.ord, r.endpoint_id) AS rank
        FROM routed r
        WHERE r.line_key IS NOT NULL
    ),
    placed AS (
        SELECT l.event_ref, l.endpoint_id, p.seq
        FROM in_line l
        JOIN tidings.allocate_line_positions((SELECT count(*) FROM in_line)) p ON p.rank = l.rank
    ),
    fanned AS (
        INSERT INTO tidings.message_rows (event_ref, endpoint_id, event_type, status, line_key,
                                          line_seq)
        SELECT r.event_ref, r.endpoint_id, r.event_type,
               CASE WHEN r.line_key IS NULL THEN 'pending'
                    ELSE 'waiting' END::tidings.message_status,
               r.line_key, p.seq
        FROM routed r
        LEFT JOIN placed p ON p.event_ref = r.event_ref AND p.endpoint_id = r.endpoint_id
        ORDER BY r.event_ref, r.endpoint_id
        RETURNING id, endpoint_id, status, next_attempt_at, line_key, line_seq
    ),
    -- Every new message is to be settled: its queue row, due now (or waiting in its line).
    queued AS (
        INSERT INTO tidings.queue (message_id, endpoint_id, status, next_attempt_at, line_key,
                                   line_seq)
        SELECT f.id, f.endpoint_id, f.status, f.next_attempt_at, f.line_key, f.line_seq
        FROM fanned f
        ORDER BY f.id
    ),
    noted AS (
        INSERT INTO tidings.fifo_line_moves (endpoint_id, ordering_key)
        SELECT DISTINCT f.endpoint_id, f.line_key FROM fanned f WHERE f.line_key IS NOT NULL
    )
    -- (queued and noted run to completion although nothing reads them: PostgreSQL always does
    -- that.)
    SELECT array_agg(i.id), EXISTS (SELECT 1 FROM live) INTO v_created, v_live FROM inserted i;
    IF NOT v_live THEN
        RAISE EXCEPTION 'tidings.enqueue: unknown application: %', application
            USING ERRCODE = '23503', DETAIL = 'application';
    END IF;

    -- Each key is looked up through the unique index (a correlated subquery is never turned
    -- into a scan of the whole events table, whatever the planner's row estimates).
    RETURN QUERY
        SELECT (k.ord - 1)::integer,
               k.ref,
               k.ref = ANY (coalesce(v_created, '{}'))
                   AND k.ord = min(k.ord) OVER (PARTITION BY k.ref),
               coalesce((SELECT array_agg(m.id ORDER BY m.id)
                         FROM tidings.message_rows m WHERE m.event_ref = k.ref), '{}')
        FROM (
            SELECT u.ord,
                   (SELECT ev.id FROM tidings.events ev
                    WHERE ev.app_id = v_app_id
                      AND ev.event_type = u.event_type AND ev.event_id = u.event_id) AS ref
            FROM unnest(v_types, v_ids) WITH ORDINALITY AS u (event_type, event_id, ord)
        ) k
        ORDER BY k.ord;
END $$;


-- rows_in_flight: an endpoint's rows in flight under a live lease, counted up to p_limit (a range
-- of queue_in_flight).
CREATE OR REPLACE FUNCTION tidings.rows_in_flight(p_endpoint_id bigint, p_limit integer)
RETURNS integer
LANGUAGE sql STABLE
AS $$
    SELECT count(*)::integer
    FROM (SELECT 1 FROM tidings.queue q
          WHERE q.endpoint_id = p_endpoint_id
            AND q.status = 'in_flight'
            AND q.next_attempt_at > now()
          LIMIT p_limit) f
$$;

CREATE OR REPLACE FUNCTION tidings.release_leases_v1(
    p_ids bigint[], p_tokens uuid[], p_delay_s double precision
) RETURNS SETOF bigint
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
BEGIN
    RETURN QUERY
    UPDATE tidings.queue q
    SET status = tidings.unleased_status(m.attempts),
        lease_token = NULL,
        next_attempt_at = now() + p_delay_s * interval '1 second'
    FROM unnest(p_ids, p_tokens) AS r(id, token)
    JOIN tidings.message_rows m ON m.id = r.id
    WHERE q.message_id = r.id
      AND q.lease_token = r.token
      AND q.status IN ('in_flight', 'failed')
    RETURNING q.message_id;
END $$;


-- FIFO lines over the queue (0131, replaced in place).
CREATE OR REPLACE FUNCTION tidings.advance_lines_v1(
    p_endpoint_ids bigint[], p_keys text[], p_lease_s double precision, p_resume boolean,
    p_wait boolean
) RETURNS TABLE (message_id bigint, endpoint_id bigint, attempts integer, lease_token uuid)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_endpoints bigint[];
    v_keys      text[];
BEGIN
    -- Lines are made by their first advancer (a producer never writes one).
    INSERT INTO tidings.fifo_lines (endpoint_id, ordering_key)
    SELECT DISTINCT l.endpoint_id, l.ordering_key
    FROM unnest(p_endpoint_ids, p_keys) AS l (endpoint_id, ordering_key)
    JOIN tidings.endpoints e ON e.id = l.endpoint_id
    ORDER BY 1, 2
    ON CONFLICT DO NOTHING;

    IF p_wait THEN
        SELECT array_agg(f.endpoint_id), array_agg(f.ordering_key)
        INTO v_endpoints, v_keys
        FROM (SELECT f.endpoint_id, f.ordering_key
              FROM tidings.fifo_lines f
              JOIN unnest(p_endpoint_ids, p_keys) AS l (endpoint_id, ordering_key)
                  ON l.endpoint_id = f.endpoint_id AND l.ordering_key = f.ordering_key
              ORDER BY f.endpoint_id, f.ordering_key
              FOR UPDATE OF f) f;
    ELSE
        SELECT array_agg(f.endpoint_id), array_agg(f.ordering_key)
        INTO v_endpoints, v_keys
        FROM (SELECT f.endpoint_id, f.ordering_key
              FROM tidings.fifo_lines f
              JOIN unnest(p_endpoint_ids, p_keys) AS l (endpoint_id, ordering_key)
                  ON l.endpoint_id = f.endpoint_id AND l.ordering_key = f.ordering_key
              ORDER BY f.endpoint_id, f.ordering_key
              FOR UPDATE OF f SKIP LOCKED) f;
    END IF;
    IF v_endpoints IS NULL THEN
        RETURN;
    END IF;

    DELETE FROM tidings.fifo_line_moves mv
    USING unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
    WHERE mv.endpoint_id = l.endpoint_id AND mv.ordering_key = l.ordering_key;

    RETURN QUERY
    WITH line AS (
        SELECT f.endpoint_id, f.ordering_key, f.head_seq, f.paused_at,
               coalesce((SELECT q.status FROM tidings.queue q WHERE q.message_id = h.id),
                        h.status) AS head_status,
               e.ordering, e.fifo_on_dead_letter
        FROM unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
        JOIN tidings.fifo_lines f
            ON f.endpoint_id = l.endpoint_id AND f.ordering_key = l.ordering_key
        JOIN tidings.endpoints e ON e.id = f.endpoint_id
        LEFT JOIN tidings.message_rows h
            ON h.endpoint_id = f.endpoint_id AND h.line_key = f.ordering_key
           AND h.line_seq = f.head_seq
    ),
    decided AS (
        SELECT ln.endpoint_id, ln.ordering_key,
               CASE
                   WHEN ln.head_status IN ('pending', 'failed', 'in_flight') THEN 'stay'
                   WHEN ln.paused_at IS NOT NULL THEN CASE WHEN p_resume THEN 'move' ELSE 'stay' END
                   WHEN ln.head_status = 'dead_letter' AND ln.ordering = 'fifo'
                        AND ln.fifo_on_dead_letter = 'pause' AND NOT p_resume THEN 'pause'
                   ELSE 'move'
               END AS action
        FROM line ln
    ),
    next_head AS (
        SELECT d.endpoint_id, d.ordering_key, d.action,
               CASE WHEN d.action = 'move' THEN
                   (SELECT w.line_seq FROM tidings.queue w
                    WHERE w.endpoint_id = d.endpoint_id AND w.line_key = d.ordering_key
                      AND w.status = 'waiting'
                    ORDER BY w.line_seq
                    LIMIT 1) END AS seq
        FROM decided d
        WHERE d.action IN ('move', 'pause')
    ),
    -- (A line that stays as it is, idle with nothing waiting, is not written.)
    moved AS (
        UPDATE tidings.fifo_lines f
        SET head_seq = CASE WHEN n.action = 'move' THEN n.seq ELSE f.head_seq END,
            paused_at = CASE WHEN n.action = 'pause' THEN now() END
        FROM next_head n
        WHERE f.endpoint_id = n.endpoint_id AND f.ordering_key = n.ordering_key
          AND (n.action = 'pause' OR f.paused_at IS NOT NULL
               OR f.head_seq IS DISTINCT FROM n.seq)
    ),
    promoted AS (
        UPDATE tidings.queue m
        SET status = CASE WHEN q.fast THEN 'in_flight' ELSE 'pending' END::tidings.message_status,
            lease_token = CASE WHEN q.fast THEN gen_random_uuid() END,
            next_attempt_at = CASE WHEN q.fast THEN now() + p_lease_s * interval '1 second'
                                   ELSE now() END
        FROM next_head mv
        JOIN tidings.endpoints e ON e.id = mv.endpoint_id
        JOIN tidings.endpoint_health h ON h.endpoint_id = mv.endpoint_id
        CROSS JOIN LATERAL (
            SELECT p_lease_s IS NOT NULL AND e.enabled AND e.deleted_at IS NULL
                   AND e.rate_limit_per_s IS NULL AND e.max_in_flight IS NULL
                   AND h.state = 'closed' AND NOT coalesce(h.slow_until > now(), false)
                   AND (h.last_success_at IS NOT NULL OR h.last_failure_at IS NOT NULL) AS fast
        ) q
        WHERE mv.action = 'move'
          AND m.endpoint_id = mv.endpoint_id AND m.line_key = mv.ordering_key
          AND m.line_seq = mv.seq AND m.status = 'waiting'
        RETURNING m.message_id, m.endpoint_id, m.lease_token, q.fast
    )
    SELECT p.message_id, p.endpoint_id, r.attempts, p.lease_token
    FROM promoted p
    JOIN tidings.message_rows r ON r.id = p.message_id
    WHERE p.fast
    ORDER BY p.message_id;
END $$;

CREATE OR REPLACE FUNCTION tidings.place_in_lines_v1(p_message_ids bigint[])
RETURNS TABLE (id bigint, status text)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
#variable_conflict use_column
DECLARE
    v_endpoints bigint[];
    v_keys      text[];
    v_placed    bigint[];
BEGIN
    SELECT array_agg(l.endpoint_id ORDER BY l.endpoint_id, l.ordering_key),
           array_agg(l.ordering_key ORDER BY l.endpoint_id, l.ordering_key)
    INTO v_endpoints, v_keys
    FROM (SELECT DISTINCT q.endpoint_id, coalesce(ev.ordering_key, '') AS ordering_key
          FROM tidings.queue q
          JOIN tidings.message_rows m ON m.id = q.message_id
          JOIN tidings.endpoints e ON e.id = q.endpoint_id
          JOIN tidings.events ev ON ev.id = m.event_ref
          WHERE q.message_id = ANY (p_message_ids) AND q.status = 'pending'
            AND e.ordering = 'fifo') l;
    IF v_endpoints IS NULL THEN
        RETURN;
    END IF;

    -- The lines, made where new, and held (waiting for any advancer) until the commit.
    INSERT INTO tidings.fifo_lines (endpoint_id, ordering_key)
    SELECT * FROM unnest(v_endpoints, v_keys)
    ON CONFLICT DO NOTHING;
    PERFORM 1
    FROM tidings.fifo_lines f
    JOIN unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
        ON l.endpoint_id = f.endpoint_id AND l.ordering_key = f.ordering_key
    ORDER BY f.endpoint_id, f.ordering_key
    FOR UPDATE OF f;

    WITH line AS (
        SELECT f.endpoint_id, f.ordering_key, f.head_seq, f.paused_at,
               coalesce((SELECT hq.status FROM tidings.queue hq WHERE hq.message_id = h.id),
                        h.status) AS head_status,
               coalesce(h.line_batch_through, h.line_seq) AS paused_through
        FROM unnest(v_endpoints, v_keys) AS l (endpoint_id, ordering_key)
        JOIN tidings.fifo_lines f
            ON f.endpoint_id = l.endpoint_id AND f.ordering_key = l.ordering_key
        LEFT JOIN tidings.message_rows h
            ON h.endpoint_id = f.endpoint_id AND h.line_key = f.ordering_key
           AND h.line_seq = f.head_seq
    ),
    target AS (
        SELECT m.id, m.line_seq AS old_seq, ln.endpoint_id, ln.ordering_key, ln.head_seq,
               -- The line's head (and what its batch carries) keeps its place: a dead letter
               -- that paused the line, or a retrying head recovered.
               coalesce(m.line_key = ln.ordering_key
                        AND m.line_seq BETWEEN ln.head_seq AND ln.paused_through, false)
                   AS in_place
        FROM tidings.queue q
        JOIN tidings.message_rows m ON m.id = q.message_id
        JOIN tidings.events ev ON ev.id = m.event_ref
        JOIN line ln ON ln.endpoint_id = m.endpoint_id
                    AND ln.ordering_key = coalesce(ev.ordering_key, '')
        WHERE q.message_id = ANY (p_message_ids) AND q.status = 'pending'
    ),
    at_end AS (
        SELECT t.id, row_number() OVER (ORDER BY t.old_seq NULLS LAST, t.id) AS rank
        FROM target t
        WHERE NOT t.in_place
    ),
    placement AS MATERIALIZED (
        SELECT t.id, t.ordering_key, t.in_place, coalesce(p.seq, t.old_seq) AS seq,
               CASE WHEN t.in_place AND t.old_seq = t.head_seq THEN 'pending'
                    ELSE 'waiting' END::tidings.message_status AS status
        FROM target t
        LEFT JOIN at_end a ON a.id = t.id
        LEFT JOIN tidings.allocate_line_positions((SELECT count(*) FROM at_end)) p
            ON p.rank = a.rank
    ),
    placed_rows AS (
        UPDATE tidings.message_rows m
        SET line_key = p.ordering_key,
            line_seq = p.seq,
            line_batch_through = CASE WHEN p.in_place THEN m.line_batch_through END,
            status = p.status
        FROM placement p
        WHERE m.id = p.id
    ),
    placed AS (
        UPDATE tidings.queue q
        SET line_key = p.ordering_key, line_seq = p.seq, status = p.status
        FROM placement p
        WHERE q.message_id = p.id
        RETURNING q.message_id, q.status
    ),
    -- A line goes on from a dead letter of its own put back; one whose head is settled and that
    -- is not paused has nothing on its way (its head is chosen below).
    relined AS (
        UPDATE tidings.fifo_lines f
        SET paused_at = CASE WHEN ln.paused_at IS NOT NULL
                                  AND EXISTS (SELECT 1 FROM target t
                                              WHERE t.in_place AND t.endpoint_id = f.endpoint_id
                                                AND t.ordering_key = f.ordering_key
                                                AND t.old_seq = f.head_seq)
                             THEN NULL ELSE f.paused_at END,
            head_seq = CASE WHEN ln.paused_at IS NULL
                                 AND coalesce(ln.head_status NOT IN ('pending', 'failed',
                                                                     'in_flight'), true)
                            THEN NULL ELSE f.head_seq END
        FROM line ln
        WHERE f.endpoint_id = ln.endpoint_id AND f.ordering_key = ln.ordering_key
    )
    SELECT array_agg(p.message_id) INTO v_placed FROM placed p;

    PERFORM 1 FROM tidings.advance_lines_v1(v_endpoints, v_keys, NULL, false, true);
    RETURN QUERY
    SELECT q.message_id, q.status::text FROM tidings.queue q
    WHERE q.message_id = ANY (v_placed) ORDER BY q.message_id;
END $$;

CREATE OR REPLACE FUNCTION tidings.reorder_endpoint_v1(p_endpoint_id bigint)
RETURNS integer
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    v_ordering  text;
    v_count     integer;
    v_endpoints bigint[];
    v_keys      text[];
BEGIN
    SELECT e.ordering INTO v_ordering FROM tidings.endpoints e WHERE e.id = p_endpoint_id;
    PERFORM 1 FROM tidings.fifo_lines f WHERE f.endpoint_id = p_endpoint_id
    ORDER BY f.ordering_key FOR UPDATE;
    IF v_ordering IS DISTINCT FROM 'fifo' THEN
        -- Every unsettled message leaves its line (a head on its way too, so that it never
        -- heads a line again should the endpoint return to fifo); the waiting ones are due.
        WITH unlined AS (
            UPDATE tidings.queue q
            SET status = CASE WHEN q.status = 'waiting' THEN 'pending' ELSE q.status END,
                next_attempt_at = CASE WHEN q.status = 'waiting' THEN now()
                                       ELSE q.next_attempt_at END,
                line_key = NULL, line_seq = NULL
            WHERE q.endpoint_id = p_endpoint_id AND q.line_key IS NOT NULL
            RETURNING q.message_id, q.status
        ),
        rows_unlined AS (
            UPDATE tidings.message_rows m
            SET status = u.status, line_key = NULL, line_seq = NULL, line_batch_through = NULL
            FROM unlined u
            WHERE m.id = u.message_id
        )
        SELECT count(*)::integer INTO v_count FROM unlined;
        DELETE FROM tidings.fifo_lines f WHERE f.endpoint_id = p_endpoint_id;
        DELETE FROM tidings.fifo_line_moves mv WHERE mv.endpoint_id = p_endpoint_id;
        RETURN v_count;
    END IF;

    WITH target AS (
        SELECT q.message_id AS id, coalesce(ev.ordering_key, '') AS ordering_key,
               row_number() OVER (ORDER BY q.message_id) AS rank
        FROM tidings.queue q
        JOIN tidings.message_rows m ON m.id = q.message_id
        JOIN tidings.events ev ON ev.id = m.event_ref
        WHERE q.endpoint_id = p_endpoint_id AND q.status = 'pending' AND m.attempts = 0
          AND q.line_key IS NULL
    ),
    placement AS MATERIALIZED (
        SELECT t.id, t.ordering_key, p.seq
        FROM target t
        JOIN tidings.allocate_line_positions((SELECT count(*) FROM target)) p ON p.rank = t.rank
    ),
    joined_rows AS (
        UPDATE tidings.message_rows m
        SET status = 'waiting', line_key = p.ordering_key, line_seq = p.seq
        FROM placement p
        WHERE m.id = p.id
    ),
    joined AS (
        UPDATE tidings.queue q
        SET status = 'waiting', line_key = p.ordering_key, line_seq = p.seq
        FROM placement p
        WHERE q.message_id = p.id AND q.status = 'pending'
        RETURNING q.line_key
    )
    SELECT count(*)::integer, array_agg(DISTINCT j.line_key) INTO v_count, v_keys FROM joined j;
    IF v_count > 0 THEN
        SELECT array_agg(p_endpoint_id) INTO v_endpoints FROM unnest(v_keys);
        PERFORM 1 FROM tidings.advance_lines_v1(v_endpoints, v_keys, NULL, false, true);
    END IF;
    RETURN v_count;
END $$;

CREATE OR REPLACE FUNCTION tidings.keep_live_attempts(partition text, after_id bigint, batch_size integer)
RETURNS TABLE (scanned integer, kept integer, last_id bigint)
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
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
            JOIN tidings.message_rows m ON m.id = b.message_id
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

CREATE OR REPLACE FUNCTION tidings.drop_oldest_attempt_partition(cutoff timestamptz, lock_timeout_ms integer)
RETURNS text
LANGUAGE plpgsql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    victim text := tidings.oldest_attempt_partition(cutoff);
    newest_message bigint;
BEGIN
    IF victim IS NULL THEN
        RETURN NULL;
    END IF;
    EXECUTE format('SELECT max(message_id) FROM tidings.%I', victim) INTO newest_message;
    IF newest_message >= (SELECT min(m.id) FROM tidings.message_rows m) THEN
        RETURN NULL;
    END IF;
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    EXECUTE format('DROP TABLE tidings.%I', victim);
    RETURN victim;
END $$;

-- Who reads and writes what now (dal/access.py names the statements). The message rows kept
-- the grants of the table they were; what each role no longer needs there is revoked first.
REVOKE ALL ON tidings.message_rows FROM tidings_ingest, tidings_operator, tidings_health_monitor,
    tidings_dead_letter_report, tidings_pruner;
REVOKE ALL ON tidings.attempt_log FROM tidings_ingest, tidings_operator, tidings_health_monitor,
    tidings_percentiles;

DO $$
DECLARE
    v_role text;
BEGIN
    FOREACH v_role IN ARRAY ARRAY['tidings_ingest', 'tidings_operator'] LOOP
        EXECUTE format($grants$
            -- A message read whole (get_message, list_messages, a line's head), as it was.
            GRANT SELECT (id, event_ref, endpoint_id, event_type, status, attempts, max_attempts,
                          created_at, next_attempt_at, delivered_at, dead_lettered_at,
                          lease_token, last_error, last_status_code, last_response_ms,
                          line_key, line_seq)
                ON tidings.messages TO %1$I;
            -- Replay, resend and recovery put messages back in the queue; deleting an endpoint
            -- or an application takes theirs out.
            GRANT SELECT (id, event_ref, endpoint_id, event_type, status, attempts, max_attempts,
                          created_at, next_attempt_at, delivered_at, dead_lettered_at,
                          last_error, last_status_code, last_response_ms, line_key, line_seq,
                          last_attempted_at, last_excerpt),
                  UPDATE (status, attempts, next_attempt_at, delivered_at, dead_lettered_at,
                          dead_letter_reported_at, last_error, last_attempted_at, last_excerpt)
                ON tidings.message_rows TO %1$I;
            GRANT SELECT (message_id, endpoint_id, status, next_attempt_at, line_key),
                  INSERT (message_id, endpoint_id, status, next_attempt_at, line_key, line_seq),
                  UPDATE (status, next_attempt_at, lease_token),
                  DELETE
                ON tidings.queue TO %1$I;
            GRANT SELECT (id, message_id, endpoint_id, attempt_number, attempted_at,
                          status_code, response_ms, error_class, response_excerpt),
                  INSERT (message_id, endpoint_id, attempt_number, attempted_at, status_code,
                          response_ms, response_excerpt)
                ON tidings.attempt_log TO %1$I;
            GRANT SELECT (recorded_at, endpoint_ids, message_ids, response_ms, delivered)
                ON tidings.attempt_tallies TO %1$I;
            GRANT SELECT ON tidings.attempt_minutes TO %1$I;
            GRANT SELECT (job, rolled_to) ON tidings.job_state TO %1$I;
        $grants$, v_role);
    END LOOP;
END $$;

GRANT SELECT (recorded_at, endpoint_ids, response_ms, delivered)
    ON tidings.attempt_tallies TO tidings_percentiles;
GRANT SELECT, INSERT, UPDATE, DELETE ON tidings.attempt_minutes TO tidings_percentiles;

GRANT SELECT (id, endpoint_id, status, created_at, delivered_at, dead_lettered_at),
      UPDATE (status, dead_lettered_at, dead_letter_reported_at, last_error)
    ON tidings.message_rows TO tidings_health_monitor;
-- (Its row locks on queue rows need UPDATE on one column; it deletes them anyway.)
GRANT SELECT (message_id, endpoint_id, status, next_attempt_at), UPDATE (status), DELETE
    ON tidings.queue TO tidings_health_monitor;
GRANT SELECT (endpoint_id, attempted_at, status_code) ON tidings.attempt_log
    TO tidings_health_monitor;
GRANT SELECT (recorded_at, endpoint_ids, message_ids, delivered)
    ON tidings.attempt_tallies TO tidings_health_monitor;

GRANT SELECT (id, endpoint_id, status, attempts, dead_lettered_at, dead_letter_reported_at,
              last_error, last_status_code),
      UPDATE (dead_letter_reported_at)
    ON tidings.message_rows TO tidings_dead_letter_report;

-- (Its row locks on message rows need UPDATE on one column; it deletes them anyway.)
GRANT SELECT (id, event_ref, status, dead_lettered_at, dead_letter_reported_at),
      UPDATE (dead_letter_reported_at),
      DELETE
    ON tidings.message_rows TO tidings_pruner;

-- Where it stopped in a day of tallies too large for one run.
GRANT SELECT (job, details), INSERT (job, details), UPDATE (details, updated_at)
    ON tidings.job_state TO tidings_pruner;

GRANT EXECUTE ON FUNCTION tidings.oldest_tally_partition(timestamptz),
                          tidings.prune_tallied_messages(text, tid, integer, timestamptz,
                                                          timestamptz),
                          tidings.prune_default_tallies(integer, timestamptz, timestamptz)
    TO tidings_pruner;

-- 0.2.0's senders begin their rows with begin_attempts_v3 while this release deploys: it begins
-- them as begin_attempts_v4 does, over the queue, and leaves out the messages v4 carries with a
-- FIFO head (0.2.0 sends every message alone; those messages wait for their own turn).
CREATE OR REPLACE FUNCTION tidings.begin_attempts_v3(
    p_ids bigint[],
    p_tokens uuid[],
    p_attempts integer[],
    p_want_payload boolean[],
    p_lease_s double precision,
    p_hold_back_s double precision
) RETURNS TABLE (
    message_id bigint,
    endpoint_id bigint,
    permitted boolean,
    lease_token uuid,
    event_type text,
    event_id text,
    attempts integer,
    max_attempts integer,
    url text,
    timeout_ms integer,
    rate_limit_per_s double precision,
    max_in_flight integer,
    retry_schedule integer[],
    secret_data_keys bigint[],
    secrets bytea[],
    payload text,
    payload_format text,
    event_created_at timestamptz,
    credential_ids bigint[],
    credential_kinds text[],
    credential_data_keys bigint[],
    credentials bytea[]
)
LANGUAGE sql
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $$
    SELECT b.message_id, b.endpoint_id, b.permitted, b.lease_token, b.event_type, b.event_id,
           b.attempts, b.max_attempts, b.url, b.timeout_ms, b.rate_limit_per_s,
           b.max_in_flight, b.retry_schedule, b.secret_data_keys, b.secrets, b.payload,
           b.payload_format, b.event_created_at, b.credential_ids, b.credential_kinds,
           b.credential_data_keys, b.credentials
    FROM tidings.begin_attempts_v4(p_ids, p_tokens, p_attempts, p_want_payload, p_lease_s,
                                   p_hold_back_s) b
    WHERE b.batch_of IS NULL
    ORDER BY b.message_id
$$;

-- The release before 0.2.0 is gone from every deploy: its functions go.
DROP FUNCTION tidings.begin_attempts_v1(bigint[], uuid[], integer[], boolean[], double precision,
                                        double precision);
DROP FUNCTION tidings.begin_attempts_v2(bigint[], uuid[], integer[], boolean[], double precision,
                                        double precision);
DROP FUNCTION tidings.claim_due_v1(integer, double precision, double precision, integer, integer);
