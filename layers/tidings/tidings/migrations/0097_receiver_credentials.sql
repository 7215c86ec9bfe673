-- Credentials a receiver can demand, per endpoint: static headers, an Authorization scheme
-- (basic, bearer, or an OAuth2 client-credentials grant the sender runs), a TLS client
-- certificate (mTLS) and a CA bundle the receiver's server certificate must chain to.
--
-- Each kind an endpoint has is one row of tidings.endpoint_credentials, sealed like signing
-- secrets (migrations 0070 and 0092): AES-256-GCM under a data key, bound to the row's id, which
-- the writer draws from the table's sequence before sealing (set_endpoint_credential_v1), and a
-- trigger refuses a value not bound to its own row. Next to it, in clear, what readers are
-- shown (`shown`: header names with their values redacted, a user name, a token URL, a client
-- certificate's subject and expiry) and the client certificate's expiry (`not_after`), which the
-- health monitor watches. An update replaces a kind's row (a new id, so senders that cached the
-- old one open the new one) or deletes it.
--
-- begin_attempts_v3 is begin_attempts_v2 (0093) also returning the permitted rows' credentials
-- (an endpoint without any costs one probe of the (endpoint_id, kind) index per row) and the
-- endpoint's own max_in_flight (the sender sends a capped endpoint's retries through the
-- database, so that each attempt passes the claim's cap). v2 stays
-- granted for the previous release's senders while this one is deployed (they deliver without
-- the credentials; see the README's upgrade notes).
--
-- Locks: a new table and functions; nothing existing is rewritten.

CREATE TABLE tidings.endpoint_credentials (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id bigint NOT NULL REFERENCES tidings.endpoints (id),
    kind        text NOT NULL
        CONSTRAINT endpoint_credentials_kind_check
        CHECK (kind IN ('headers', 'auth', 'tls_client_certificate', 'tls_server_ca')),
    data_key_id bigint NOT NULL REFERENCES tidings.data_keys (id),
    ciphertext  bytea NOT NULL,
    shown       jsonb NOT NULL,
    not_after   timestamptz,
    created_at  timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT endpoint_credentials_one_per_kind UNIQUE (endpoint_id, kind)
);

CREATE INDEX endpoint_credentials_by_data_key ON tidings.endpoint_credentials (data_key_id);
CREATE INDEX endpoint_credentials_expiring ON tidings.endpoint_credentials (not_after)
    WHERE not_after IS NOT NULL;

CREATE FUNCTION tidings.refuse_unbound_credential() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF substring(NEW.ciphertext FROM 1 FOR 4) IS DISTINCT FROM '\x74646702'::bytea
       OR substring(NEW.ciphertext FROM 5 FOR 8) IS DISTINCT FROM pg_catalog.int8send(NEW.id) THEN
        RAISE EXCEPTION 'tidings: receiver credential % is not sealed for its own row', NEW.id
            USING ERRCODE = '23514',
                  HINT = 'a credential is sealed for the id its row gets (set_endpoint_credential_v1)';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER endpoint_credentials_bound_to_row
    BEFORE INSERT OR UPDATE OF ciphertext, id ON tidings.endpoint_credentials
    FOR EACH ROW EXECUTE FUNCTION tidings.refuse_unbound_credential();

