-- record_outcomes_v1 (0150) replaced in place (same arguments, same answer): a batch of
-- successes that only moves a healthy circuit's last success on no longer runs the statement
-- that applies the circuit's consequences.
--
-- That statement (the health update, the threshold crossings, the disabled endpoints, the
-- operational events) takes a custom plan on every call, and it ran for every endpoint's first
-- success and then about once a second for each endpoint taking traffic (one record call in
-- forty under bench/e2e.py's four endpoints; one an endpoint a second in a deployment). Those
-- calls now write the health row by a small statement of their own, and the large one runs only
-- for a circuit that changes, a message that changes (operational events) or an endpoint to
-- disable. bench/statements.py: such a call costs 0.55 ms of the server's CPU, against 0.725 ms
-- before and 0.375 ms for a call that writes nothing.
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
    v_refreshed bigint[];
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

    -- What nearly every counted summary is: successes alone, against a circuit closed without
    -- failures, whose last success moved on by more than a second (an endpoint's first success,
    -- then one a second while it takes traffic). For it the statement below would only move the
    -- last success and failure on: no state, no count, no threshold, no event. Written here by a
    -- small statement, where the one below takes a custom plan of a dozen CTEs on every call
    -- (about half of what such a call costs above one that writes nothing). Every counted row
    -- is locked here, in endpoint order (the statement below then locks some of them again,
    -- already held), and the circuit is read from the row as locked: a row another sender
    -- changed meanwhile (a failure counted) goes to the statement below.
    IF cardinality(v_counted) > 0 THEN
        WITH locked AS (
            SELECT h.endpoint_id, h.state, h.consecutive_failures
            FROM tidings.endpoint_health h
            WHERE h.endpoint_id = ANY (v_counted)
            ORDER BY h.endpoint_id
            FOR UPDATE
        ),
        refreshed AS (
            UPDATE tidings.endpoint_health h
            SET last_success_at = greatest(h.last_success_at, s.last_success_at),
                last_failure_at = greatest(h.last_failure_at, s.last_failure_at),
                cooldown_s = p_base_cooldown_s,
                opened_at = NULL,
                probe_token = NULL,
                probe_started_at = NULL
            FROM locked l
            JOIN unnest(p_health_endpoint_ids, p_has_success, p_trailing_failures,
                        p_last_success_at, p_last_failure_at)
                AS s(endpoint_id, has_success, trailing_failures, last_success_at,
                     last_failure_at)
                ON s.endpoint_id = l.endpoint_id
            WHERE h.endpoint_id = l.endpoint_id
              AND l.state = 'closed' AND l.consecutive_failures = 0
              AND s.has_success AND s.trailing_failures = 0
            RETURNING h.endpoint_id
        )
        SELECT coalesce(array_agg(r.endpoint_id), '{}') INTO v_refreshed FROM refreshed r;
        v_counted := ARRAY(SELECT c FROM unnest(v_counted) AS c WHERE c <> ALL (v_refreshed));
    END IF;

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
