-- Speed lanes: a slow receiver slows only its own messages.
--
-- A sender batch lasts as long as its slowest request, so an endpoint that answers in seconds
-- used to hold back every endpoint whose rows shared its batches. The claim now tells each row's
-- lane: slow for an endpoint one of whose attempts was slow within the last hold (the sender
-- marks it: endpoint_health.slow_until), fast otherwise. The claimer sends each lane to its own
-- queue: the fast lane's senders take batches, the slow lane's take one message at a time, with
-- a concurrency of their own, so neither a slow endpoint's time nor its Lambda bill falls on
-- another's. A slow endpoint also has a cap on its rows in flight (the claimer's setting, or the
-- endpoint's own max_in_flight, which caps it in either lane): it gets its messages at the pace
-- it can take and cannot fill the slow lane alone. An endpoint that has never answered is
-- "untried": its speed is unknown, so it gets p_untried_max_in_flight rows at a time (one, from
-- the claimer) until it answers; the sender cuts an untried row's request short at the slow
-- threshold and records its outcome as soon as it comes, so an untried endpoint holds a fast
-- batch no longer than the threshold, and a quick one is out of its cap at its first answer.

ALTER TABLE tidings.endpoint_health ADD COLUMN slow_until timestamptz;

ALTER TABLE tidings.endpoints
    ADD COLUMN max_in_flight integer
    CONSTRAINT endpoints_max_in_flight_check CHECK (max_in_flight BETWEEN 1 AND 1000);

-- rows_in_flight: an endpoint's rows in flight under a live lease, counted up to p_limit (an
-- index range of messages_in_flight_by_endpoint, migration 0095; a sequential count until it
-- exists). A capped endpoint has no other rows on their way: the sender sends its retries
-- through the database, never back through the queue, so each of its attempts passes the claim.
CREATE FUNCTION tidings.rows_in_flight(p_endpoint_id bigint, p_limit integer) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT count(*)::integer
    FROM (SELECT 1 FROM tidings.messages m
          WHERE m.endpoint_id = p_endpoint_id
            AND m.status = 'in_flight'
            AND m.next_attempt_at > now()
          LIMIT p_limit) f
$$;

-- claim_due_v2: claim_due_v1 (0041), and
--   * each row comes with its endpoint's lane (slow: true for the slow lane) and whether its
--     endpoint has never answered (untried);
--   * an endpoint with a cap (p_slow_max_in_flight while it is slow, p_untried_max_in_flight
--     while it is untried, its own max_in_flight when lower or in the fast lane; NULL: no cap) gets no more rows than leave its rows in flight within the cap. Its health
--     row is locked like a rate-limited endpoint's bucket (SKIP LOCKED, kept to the commit) and
--     its rows in flight are counted again, after the lock, by a statement of their own (2b).
-- An endpoint without a cap costs nothing more than before.

CREATE FUNCTION tidings.claim_due_v2(
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
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    v_capacity   integer;
    v_endpoints  bigint[];
    v_quotas     integer[];
    v_tokens     double precision[];
    v_slow       boolean[];
    v_untried    boolean[];
    v_caps       integer[];
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
        FROM queued q
        JOIN tidings.endpoints e ON e.id = q.endpoint_id
        JOIN tidings.endpoint_health h ON h.endpoint_id = q.endpoint_id
        WHERE q.next_attempt_at <= now()
          AND e.enabled AND e.deleted_at IS NULL
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

    -- 3. Lease each endpoint's part, oldest due first, and debit the buckets.
    RETURN QUERY
    WITH part AS (
        SELECT p.endpoint_id, p.quota, p.tokens, p.slow, p.untried
        FROM unnest(v_endpoints, v_quotas, v_tokens, v_slow, v_untried)
             AS p (endpoint_id, quota, tokens, slow, untried)
        WHERE p.quota > 0
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
                THEN ev.payload::text END,
           pt.slow, pt.untried
    FROM leased l
    JOIN part pt ON pt.endpoint_id = l.endpoint_id
    CROSS JOIN LATERAL (
        SELECT e.event_id, e.payload FROM tidings.events e WHERE e.id = l.event_ref
    ) ev
    ORDER BY l.id;
END $$;

-- mark_slow_v1: the sender marks endpoints whose attempt was slow (or timed out): they are in the
-- slow lane until p_hold_s from now. A row already marked for more than half the hold is left
-- alone, so a persistently slow endpoint costs one small write per half hold, not one per
-- attempt. Health rows are locked in endpoint order, as record_outcomes_v1 locks them.
CREATE FUNCTION tidings.mark_slow_v1(p_endpoint_ids bigint[], p_hold_s double precision)
RETURNS integer
LANGUAGE sql AS $$
    WITH due AS (
        SELECT h.endpoint_id
        FROM tidings.endpoint_health h
        WHERE h.endpoint_id = ANY (p_endpoint_ids)
          AND (h.slow_until IS NULL
               OR h.slow_until < now() + p_hold_s / 2 * interval '1 second')
        ORDER BY h.endpoint_id
        FOR NO KEY UPDATE
    ),
    marked AS (
        UPDATE tidings.endpoint_health h
        SET slow_until = now() + p_hold_s * interval '1 second'
        FROM due
        WHERE h.endpoint_id = due.endpoint_id
        RETURNING 1
    )
    SELECT count(*)::integer FROM marked
$$;

ALTER FUNCTION tidings.claim_due_v2(integer, double precision, double precision, integer, integer,
                                    integer, integer)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
ALTER FUNCTION tidings.mark_slow_v1(bigint[], double precision)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
GRANT EXECUTE ON FUNCTION tidings.claim_due_v2(integer, double precision, double precision,
                                               integer, integer, integer, integer)
    TO tidings_claimer;
GRANT EXECUTE ON FUNCTION tidings.mark_slow_v1(bigint[], double precision) TO tidings_sender;
