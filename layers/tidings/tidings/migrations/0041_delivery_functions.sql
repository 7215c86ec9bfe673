-- The sender's hot statements as functions with versioned names. PostgreSQL keeps a PL/pgSQL
-- function's plans for the rest of the session, so a statement that ran a thousand times is
-- planned once, without protocol-level prepared statements (which would pin RDS Proxy sessions).
-- A release that changes one of them adds a _v2 beside it and drops the _v1 a release later: while
-- a deploy runs, the functions of the release before may still be called.

-- Retry schedules: an endpoint may have its own list of waits between attempts (seconds), which
-- the sender reads when it begins an attempt; NULL means the deployment's schedule. A nullable
-- column without a default changes the catalog only; the CHECK reads the (small) endpoints table
-- once.
ALTER TABLE tidings.endpoints
    ADD COLUMN retry_schedule integer[]
    CONSTRAINT endpoints_retry_schedule_check CHECK (
        retry_schedule IS NULL OR (
            array_ndims(retry_schedule) = 1
            AND cardinality(retry_schedule) BETWEEN 1 AND 50
            AND array_position(retry_schedule, NULL) IS NULL
            AND 1 <= ALL (retry_schedule)
            AND 86400 >= ALL (retry_schedule)));

-- claim_due_v1: leases up to p_batch_size due rows (pending or failed rows whose time has come,
-- and in-flight rows whose lease expired) for p_lease_s seconds and returns them, the payload
-- inlined when its JSON text is at most p_inline_payload_bytes; never more than p_max_in_flight
-- rows in flight in all (leasing faster than senders deliver would only let leases expire in the
-- queue and the rows be claimed again).
--   * Fair: the batch is split equally among the applications with due work, then each
--     application's part equally among its due endpoints. Where there are more of them than rows
--     to give, or the split is uneven, those after the rotation's cursor come first and the cursor
--     moves to the last one that got the larger part: each round continues where the last
--     stopped, so every endpoint with due work is served within ceil(busy / batch) + 1 rounds.
--     A part an endpoint cannot use is not passed on: the claimer claims again at once after a
--     round that leased rows.
--   * Circuits and rate limits: disabled and deleted endpoints and open circuits are skipped; an
--     endpoint whose cooldown has passed, or whose probe went stale (no outcome within
--     p_probe_lease_s), gets one row, the candidate probe. A rate-limited endpoint gets no more
--     rows than its token bucket holds, and the bucket is debited here.
--   * Cost follows the queued work, not the endpoint count: endpoints with work are found by a
--     loose index scan of messages_claimable, one probe per endpoint that holds queued rows (due
--     or not); endpoints with nothing queued are never visited.
--   * Locks, all taken with SKIP LOCKED, so a claimer never waits for another and cannot be part
--     of a deadlock: the token buckets of due rate-limited endpoints (kept until the claim
--     commits, so two claimers never spend the same tokens), the rotation rows it moves, the
--     message rows it leases. The cursors are read without a lock and moved by compare-and-set,
--     so they never go backwards; two overlapping claimers start from the same place and take
--     different rows.
-- Three statements: the capacity, who gets how many rows, and the lease.
CREATE FUNCTION tidings.claim_due_v1(
    p_batch_size            integer,
    p_lease_s               double precision,
    p_probe_lease_s         double precision,
    p_inline_payload_bytes  integer,
    p_max_in_flight         integer
) RETURNS TABLE (message_id bigint, endpoint_id bigint, event_type text, event_id text,
                 attempts integer, lease_token uuid, payload text)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_capacity   integer;
    v_endpoints  bigint[];
    v_quotas     integer[];
    v_tokens     double precision[];
