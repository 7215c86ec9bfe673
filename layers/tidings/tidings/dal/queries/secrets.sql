-- name: current_data_key
-- The newest data key of a master key made at or after not_before (none: a new one is due).
SELECT id, master_key, wrapped, created_at
FROM tidings.data_keys
WHERE master_key = %(master_key)s AND created_at >= %(not_before)s
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: insert_data_key
-- Stores a new data key, encrypted by the master key named; returns its id and creation time.
INSERT INTO tidings.data_keys (master_key, wrapped)
VALUES (%(master_key)s, %(wrapped)s)
RETURNING id, created_at;

-- name: load_data_keys
-- The data keys with the given ids, each with the master key that encrypted it.
SELECT id, master_key, wrapped
FROM tidings.data_keys
WHERE id = ANY (%(ids)s::bigint[]);

-- name: set_endpoint_secret
-- Makes an encrypted secret the endpoint's current one (tidings.set_endpoint_secret_v1): the one
-- it replaces keeps signing for overlap_s, at most max_secrets sign at once. Returns when the
-- replaced secret stops signing; no row for a missing or deleted endpoint.
SELECT secret_id, replaced_expires_at
FROM tidings.set_endpoint_secret_v1(%(endpoint_id)s, %(data_key_id)s, %(ciphertext)s,
                                    %(overlap_s)s, %(max_secrets)s);

-- name: prune_expired_secrets
-- Deletes up to batch_size rotated-out signing secrets whose overlap has ended (rotation drops
-- them too; this catches endpoints that were not rotated again). Returns how many went.
WITH gone AS (
    DELETE FROM tidings.endpoint_secrets
    WHERE id IN (SELECT id FROM tidings.endpoint_secrets
                 WHERE expires_at <= now()
                 LIMIT %(batch_size)s)
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: plaintext_secrets
-- The endpoints whose secrets an earlier release stored in clear (the schema owner only): the
-- current one, and the previous one with its expiry when it still signs.
SELECT id, secret,
       CASE WHEN previous_secret_expires_at > now() THEN previous_secret END AS previous_secret,
       CASE WHEN previous_secret_expires_at > now() THEN previous_secret_expires_at END
           AS previous_expires_at
FROM tidings.endpoints
WHERE secret IS NOT NULL OR previous_secret IS NOT NULL
ORDER BY id
FOR UPDATE;

-- name: store_encrypted_plaintext
-- Stores the encrypted form of secrets kept in clear (parallel arrays, one entry per secret, in
-- the order to store them: endpoint, data key, ciphertext, expiry or NULL for the current one)
-- and clears the columns that held them, in one statement. Returns how many endpoints were
-- cleared.
WITH stored AS (
    INSERT INTO tidings.endpoint_secrets (endpoint_id, data_key_id, ciphertext, expires_at)
    SELECT s.endpoint_id, s.data_key_id, s.ciphertext, s.expires_at
    FROM unnest(%(endpoint_ids)s::bigint[], %(data_key_ids)s::bigint[],
                %(ciphertexts)s::bytea[], %(expires_at)s::timestamptz[]) WITH ORDINALITY
        AS s(endpoint_id, data_key_id, ciphertext, expires_at, ord)
    ORDER BY s.ord
),
cleared AS (
    UPDATE tidings.endpoints e
    SET secret = NULL, previous_secret = NULL, previous_secret_expires_at = NULL
    WHERE e.id = ANY (%(cleared_ids)s::bigint[])
    RETURNING e.id
)
SELECT count(*) FROM cleared;

-- name: secrets_to_reencrypt
-- The signing secrets (the schema owner only) not sealed by the given data key, locked until the
-- transaction that re-encrypts them commits.
SELECT id, endpoint_id, data_key_id, ciphertext
FROM tidings.endpoint_secrets
WHERE data_key_id <> %(data_key_id)s
ORDER BY id
FOR UPDATE;

-- name: replace_ciphertexts
-- Stores secrets re-encrypted under another data key (parallel arrays of secret id, data key,
-- ciphertext); returns how many rows changed.
WITH changed AS (
    UPDATE tidings.endpoint_secrets s
    SET data_key_id = r.data_key_id, ciphertext = r.ciphertext
    FROM unnest(%(ids)s::bigint[], %(data_key_ids)s::bigint[], %(ciphertexts)s::bytea[])
        AS r(id, data_key_id, ciphertext)
    WHERE s.id = r.id
    RETURNING 1
)
SELECT count(*) FROM changed;

-- name: drop_unused_data_keys
-- Deletes the data keys no secret uses that a newer data key replaced more than grace_s ago (a
-- process may go on sealing with a data key it looked up shortly before); keeps the given one.
-- Returns how many went.
WITH gone AS (
    DELETE FROM tidings.data_keys d
    WHERE d.id <> %(keep_id)s
      AND NOT EXISTS (SELECT 1 FROM tidings.endpoint_secrets s WHERE s.data_key_id = d.id)
      AND EXISTS (SELECT 1 FROM tidings.data_keys newer
                  WHERE newer.created_at > d.created_at
                    AND newer.created_at <= now() - %(grace_s)s * interval '1 second')
    RETURNING 1
)
SELECT count(*) FROM gone;
