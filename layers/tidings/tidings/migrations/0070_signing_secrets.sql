-- Signing secrets encrypted at rest (envelope encryption), and several of them per endpoint while
-- rotations overlap.
--
-- A secret is stored as AES-256-GCM ciphertext under a data key; the data key is stored
-- encrypted by a master key that never enters the database (a KMS key on AWS, a local key file or
-- TIDINGS_SECRETS_KEY elsewhere). The application encrypts and decrypts; the database only keeps
-- bytes it cannot read. Secrets an earlier release kept in clear in endpoints.secret and
-- previous_secret are encrypted into endpoint_secrets by the first migrator run of this release
-- (it has the key; SQL alone does not), which then clears those columns. They stay, empty, for
-- the previous release's senders during the deploy, and go with them a release later.

-- The data keys: each AES-256 key encrypted by a master key, and which master key that was.
-- New secrets are sealed with the newest data key of the configured master key while it is
-- younger than secrets_data_key_max_age_s; older rows move to it with `tidings secrets
-- reencrypt` (or the migrator's run on a deploy).
CREATE TABLE tidings.data_keys (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- 'kms:<key ARN>' or 'local:<fingerprint of the local key>'
    master_key  text NOT NULL CHECK (master_key ~ '^(kms|local):.' AND length(master_key) <= 2048),
    wrapped     bytea NOT NULL CHECK (octet_length(wrapped) BETWEEN 1 AND 6144),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX data_keys_newest ON tidings.data_keys (master_key, created_at);

-- An endpoint's signing secrets: its current one (expires_at NULL) and those rotated out that
-- still sign until expires_at. ciphertext is nonce || AES-256-GCM(secret) || tag under the data
-- key, bound to the endpoint's id (a ciphertext copied to another endpoint does not open).
CREATE TABLE tidings.endpoint_secrets (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    endpoint_id  bigint NOT NULL REFERENCES tidings.endpoints (id),
    data_key_id  bigint NOT NULL REFERENCES tidings.data_keys (id),
    ciphertext   bytea NOT NULL CHECK (octet_length(ciphertext) BETWEEN 29 AND 1024),
    created_at   timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz
);
-- One current secret per endpoint.
CREATE UNIQUE INDEX endpoint_secrets_current ON tidings.endpoint_secrets (endpoint_id)
    WHERE expires_at IS NULL;
-- An endpoint's secrets, newest first (the sender's read, rotation's pruning).
CREATE INDEX endpoint_secrets_by_endpoint ON tidings.endpoint_secrets (endpoint_id, id);
-- The rows a data key seals (re-encryption, dropping unused data keys).
CREATE INDEX endpoint_secrets_by_data_key ON tidings.endpoint_secrets (data_key_id);

-- The columns of the release before: empty once the migrator has encrypted what they held.
ALTER TABLE tidings.endpoints ALTER COLUMN secret DROP NOT NULL;

-- set_endpoint_secret_v1: makes an encrypted secret the endpoint's current one, atomically.
-- The secret it replaces (if any) keeps signing until p_overlap_s from now; secrets whose
-- overlap has ended are dropped, and so are the oldest rotated-out ones beyond p_max_secrets in
-- all (the new one included), so at most p_max_secrets sign at once however often it rotates.
-- Rotations of one endpoint take turns: its row is locked (as any change of it locks it).
-- Returns the new secret's id and when the replaced one stops signing (NULL when it is the first);
-- no row when the endpoint does not exist or is deleted. The caller never reads a secret back.
CREATE FUNCTION tidings.set_endpoint_secret_v1(
    p_endpoint_id bigint,
    p_data_key_id bigint,
    p_ciphertext bytea,
    p_overlap_s double precision,
    p_max_secrets integer
) RETURNS TABLE (secret_id bigint, replaced_expires_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_id       bigint;
    v_replaced timestamptz;
BEGIN
    IF p_max_secrets IS NULL OR p_max_secrets < 1 THEN
        RAISE EXCEPTION 'tidings.set_endpoint_secret_v1: p_max_secrets must be at least 1'
            USING ERRCODE = '22023';
    END IF;
    UPDATE tidings.endpoints e
    SET updated_at = now()
    WHERE e.id = p_endpoint_id AND e.deleted_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE tidings.endpoint_secrets s
    SET expires_at = now() + greatest(p_overlap_s, 0) * interval '1 second'
    WHERE s.endpoint_id = p_endpoint_id AND s.expires_at IS NULL
    RETURNING s.expires_at INTO v_replaced;
    INSERT INTO tidings.endpoint_secrets (endpoint_id, data_key_id, ciphertext)
    VALUES (p_endpoint_id, p_data_key_id, p_ciphertext)
    RETURNING id INTO v_id;
    DELETE FROM tidings.endpoint_secrets s
    WHERE s.endpoint_id = p_endpoint_id
      AND s.expires_at IS NOT NULL
      AND (s.expires_at <= now()
           OR s.id NOT IN (SELECT k.id FROM tidings.endpoint_secrets k
                           WHERE k.endpoint_id = p_endpoint_id AND k.expires_at > now()
                           ORDER BY k.id DESC
                           LIMIT p_max_secrets - 1));
    RETURN QUERY SELECT v_id, CASE WHEN v_replaced > now() THEN v_replaced END;
END $$;