BEGIN
    -- 1. Capacity: no more than max_in_flight rows in flight in all (live leases only).
    SELECT least(p_batch_size, greatest(0, p_max_in_flight - count(*)))::integer
    INTO v_capacity
    FROM (
        SELECT 1 FROM tidings.messages m
        WHERE m.status = 'in_flight' AND m.next_attempt_at > now()
        LIMIT p_max_in_flight
    ) leased_now;
    IF v_capacity <= 0 THEN
        RETURN;
    END IF;

    -- 2. Who gets how many rows this round.
    WITH RECURSIVE queued AS (
        -- Loose index scan of messages_claimable (endpoint_id, next_attempt_at): each step jumps
        -- to the first entry after the previous endpoint, which is the next endpoint's earliest
        -- claimable row, so its due-ness is known from that one probe.
        (SELECT m.endpoint_id, m.next_attempt_at
         FROM tidings.messages m
         WHERE m.status IN ('pending', 'failed', 'in_flight')
         ORDER BY m.endpoint_id, m.next_attempt_at
         LIMIT 1)
        UNION ALL
        SELECT nxt.endpoint_id, nxt.next_attempt_at
        FROM queued q
        CROSS JOIN LATERAL (
            SELECT m.endpoint_id, m.next_attempt_at
            FROM tidings.messages m
            WHERE m.status IN ('pending', 'failed', 'in_flight')
              AND m.endpoint_id > q.endpoint_id
            ORDER BY m.endpoint_id, m.next_attempt_at
            LIMIT 1
        ) nxt
    ),
    candidate AS (
        -- Due endpoints that are enabled and whose circuit lets something through: closed,
        -- cooled down after opening, or half open with a probe gone stale.
        SELECT e.id AS endpoint_id, e.app_id, e.rate_limit_per_s, h.state
        FROM queued q
        JOIN tidings.endpoints e ON e.id = q.endpoint_id
        JOIN tidings.endpoint_health h ON h.endpoint_id = q.endpoint_id
        WHERE q.next_attempt_at <= now()
          AND e.enabled AND e.deleted_at IS NULL
          AND (h.state = 'closed'
               OR tidings.probe_may_start(h.state, h.opened_at, h.cooldown_s,
                                          h.probe_started_at, p_probe_lease_s))
    ),
    bucket AS MATERIALIZED (
        -- The token buckets of due rate-limited candidates, read under a lock that the claim
        -- keeps until it commits (SKIP LOCKED: a bucket another claimer holds is skipped this
        -- round, so two claimers never spend the same tokens).
        SELECT h.endpoint_id,
               least(greatest(c.rate_limit_per_s, 1),
                     h.rate_tokens
                     + extract(epoch FROM now() - h.rate_refilled_at) * c.rate_limit_per_s)
                   AS tokens
        FROM candidate c
        JOIN tidings.endpoint_health h ON h.endpoint_id = c.endpoint_id
        WHERE c.rate_limit_per_s IS NOT NULL
        FOR UPDATE OF h SKIP LOCKED
    ),
    eligible AS MATERIALIZED (
        SELECT c.endpoint_id, c.app_id, b.tokens,
               least(CASE WHEN c.state = 'closed' THEN v_capacity ELSE 1 END,
                     CASE WHEN c.rate_limit_per_s IS NULL THEN v_capacity
                          ELSE floor(b.tokens)::integer END) AS allowance
        FROM candidate c
        LEFT JOIN bucket b ON b.endpoint_id = c.endpoint_id
        WHERE c.rate_limit_per_s IS NULL OR b.endpoint_id IS NOT NULL
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
        SELECT t.endpoint_id, t.app_id, t.tokens, t.turn, t.endpoints, t.after_endpoint_id,
               a.quota AS app_quota,
               least(t.allowance,
                     a.quota / t.endpoints
                     + CASE WHEN t.turn <= a.quota % t.endpoints THEN 1 ELSE 0 END) AS quota
        FROM (
            SELECT g.endpoint_id, g.app_id, g.tokens, g.allowance,
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
    SELECT array_agg(t.endpoint_id), array_agg(t.quota), array_agg(t.tokens)
    INTO v_endpoints, v_quotas, v_tokens
    FROM endpoint_turn t
    WHERE t.quota > 0;

    IF v_endpoints IS NULL THEN
        RETURN;
    END IF;

    -- 3. Lease each endpoint's part, oldest due first, and debit the buckets.
    RETURN QUERY
    WITH part AS (
        SELECT p.endpoint_id, p.quota, p.tokens
        FROM unnest(v_endpoints, v_quotas, v_tokens) AS p(endpoint_id, quota, tokens)
    ),
    picked AS MATERIALIZED (
        SELECT due.id, due.endpoint_id
        FROM part p
        CROSS JOIN LATERAL (
            SELECT q.id, q.endpoint_id
            FROM tidings.messages q
            WHERE q.endpoint_id = p.endpoint_id
              AND q.status IN ('pending', 'failed', 'in_flight')
              AND q.next_attempt_at <= now()
            ORDER BY q.next_attempt_at
            LIMIT p.quota
            FOR UPDATE OF q SKIP LOCKED
        ) due
    ),
    leased AS (
        UPDATE tidings.messages m
        SET status = 'in_flight',
            lease_token = gen_random_uuid(),
            next_attempt_at = now() + p_lease_s * interval '1 second'
        -- An id array, not a join: the rows are fetched by primary key.
        WHERE m.id = ANY (ARRAY(SELECT pk.id FROM picked pk))
        RETURNING m.id, m.endpoint_id, m.event_ref, m.event_type, m.attempts, m.lease_token
    ),
    spent AS (
        UPDATE tidings.endpoint_health h
        SET rate_tokens = p.tokens - c.taken, rate_refilled_at = now()
        FROM part p
        JOIN (SELECT pk.endpoint_id, count(*) AS taken FROM picked pk GROUP BY pk.endpoint_id) c
            ON c.endpoint_id = p.endpoint_id
        WHERE h.endpoint_id = p.endpoint_id AND p.tokens IS NOT NULL
    )
    SELECT l.id, l.endpoint_id, l.event_type, ev.event_id, l.attempts, l.lease_token,
           CASE WHEN octet_length(ev.payload::text) <= p_inline_payload_bytes
                THEN ev.payload::text END
    FROM leased l
    CROSS JOIN LATERAL (
        SELECT e.event_id, e.payload FROM tidings.events e WHERE e.id = l.event_ref
    ) ev
    ORDER BY l.id;
END $$;

-- begin_attempts_v1: a sender starts work on queued rows. It keeps the rows it still holds (the
-- lease token matches, and the queue message is for the row's next attempt: a copy of an earlier
-- message, which a queue may deliver again, is stale), decides per row whether the endpoint's
-- circuit lets it through, and returns what sending needs. A permitted row gets a fresh lease
-- token, returned here, which the sender records its outcome under: a second copy of the same
-- queue message, begun later, no longer holds the row and sends nothing. What sending needs
-- includes the endpoint's own retry schedule, so that deciding an attempt's fate reads nothing. Its lease is made to
-- last at least p_lease_s from now: left as it is when it already does (the claim leases with
-- room for the time in the queue), so that the update changes no indexed column and stays on
-- the row's page (a HOT update). Exactly one probe per half-open endpoint: the probe slot is
-- taken by an atomic update of the health row, so of many senders racing for it only one wins.
-- Rows the circuit holds back return to the database queue, due when the cooldown ends, without
-- counting an attempt; so do the retries of a rate-limited endpoint that came back through the
-- queue, so that every request to it spends a token the claim took from its bucket. The updates
-- check the lease again: a row leased anew while this statement waited for it is left to its new
-- holder and absent from the result. A permitted row comes with its endpoint's signing secrets,
-- encrypted, newest first, with the data key of each.
CREATE FUNCTION tidings.begin_attempts_v1(
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
    retry_schedule integer[],
    secret_data_keys bigint[],
    secrets bytea[],
    payload text
)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH request AS (
        SELECT r.id, r.token, r.attempt, r.want_payload
        FROM unnest(p_ids, p_tokens, p_attempts, p_want_payload)
            AS r(id, token, attempt, want_payload)
    ),
    held AS (
        SELECT m.id, m.endpoint_id, r.token, r.attempt, r.want_payload,
               -- A rate-limited endpoint's requests spend the tokens the claim takes from its
               -- bucket: a retry that came back through the queue has none.
               m.status = 'failed' AND e.rate_limit_per_s IS NOT NULL AS without_token
        FROM tidings.messages m
        JOIN request r ON r.id = m.id AND m.lease_token = r.token AND m.attempts = r.attempt - 1
        JOIN tidings.endpoints e ON e.id = m.endpoint_id
        WHERE m.status IN ('in_flight', 'failed')
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
    started AS (
        UPDATE tidings.messages m
        SET status = 'in_flight',
            lease_token = gen_random_uuid(),
            next_attempt_at = greatest(m.next_attempt_at,
                                       now() + p_lease_s * interval '1 second')
        FROM verdict v
        WHERE m.id = v.id AND v.permitted
          AND m.lease_token = v.token AND m.attempts = v.attempt - 1
        RETURNING m.id, m.lease_token
    ),
    held_back AS (
        UPDATE tidings.messages m
        SET status = tidings.unleased_status(m.attempts),
            lease_token = NULL,
            next_attempt_at = greatest(v.cooldown_ends_at,
                                       now() + p_hold_back_s * interval '1 second')
        FROM verdict v
        WHERE m.id = v.id AND NOT v.permitted
          AND m.lease_token = v.token AND m.attempts = v.attempt - 1
        RETURNING m.id
    )
    SELECT v.id, v.endpoint_id, s.id IS NOT NULL, s.lease_token,
           m.event_type, ev.event_id, m.attempts,
           coalesce(m.max_attempts, e.max_attempts),
           e.url, e.timeout_ms, e.rate_limit_per_s, e.retry_schedule, sk.data_keys,
           sk.ciphertexts,
           CASE WHEN v.want_payload THEN ev.payload::text END
    FROM verdict v
    JOIN tidings.messages m ON m.id = v.id
    JOIN tidings.endpoints e ON e.id = v.endpoint_id
    JOIN tidings.events ev ON ev.id = m.event_ref
    LEFT JOIN started s ON s.id = v.id
    -- The permitted rows' signing secrets, newest first: the current one and those still in
    -- their overlap, encrypted (tidings.endpoint_secrets, migration 0070; the sender decrypts).
    LEFT JOIN LATERAL (
        SELECT array_agg(es.data_key_id ORDER BY es.id DESC) AS data_keys,
               array_agg(es.ciphertext ORDER BY es.id DESC) AS ciphertexts
        FROM tidings.endpoint_secrets es
        WHERE s.id IS NOT NULL
          AND es.endpoint_id = v.endpoint_id
          AND (es.expires_at IS NULL OR es.expires_at > now())
    ) sk ON true
    WHERE s.id IS NOT NULL OR v.id IN (SELECT hb.id FROM held_back hb)
    ORDER BY v.id;
END $$;

-- record_outcomes_v1: writes the outcomes of a batch of attempts atomically. Each row is
-- finished, rescheduled or dead-lettered only while it is still the attempt the outcome is for:
-- the lease token the sender began it under still holds it, and its attempt count says this
-- attempt is the next (a stale copy of an earlier queue message, or a slow sender, never
-- overwrites a newer outcome). Every attempt is logged in one multi-row insert. Each endpoint's
-- circuit is updated once, from the batch's summary, its health row locked in endpoint order so
-- that concurrent senders cannot deadlock; a batch that only succeeded against a closed circuit
-- with no failures changes nothing there but the time of the last success, which is kept to the
-- second, so such batches, the common case, neither wait for nor block each other. Endpoints that
-- answered 410 are disabled. Safe to call again after a lost connection: attempts already logged
-- are not logged twice, their endpoints' circuits are not counted twice (summaries given without
-- any outcome are always applied), and the rows an earlier call wrote are returned as written
-- again, so the caller still sends their retry messages. Returns the rows written, the circuit
-- transitions and the endpoints disabled.
CREATE FUNCTION tidings.record_outcomes_v1(
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
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    WITH outcome AS (
        SELECT *
        FROM jsonb_to_recordset(p_outcomes)
            AS o(id bigint, token uuid, endpoint_id bigint, status tidings.message_status,
                 retry_at timestamptz, keep_lease boolean, attempt_number integer,
                 attempted_at timestamptz, status_code integer, response_ms integer,
                 error_class text, excerpt text)
    ),
    written AS (
        UPDATE tidings.messages m
        SET status = o.status,
            attempts = m.attempts + 1,
            delivered_at = CASE WHEN o.status = 'delivered' THEN now() END,
            dead_lettered_at = CASE WHEN o.status = 'dead_letter' THEN now() END,
            -- A new dead letter is one the scheduled report has yet to report.
            dead_letter_reported_at = NULL,
            next_attempt_at = CASE WHEN o.status = 'failed' THEN o.retry_at
                                   ELSE m.next_attempt_at END,
            lease_token = CASE WHEN o.status = 'failed' AND o.keep_lease THEN m.lease_token END,
            last_error = o.error_class,
            last_status_code = o.status_code,
            last_response_ms = o.response_ms
        FROM outcome o
        WHERE m.id = o.id
          AND m.lease_token = o.token
          AND m.attempts = o.attempt_number - 1
          -- Only in-flight and failed rows carry a lease token, so this means "in flight".
          AND m.status <> 'failed'
        RETURNING m.id
    ),
    logged AS (
        INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, attempted_at,
                                      status_code, response_ms, error_class, response_excerpt)
        SELECT o.id, o.endpoint_id, o.attempt_number, o.attempted_at,
               o.status_code, o.response_ms, o.error_class, o.excerpt
        FROM outcome o
        ON CONFLICT (message_id, attempted_at, attempt_number) DO NOTHING
        RETURNING message_id, endpoint_id
    ),
    recorded_before AS (
        -- This very attempt was logged already (attempted_at is the sender's own clock reading),
        -- so its insert above did nothing: an earlier call committed, and its answer was lost
        -- with the connection. Read off the insert, not looked up in attempts again.
        SELECT o.id
        FROM outcome o
        WHERE NOT EXISTS (SELECT 1 FROM logged l WHERE l.message_id = o.id)
    ),
    summary AS (
        SELECT *
        FROM unnest(p_health_endpoint_ids, p_has_success, p_trailing_failures,
                    p_last_success_at, p_last_failure_at)
            AS s(endpoint_id, has_success, trailing_failures, last_success_at, last_failure_at)
    ),
    counted AS (
        -- The summaries to apply: a batch written a second time counts once (only endpoints
        -- whose attempts were new), and a batch of successes against a closed circuit without
        -- failures, whose last success is already known to the second, changes nothing. Read
        -- without a lock: another sender's uncommitted failure is then simply ordered after it.
        -- (An endpoint that never succeeded has no last success: NULL must not skip it.)
        SELECT s.*
        FROM summary s
        JOIN tidings.endpoint_health h ON h.endpoint_id = s.endpoint_id
        WHERE (s.endpoint_id IN (SELECT l.endpoint_id FROM logged l)
               OR NOT EXISTS (SELECT 1 FROM outcome))
          AND NOT (s.trailing_failures = 0 AND h.state = 'closed'
                   AND h.consecutive_failures = 0
                   AND h.last_success_at IS NOT NULL
                   AND h.last_success_at >= s.last_success_at - interval '1 second')
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
        RETURNING h.endpoint_id, h.state, h.cooldown_s
    ),
    disabled AS (
        UPDATE tidings.endpoints e
        SET enabled = false, disabled_reason = d.reason, disabled_at = now(), updated_at = now()
        FROM unnest(p_disable_ids, p_disable_reasons) AS d(id, reason)
        WHERE e.id = d.id AND e.enabled
        RETURNING e.id
    )
    SELECT (SELECT coalesce(array_agg(w.id ORDER BY w.id), '{}')
            FROM (SELECT id FROM written UNION SELECT id FROM recorded_before) w),
           (SELECT coalesce(json_agg(json_build_object(
                        'endpoint_id', h.endpoint_id, 'from', b.state, 'to', h.state,
                        'cooldown_s', h.cooldown_s) ORDER BY h.endpoint_id), '[]')
            FROM health h JOIN before b ON b.endpoint_id = h.endpoint_id
            WHERE h.state <> b.state),
           (SELECT coalesce(array_agg(d.id ORDER BY d.id), '{}') FROM disabled d)
    INTO written_ids, transitions, disabled_ids;
END $$;

-- release_leases_v1: gives leased rows back without an attempt (their queue message could not be
-- sent, or the sender had no time left to send), due again after p_delay_s. Guarded by the lease
-- token: a row leased again meanwhile is left alone. Returns the ids released.
CREATE FUNCTION tidings.release_leases_v1(
    p_ids bigint[], p_tokens uuid[], p_delay_s double precision
) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    UPDATE tidings.messages m
    SET status = tidings.unleased_status(m.attempts),
        lease_token = NULL,
        next_attempt_at = now() + p_delay_s * interval '1 second'
    FROM unnest(p_ids, p_tokens) AS r(id, token)
    WHERE m.id = r.id
      AND m.lease_token = r.token
      AND m.status IN ('in_flight', 'failed')
    RETURNING m.id;
END $$;
