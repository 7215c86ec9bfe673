-- What a receiver gets as the body of a delivery: the producer's payload as it was sent (raw), or
-- the structure the Standard Webhooks specification recommends (envelope):
-- {"type": <event type>, "timestamp": <when Tidings accepted the event>, "data": <payload>}.
-- Each endpoint has its own format. It is stored resolved, at creation, from the request, else
-- its application's default for new endpoints, else the deployment's (TIDINGS_PAYLOAD_FORMAT):
-- changing a default never changes what an existing receiver is sent.

-- A constant default: adding the columns changes the catalog only (no rewrite); the CHECKs read
-- the (small) endpoints and applications tables once. Existing endpoints keep the raw body they
-- have always been sent.
ALTER TABLE tidings.endpoints
    ADD COLUMN payload_format text NOT NULL DEFAULT 'raw'
    CONSTRAINT endpoints_payload_format_check CHECK (payload_format IN ('raw', 'envelope'));

-- NULL: the application's new endpoints take the deployment's format.
ALTER TABLE tidings.applications
    ADD COLUMN default_payload_format text
    CONSTRAINT applications_default_payload_format_check
        CHECK (default_payload_format IN ('raw', 'envelope'));

-- begin_attempts_v2: begin_attempts_v1 (0041_delivery_functions.sql; see there for the leases,
-- the circuit gate and the secrets), also returning what building the body needs: the endpoint's
-- payload_format and when the event was accepted (an envelope's timestamp, the same on every
-- attempt, so that a retry sends the same body). v1 stays for a sender of the previous release
-- that runs while this one is deployed.
CREATE FUNCTION tidings.begin_attempts_v2(
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
    payload text,
    payload_format text,
    event_created_at timestamptz
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
           CASE WHEN v.want_payload THEN ev.payload::text END,
           e.payload_format, ev.created_at
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

-- Only the sender begins attempts (0072_grants.sql); the migrator keeps it from PUBLIC.
GRANT EXECUTE ON FUNCTION tidings.begin_attempts_v2(bigint[], uuid[], integer[], boolean[],
                                                     double precision, double precision)
    TO tidings_sender;

-- The ingest API and operators read and write the new columns, as they do the others of these
-- tables (0072_grants.sql).
GRANT SELECT (payload_format), INSERT (payload_format), UPDATE (payload_format)
    ON tidings.endpoints TO tidings_ingest, tidings_operator;
GRANT SELECT (default_payload_format), INSERT (default_payload_format),
      UPDATE (default_payload_format)
    ON tidings.applications TO tidings_ingest, tidings_operator;