-- set_endpoint_credential_v1: replaces the endpoint's credential of p_kind with one sealed for
-- the row id p_credential_id, drawn by the caller from the table's sequence and newer than any
-- the endpoint holds (so that a deleted row cannot come back with its old value). Returns false
-- (writing nothing) for a missing or deleted endpoint. Errors: 22023 for a bad id, 23514 (the
-- trigger) for a value not sealed for p_credential_id.
CREATE FUNCTION tidings.set_endpoint_credential_v1(
    p_endpoint_id bigint,
    p_kind text,
    p_credential_id bigint,
    p_data_key_id bigint,
    p_ciphertext bytea,
    p_shown jsonb,
    p_not_after timestamptz
) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM 1 FROM tidings.endpoints e
    WHERE e.id = p_endpoint_id AND e.deleted_at IS NULL
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_credential_id IS NULL OR p_credential_id < 1 OR p_credential_id > coalesce(
           pg_sequence_last_value(
               pg_get_serial_sequence('tidings.endpoint_credentials', 'id')::regclass), 0) THEN
        RAISE EXCEPTION 'tidings.set_endpoint_credential_v1: p_credential_id % was not drawn '
            'from the sequence of tidings.endpoint_credentials', p_credential_id
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM tidings.endpoint_credentials c
               WHERE c.endpoint_id = p_endpoint_id AND c.id >= p_credential_id) THEN
        RAISE EXCEPTION 'tidings.set_endpoint_credential_v1: p_credential_id % is not newer '
            'than the endpoint''s credentials', p_credential_id
            USING ERRCODE = '22023';
    END IF;
    DELETE FROM tidings.endpoint_credentials c
    WHERE c.endpoint_id = p_endpoint_id AND c.kind = p_kind;
    INSERT INTO tidings.endpoint_credentials (id, endpoint_id, kind, data_key_id, ciphertext,
                                              shown, not_after)
    OVERRIDING SYSTEM VALUE
    VALUES (p_credential_id, p_endpoint_id, p_kind, p_data_key_id, p_ciphertext, p_shown,
            p_not_after);
    UPDATE tidings.endpoints e SET updated_at = now() WHERE e.id = p_endpoint_id;
    RETURN true;
END $$;

REVOKE ALL ON FUNCTION tidings.set_endpoint_credential_v1(bigint, text, bigint, bigint, bytea,
                                                          jsonb, timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tidings.set_endpoint_credential_v1(bigint, text, bigint, bigint, bytea,
                                                             jsonb, timestamptz)
    TO tidings_ingest, tidings_operator;

DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SEQUENCE %s TO tidings_ingest, tidings_operator',
                   pg_get_serial_sequence('tidings.endpoint_credentials', 'id'));
END $$;

-- The API and operators show the redacted forms, and remove a kind (or all, with the endpoint).
GRANT SELECT (endpoint_id, kind, shown), DELETE ON tidings.endpoint_credentials
    TO tidings_ingest, tidings_operator;
-- The health monitor alerts a week before a client certificate expires.
GRANT SELECT (endpoint_id, kind, not_after) ON tidings.endpoint_credentials
    TO tidings_health_monitor;

-- begin_attempts_v3: see above.
CREATE FUNCTION tidings.begin_attempts_v3(
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
           e.url, e.timeout_ms, e.rate_limit_per_s, e.max_in_flight, e.retry_schedule,
           sk.data_keys,
           sk.ciphertexts,
           CASE WHEN v.want_payload THEN ev.payload::text END,
           e.payload_format, ev.created_at,
           cr.ids, cr.kinds, cr.data_keys, cr.ciphertexts
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
    -- The permitted rows' receiver credentials, encrypted (tidings.endpoint_credentials): NULL
    -- arrays for an endpoint without any, which is all the sender then does about them.
    LEFT JOIN LATERAL (
        SELECT array_agg(ec.id ORDER BY ec.id) AS ids,
               array_agg(ec.kind ORDER BY ec.id) AS kinds,
               array_agg(ec.data_key_id ORDER BY ec.id) AS data_keys,
               array_agg(ec.ciphertext ORDER BY ec.id) AS ciphertexts
        FROM tidings.endpoint_credentials ec
        WHERE s.id IS NOT NULL
          AND ec.endpoint_id = v.endpoint_id
    ) cr ON true
    WHERE s.id IS NOT NULL OR v.id IN (SELECT hb.id FROM held_back hb)
    ORDER BY v.id;
END $$;

GRANT EXECUTE ON FUNCTION tidings.begin_attempts_v3(bigint[], uuid[], integer[], boolean[],
                                                     double precision, double precision)
    TO tidings_sender;
