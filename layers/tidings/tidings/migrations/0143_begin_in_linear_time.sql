-- begin_attempts_v4 (0141) replaced in place (same arguments, same answer), with no join whose
-- cost grows with the square of the batch: the planner takes the request's unnest and the
-- rows fetched by primary key for ten rows each, and so joined them, and the answer to the
-- rows begun, by nested loops that ran through one side once per row of the other (for a
-- batch of a hundred, two thirds of the call). Each request now looks its row up by primary
-- key, and the answer is read from the rows begun and held back (their RETURNING), not
-- matched against them.
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
        SELECT m.id, m.endpoint_id, r.token, r.attempt, r.want_payload,
               -- A rate-limited endpoint's requests spend the tokens the claim takes from its
               -- bucket: a retry that came back through the queue has none.
               m.status = 'failed' AND e.rate_limit_per_s IS NOT NULL AS without_token
        FROM request r
        -- By primary key alone: OFFSET 0 keeps the conditions below out of the look-up, where
        -- they would let the planner scan a partial index of the queue instead, once per row.
        CROSS JOIN LATERAL (
            SELECT m.id, m.endpoint_id, m.status, m.lease_token, m.attempts
            FROM tidings.messages m
            WHERE m.id = r.id
            OFFSET 0
        ) m
        JOIN tidings.endpoints e ON e.id = m.endpoint_id
        WHERE m.lease_token = r.token AND m.attempts = r.attempt - 1
          AND m.status IN ('in_flight', 'failed')
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
        SELECT v.id AS head_id, w.id, w.line_seq
        FROM verdict v
        JOIN tidings.messages hm ON hm.id = v.id
        JOIN tidings.endpoints e ON e.id = v.endpoint_id
        CROSS JOIN LATERAL (
            SELECT w.id, w.line_seq
            FROM tidings.messages w
            WHERE w.endpoint_id = hm.endpoint_id AND w.line_key = hm.line_key
              AND w.status = 'waiting' AND w.line_seq > hm.line_seq
              AND (hm.line_batch_through IS NULL OR w.line_seq <= hm.line_batch_through)
            ORDER BY w.line_seq
            LIMIT e.fifo_batch_size - 1
        ) w
        WHERE v.permitted AND hm.line_key IS NOT NULL
          AND e.ordering = 'fifo' AND e.fifo_batch_size > 1
    ),
    started AS (
        UPDATE tidings.messages m
        SET status = 'in_flight',
            lease_token = gen_random_uuid(),
            next_attempt_at = greatest(m.next_attempt_at,
                                       now() + p_lease_s * interval '1 second'),
            line_batch_through = CASE
                WHEN m.line_batch_through IS NULL AND m.line_key IS NOT NULL
                     AND e.ordering = 'fifo' AND e.fifo_batch_size > 1
                    THEN coalesce((SELECT max(mb.line_seq) FROM members mb WHERE mb.head_id = m.id),
                                  m.line_seq)
                ELSE m.line_batch_through END
        FROM verdict v
        JOIN tidings.endpoints e ON e.id = v.endpoint_id
        WHERE m.id = v.id AND v.permitted
          AND m.lease_token = v.token AND m.attempts = v.attempt - 1
        RETURNING m.id, m.lease_token, v.want_payload
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
        RETURNING m.id, v.want_payload
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
           sk.data_keys,
           sk.ciphertexts,
           CASE WHEN a.want_payload THEN ev.payload::text END,
           e.payload_format, ev.created_at,
           cr.ids, cr.kinds, cr.data_keys, cr.ciphertexts,
           m.line_key, m.line_seq, ev.ordering_key, NULL::bigint, e.fifo_batch_size
    FROM answered a
    JOIN tidings.messages m ON m.id = a.id
    JOIN tidings.endpoints e ON e.id = m.endpoint_id
    JOIN tidings.events ev ON ev.id = m.event_ref
    -- The permitted rows' signing secrets, newest first: the current one and those still in
    -- their overlap, encrypted (tidings.endpoint_secrets, migration 0070; the sender decrypts).
    LEFT JOIN LATERAL (
        SELECT array_agg(es.data_key_id ORDER BY es.id DESC) AS data_keys,
               array_agg(es.ciphertext ORDER BY es.id DESC) AS ciphertexts
        FROM tidings.endpoint_secrets es
        WHERE a.lease_token IS NOT NULL
          AND es.endpoint_id = m.endpoint_id
          AND (es.expires_at IS NULL OR es.expires_at > now())
    ) sk ON true
    -- The permitted rows' receiver credentials, encrypted (tidings.endpoint_credentials): NULL
    -- arrays for an endpoint without any, which is all the sender then does about them.
    LEFT JOIN LATERAL (
        SELECT array_agg(ec.id ORDER BY ec.id) AS ids,
               array_agg(ec.kind ORDER BY ec.id) AS kinds,
               array_agg(ec.data_key_id ORDER BY ec.id) AS data_keys,
               array_agg(ec.ciphertext ORDER BY ec.id) AS ciphertexts
        FROM tidings.endpoint_credentials ec
        WHERE a.lease_token IS NOT NULL
          AND ec.endpoint_id = m.endpoint_id
    ) cr ON true
    UNION ALL
    -- The started heads' batch members: sent with their head, under its lease.
    SELECT w.id, w.endpoint_id, true, NULL::uuid, w.event_type, ev.event_id, w.attempts,
           NULL::integer, e.url, e.timeout_ms, e.rate_limit_per_s, e.max_in_flight,
           e.retry_schedule, NULL::bigint[], NULL::bytea[], ev.payload::text, e.payload_format,
           ev.created_at, NULL::bigint[], NULL::text[], NULL::bigint[], NULL::bytea[],
           w.line_key, w.line_seq, ev.ordering_key, mb.head_id, e.fifo_batch_size
    FROM members mb
    JOIN started s ON s.id = mb.head_id
    JOIN tidings.messages w ON w.id = mb.id
    JOIN tidings.endpoints e ON e.id = w.endpoint_id
    JOIN tidings.events ev ON ev.id = w.event_ref
    ORDER BY 1;
END $$;
