-- Signing secrets and data keys bound to their rows.
--
-- Until now a secret's ciphertext was bound to its endpoint only, and every data key was wrapped
-- under one constant context: whoever could write the rows could put back an older (perhaps
-- leaked) ciphertext of the same endpoint, or swap wrapped data keys, and it opened. From here on
-- a stored value is
--   'tdg' || 0x02 || its row's id (8 bytes, big-endian) || the sealed value,
-- sealed with associated data (or, on KMS, an encryption context) that names that id too. Row
-- ids are identities GENERATED ALWAYS, which nobody can update, and the triggers below refuse to
-- store a value not bound to its own row (an earlier release's included): a value copied from
-- another row, or put back in its old form, is refused on write and would not open on read.
--
-- A writer learns the id before it seals: it draws it from the table's sequence (the ingest API
-- and operators may, below) and hands it to set_endpoint_secret_v2, or inserts the data key with
-- it. Values stored before this migration keep opening until `tidings secrets reencrypt`
-- rewrites them (bound; data keys of the earlier kind are dropped once no secret uses them).
--
-- During the deploy, the previous release's API can no longer rotate a secret (its function is
-- dropped below, and it could not bind what it stores), and its senders cannot open a secret
-- stored by this release: such deliveries fail as signing_failed and are retried by this
-- release's senders.
--
-- Locks: the triggers and the column grant change the catalog only (SHARE ROW EXCLUSIVE on both
-- tables for a moment; reads go on).

CREATE FUNCTION tidings.refuse_unbound_secret() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF substring(NEW.ciphertext FROM 1 FOR 4) IS DISTINCT FROM '\x74646702'::bytea
       OR substring(NEW.ciphertext FROM 5 FOR 8) IS DISTINCT FROM pg_catalog.int8send(NEW.id) THEN
        RAISE EXCEPTION 'tidings: signing secret % is not sealed for its own row', NEW.id
            USING ERRCODE = '23514',
                  HINT = 'a secret is sealed for the id its row gets (set_endpoint_secret_v2)';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER endpoint_secrets_bound_to_row
    BEFORE INSERT OR UPDATE OF ciphertext, id ON tidings.endpoint_secrets
    FOR EACH ROW EXECUTE FUNCTION tidings.refuse_unbound_secret();

CREATE FUNCTION tidings.refuse_unbound_data_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF substring(NEW.wrapped FROM 1 FOR 4) IS DISTINCT FROM '\x74646702'::bytea
       OR substring(NEW.wrapped FROM 5 FOR 8) IS DISTINCT FROM pg_catalog.int8send(NEW.id) THEN
        RAISE EXCEPTION 'tidings: data key % is not wrapped for its own row', NEW.id
            USING ERRCODE = '23514',
                  HINT = 'a data key is wrapped for the id it is inserted with';
    END IF;
    RETURN NEW;
END $$;

CREATE TRIGGER data_keys_bound_to_row
    BEFORE INSERT OR UPDATE OF wrapped, id ON tidings.data_keys
    FOR EACH ROW EXECUTE FUNCTION tidings.refuse_unbound_data_key();

-- set_endpoint_secret_v2: set_endpoint_secret_v1 (0070) for a secret sealed for the row id
-- p_secret_id, drawn by the caller from the table's sequence. The id must have been drawn and be
-- newer than every secret the endpoint holds, so that a row deleted earlier (a rotated-out
-- secret) cannot come back with its old value. Errors: 22023 for a bad argument, 23514 (the
-- trigger) for a value not sealed for p_secret_id.
CREATE FUNCTION tidings.set_endpoint_secret_v2(
    p_endpoint_id bigint,
    p_secret_id bigint,
    p_data_key_id bigint,
    p_ciphertext bytea,
    p_overlap_s double precision,
    p_max_secrets integer
) RETURNS TABLE (secret_id bigint, replaced_expires_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_replaced timestamptz;
BEGIN
    IF p_max_secrets IS NULL OR p_max_secrets < 1 THEN
        RAISE EXCEPTION 'tidings.set_endpoint_secret_v2: p_max_secrets must be at least 1'
            USING ERRCODE = '22023';
    END IF;
    UPDATE tidings.endpoints e
    SET updated_at = now()
    WHERE e.id = p_endpoint_id AND e.deleted_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    IF p_secret_id IS NULL OR p_secret_id < 1 OR p_secret_id > coalesce(
           pg_sequence_last_value(pg_get_serial_sequence('tidings.endpoint_secrets', 'id')::regclass),
           0) THEN
        RAISE EXCEPTION 'tidings.set_endpoint_secret_v2: p_secret_id % was not drawn from the '
            'sequence of tidings.endpoint_secrets', p_secret_id
            USING ERRCODE = '22023';
    END IF;
    IF EXISTS (SELECT 1 FROM tidings.endpoint_secrets s
               WHERE s.endpoint_id = p_endpoint_id AND s.id >= p_secret_id) THEN
        RAISE EXCEPTION 'tidings.set_endpoint_secret_v2: p_secret_id % is not newer than the '
            'endpoint''s secrets', p_secret_id
            USING ERRCODE = '22023';
    END IF;
    UPDATE tidings.endpoint_secrets s
    SET expires_at = now() + greatest(p_overlap_s, 0) * interval '1 second'
    WHERE s.endpoint_id = p_endpoint_id AND s.expires_at IS NULL
    RETURNING s.expires_at INTO v_replaced;
    INSERT INTO tidings.endpoint_secrets (id, endpoint_id, data_key_id, ciphertext)
    OVERRIDING SYSTEM VALUE
    VALUES (p_secret_id, p_endpoint_id, p_data_key_id, p_ciphertext);
    DELETE FROM tidings.endpoint_secrets s
    WHERE s.endpoint_id = p_endpoint_id
      AND s.expires_at IS NOT NULL
      AND (s.expires_at <= now()
           OR s.id NOT IN (SELECT k.id FROM tidings.endpoint_secrets k
                           WHERE k.endpoint_id = p_endpoint_id AND k.expires_at > now()
                           ORDER BY k.id DESC
                           LIMIT p_max_secrets - 1));
    RETURN QUERY SELECT p_secret_id, CASE WHEN v_replaced > now() THEN v_replaced END;
END $$;

-- It could only store what the triggers now refuse.
DROP FUNCTION tidings.set_endpoint_secret_v1(bigint, bigint, bytea, double precision, integer);

REVOKE ALL ON FUNCTION tidings.set_endpoint_secret_v2(bigint, bigint, bigint, bytea,
                                                      double precision, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION tidings.set_endpoint_secret_v2(bigint, bigint, bigint, bytea,
                                                         double precision, integer)
    TO tidings_ingest, tidings_operator;

-- The ingest API and operators draw the ids of the secrets and data keys they seal, and insert
-- data keys with theirs.
DO $$
BEGIN
    EXECUTE format('GRANT USAGE ON SEQUENCE %s, %s TO tidings_ingest, tidings_operator',
                   pg_get_serial_sequence('tidings.endpoint_secrets', 'id'),
                   pg_get_serial_sequence('tidings.data_keys', 'id'));
END $$;
GRANT INSERT (id) ON tidings.data_keys TO tidings_ingest, tidings_operator;
