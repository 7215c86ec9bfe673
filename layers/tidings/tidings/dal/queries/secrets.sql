-- name: current_data_key
-- The newest data key of a master key made at or after not_before and wrapped for its row
-- ('tdg' 0x02 and its id: an earlier release's is never sealed with again); none: a new one is due.
SELECT id, master_key, wrapped, created_at
FROM tidings.data_keys
WHERE master_key = %(master_key)s AND created_at >= %(not_before)s
  AND substring(wrapped FROM 1 FOR 4) = '\x74646702'::bytea
ORDER BY created_at DESC, id DESC
LIMIT 1;

-- name: next_data_key_id
-- The id of a data key about to be made: it is wrapped for that id before it is stored.
SELECT nextval(pg_get_serial_sequence('tidings.data_keys', 'id'));

-- name: insert_data_key
-- Stores a new data key under the id drawn for it (next_data_key_id), encrypted by the master key
-- named; returns its creation time.
INSERT INTO tidings.data_keys (id, master_key, wrapped)
OVERRIDING SYSTEM VALUE
VALUES (%(id)s, %(master_key)s, %(wrapped)s)
RETURNING created_at;

-- name: next_endpoint_secret_id
-- The id of a signing secret about to be stored: it is sealed for that id first.
SELECT nextval(pg_get_serial_sequence('tidings.endpoint_secrets', 'id'));

-- name: load_data_keys
-- The data keys with the given ids, each with the master key that encrypted it.
SELECT id, master_key, wrapped
FROM tidings.data_keys
WHERE id = ANY (%(ids)s::bigint[]);

-- name: set_endpoint_secret
-- Makes an encrypted secret, sealed for the id secret_id (next_endpoint_secret_id), the endpoint's
-- current one (tidings.set_endpoint_secret_v2): the one it replaces keeps signing for overlap_s,
-- at most max_secrets sign at once. Returns when the replaced secret stops signing; no row for a
-- missing or deleted endpoint.
SELECT secret_id, replaced_expires_at
FROM tidings.set_endpoint_secret_v2(%(endpoint_id)s, %(secret_id)s, %(data_key_id)s,
                                    %(ciphertext)s, %(overlap_s)s, %(max_secrets)s);

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
-- the order to store them: the id drawn for it, endpoint, data key, ciphertext, expiry or NULL
-- for the current one)
-- and clears the columns that held them, in one statement. Returns how many endpoints were
-- cleared.
WITH stored AS (
    INSERT INTO tidings.endpoint_secrets (id, endpoint_id, data_key_id, ciphertext, expires_at)
    OVERRIDING SYSTEM VALUE
    SELECT s.id, s.endpoint_id, s.data_key_id, s.ciphertext, s.expires_at
    FROM unnest(%(ids)s::bigint[], %(endpoint_ids)s::bigint[], %(data_key_ids)s::bigint[],
                %(ciphertexts)s::bytea[], %(expires_at)s::timestamptz[]) WITH ORDINALITY
        AS s(id, endpoint_id, data_key_id, ciphertext, expires_at, ord)
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
-- Up to batch_size signing secrets after after_id (the schema owner only) not sealed by the given
-- data key, or stored by an earlier release (not bound to their row), when those are wanted;
-- locked until the transaction that re-encrypts them commits. A secret another run rewrote
-- meanwhile is seen as it is now, and left out when it needs nothing any more.
SELECT id, endpoint_id, data_key_id, ciphertext
FROM tidings.endpoint_secrets
WHERE id > %(after_id)s
  AND (data_key_id <> %(data_key_id)s
       OR (%(unbound)s AND substring(ciphertext FROM 1 FOR 4) <> '\x74646702'::bytea))
ORDER BY id
LIMIT %(batch_size)s
FOR UPDATE;

-- name: unbound_secrets_left
-- How many signing secrets an earlier release stored (not bound to their row) are left.
SELECT count(*)
FROM tidings.endpoint_secrets
WHERE substring(ciphertext FROM 1 FOR 4) <> '\x74646702'::bytea;

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
-- Deletes the data keys no secret (nor receiver credential) uses that a newer data key replaced more than grace_s ago (a
-- process may go on sealing with a data key it looked up shortly before); keeps the given one.
-- Returns how many went.
WITH gone AS (
    DELETE FROM tidings.data_keys d
    WHERE d.id <> %(keep_id)s
      AND NOT EXISTS (SELECT 1 FROM tidings.endpoint_secrets s WHERE s.data_key_id = d.id)
      AND NOT EXISTS (SELECT 1 FROM tidings.endpoint_credentials c WHERE c.data_key_id = d.id)
      AND EXISTS (SELECT 1 FROM tidings.data_keys newer
                  WHERE newer.created_at > d.created_at
                    AND newer.created_at <= now() - %(grace_s)s * interval '1 second')
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: next_endpoint_credential_id
-- The id the next receiver credential is stored under (it is sealed for it first).
SELECT nextval(pg_get_serial_sequence('tidings.endpoint_credentials', 'id'));

-- name: set_endpoint_credential
-- Replaces an endpoint's receiver credential of one kind with one sealed for credential_id
-- (tidings.set_endpoint_credential_v1); false when the endpoint is not there.
SELECT tidings.set_endpoint_credential_v1(%(endpoint_id)s, %(kind)s, %(credential_id)s,
                                          %(data_key_id)s, %(ciphertext)s, %(shown)s::jsonb,
                                          %(not_after)s::timestamptz);

-- name: clear_endpoint_credential
-- Removes an endpoint's receiver credential of one kind; returns the kind when there was one.
DELETE FROM tidings.endpoint_credentials c
WHERE c.endpoint_id = %(endpoint_id)s AND c.kind = %(kind)s
RETURNING c.kind;
