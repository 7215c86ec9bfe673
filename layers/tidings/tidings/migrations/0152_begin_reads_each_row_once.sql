-- begin_attempts_v4 (0150) replaced in place (same arguments, same answer), reading each row of
-- the batch, its message row and its endpoint once, by primary key.
--
-- The statement it replaces looked a row's message row up four times (the lease check, the FIFO
-- steps, the rows held back, the answer) and its endpoint five, and joined the endpoints to the
-- request by a hash join built once per row: under its generic plan, with a small endpoints
-- table, that is a sequential scan of every endpoint for every row of the batch (with
-- bench/e2e.py's hundred endpoints, over a third of a hundred-row begin under EXPLAIN ANALYZE).
-- Now the lease check reads the queue row,
-- the message row, the endpoint and its health once each, by key, and carries what the later
-- steps and the answer need; the FIFO steps read nothing for a row whose endpoint does not batch;
-- the answer reads only the event. And the function now plans without sequential scans: its
-- generic plan expects one row where the batch brings a hundred, and so took a sequential scan
-- of a small table (endpoints, health, secrets: a few pages) for cheaper than a look-up by key,
-- then ran it once per row. Every read it makes has its key (the plan guards hold it to that),
-- so this only keeps the planner from that mistake.
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
    SET enable_seqscan = off
AS $$
#variable_conflict use_column
BEGIN
    RETURN QUERY
    WITH request AS (
        SELECT r.id, r.token, r.attempt, r.want_payload
        FROM unnest(p_ids, p_tokens, p_attempts, p_want_payload)
            AS r(id, token, attempt, want_payload)
    ),
    -- The rows still leased under the token and at the attempt the request names, with what the
    -- later steps and the answer need of their message rows, endpoints and circuits. Each look-up
    -- by primary key alone: OFFSET 0 keeps the conditions below out of it, where they would let
    -- the planner scan a partial index of the queue, or every endpoint, once per row.
    held AS (
        SELECT q.message_id AS id, q.endpoint_id, r.token, r.attempt, r.want_payload,
               m.event_ref, m.event_type, m.attempts,
               coalesce(m.max_attempts, e.max_attempts) AS max_attempts,
               m.line_key, m.line_seq, m.line_batch_through,
               e.usable, e.url, e.timeout_ms, e.rate_limit_per_s, e.max_in_flight,
               e.retry_schedule, e.payload_format, e.fifo_batch_size,
               e.ordering = 'fifo' AND e.fifo_batch_size > 1 AS batching,
               h.state, h.probe_token,
               CASE WHEN h.state = 'open'
                    THEN h.opened_at + h.cooldown_s * interval '1 second' END AS cooldown_ends_at,
               -- A rate-limited endpoint's requests spend the tokens the claim takes from its
               -- bucket: a retry that came back through the queue has none.
               q.status = 'failed' AND e.rate_limit_per_s IS NOT NULL AS without_token
        FROM request r
        CROSS JOIN LATERAL (
            SELECT q.message_id, q.endpoint_id, q.status, q.lease_token
            FROM tidings.queue q
            WHERE q.message_id = r.id
            OFFSET 0
        ) q
        CROSS JOIN LATERAL (
            SELECT m.event_ref, m.event_type, m.attempts, m.max_attempts, m.line_key, m.line_seq,
                   m.line_batch_through
            FROM tidings.message_rows m
            WHERE m.id = r.id
            OFFSET 0
        ) m
        CROSS JOIN LATERAL (
            SELECT e.enabled AND e.deleted_at IS NULL AS usable, e.max_attempts, e.url,
                   e.timeout_ms, e.rate_limit_per_s, e.max_in_flight, e.retry_schedule,
                   e.payload_format, e.ordering, e.fifo_batch_size
            FROM tidings.endpoints e
            WHERE e.id = q.endpoint_id
            OFFSET 0
        ) e
        CROSS JOIN LATERAL (
            SELECT h.state, h.probe_token, h.opened_at, h.cooldown_s
            FROM tidings.endpoint_health h
            WHERE h.endpoint_id = q.endpoint_id
            OFFSET 0
        ) h
        WHERE q.lease_token = r.token AND m.attempts = r.attempt - 1
          AND q.status IN ('in_flight', 'failed')
    ),
    -- An open circuit whose cooldown has passed, or a half-open one whose probe went stale, lets
    -- one row through as its probe: the endpoint's first row of the batch that may spend a
    -- token. A closed circuit (as the rows read it) needs none, and its health row is not read
    -- again.
    probe AS (
        UPDATE tidings.endpoint_health h
        SET state = 'half_open', probe_token = c.token, probe_started_at = now()
        FROM (SELECT DISTINCT ON (held.endpoint_id) held.endpoint_id, held.token
              FROM held WHERE NOT held.without_token AND held.state <> 'closed'
              ORDER BY held.endpoint_id, held.id) c
        WHERE h.endpoint_id = c.endpoint_id
          AND tidings.probe_may_start(h.state, h.opened_at, h.cooldown_s, h.probe_started_at,
                                      p_lease_s)
        RETURNING h.endpoint_id, h.probe_token
    ),
    verdict AS (
        SELECT held.*,
               coalesce(held.usable
                        AND (held.state = 'closed'
                             OR (held.state = 'half_open' AND held.probe_token = held.token)
                             OR p.probe_token = held.token)
                        AND NOT held.without_token,
                        false) AS permitted
        FROM held
        LEFT JOIN probe p ON p.endpoint_id = held.endpoint_id
    ),
    -- The messages a permitted head of a batching FIFO endpoint carries: the next waiting
    -- ones of its line, up to the batch size, and on a retry only those of its first attempt
    -- (line_batch_through), so every attempt of a batch sends the same messages.
    members AS (
        SELECT v.id AS head_id, w.message_id AS id, w.line_seq
        FROM verdict v
        CROSS JOIN LATERAL (
            SELECT w.message_id, w.line_seq
            FROM tidings.queue w
            WHERE w.endpoint_id = v.endpoint_id AND w.line_key = v.line_key
              AND w.status = 'waiting' AND w.line_seq > v.line_seq
              AND (v.line_batch_through IS NULL OR w.line_seq <= v.line_batch_through)
            ORDER BY w.line_seq
            LIMIT v.fifo_batch_size - 1
        ) w
        WHERE v.permitted AND v.batching AND v.line_key IS NOT NULL
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
        RETURNING v.*, q.lease_token AS new_token,
                  v.batching AND v.line_key IS NOT NULL AND v.line_batch_through IS NULL
                      AS fixes_batch
    ),
    -- A batching FIFO head fixes, at its first attempt, the last place its batch carries.
    batched AS (
        UPDATE tidings.message_rows m
        SET line_batch_through = coalesce(
                (SELECT max(mb.line_seq) FROM members mb WHERE mb.head_id = m.id), m.line_seq)
        FROM started s
        WHERE m.id = s.id AND s.fixes_batch AND m.line_batch_through IS NULL
    ),
    held_back AS (
        UPDATE tidings.queue q
        SET status = tidings.unleased_status(v.attempts),
            lease_token = NULL,
            next_attempt_at = greatest(v.cooldown_ends_at,
                                       now() + p_hold_back_s * interval '1 second')
        FROM verdict v
        WHERE q.message_id = v.id AND NOT v.permitted
          AND q.lease_token = v.token AND q.status IN ('in_flight', 'failed')
        RETURNING v.*, NULL::uuid AS new_token
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
    -- What the answer reports: the rows begun, with their new lease, and those held back, with
    -- what the lease check read of them.
    answered AS (
        SELECT s.id, s.endpoint_id, s.new_token, s.want_payload, s.event_ref, s.event_type,
               s.attempts, s.max_attempts, s.url, s.timeout_ms, s.rate_limit_per_s,
               s.max_in_flight, s.retry_schedule, s.payload_format, s.line_key, s.line_seq,
               s.fifo_batch_size
        FROM started s
        UNION ALL
        SELECT hb.id, hb.endpoint_id, hb.new_token, hb.want_payload, hb.event_ref, hb.event_type,
               hb.attempts, hb.max_attempts, hb.url, hb.timeout_ms, hb.rate_limit_per_s,
               hb.max_in_flight, hb.retry_schedule, hb.payload_format, hb.line_key, hb.line_seq,
               hb.fifo_batch_size
        FROM held_back hb
    )
    SELECT a.id, a.endpoint_id, a.new_token IS NOT NULL, a.new_token,
           a.event_type, ev.event_id, a.attempts, a.max_attempts,
           a.url, a.timeout_ms, a.rate_limit_per_s, a.max_in_flight, a.retry_schedule,
           k.data_keys,
           k.ciphertexts,
           CASE WHEN a.want_payload THEN ev.payload::text END,
           a.payload_format, ev.created_at,
           k.credential_ids, k.credential_kinds, k.credential_data_keys, k.credentials,
           a.line_key, a.line_seq, ev.ordering_key, NULL::bigint, a.fifo_batch_size
    FROM answered a
    CROSS JOIN LATERAL (
        SELECT ev.event_id, ev.payload, ev.created_at, ev.ordering_key
        FROM tidings.events ev
        WHERE ev.id = a.event_ref
        OFFSET 0
    ) ev
    -- The permitted rows' secrets and credentials (a row held back gets none).
    LEFT JOIN endpoint_keys k ON k.endpoint_id = a.endpoint_id AND a.new_token IS NOT NULL
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
