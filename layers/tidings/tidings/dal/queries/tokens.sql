-- name: insert_token
-- Stores a new token's prefix and hash. An application token is made only for a live application,
-- held FOR KEY SHARE until the commit (so a concurrent deletion either waits for this token or
-- is seen); nothing is returned when that application is not there.
INSERT INTO tidings.tokens (prefix, hash, scope, app_id, description, expires_at)
SELECT %(prefix)s, %(hash)s, %(scope)s, %(app_id)s, %(description)s, %(expires_at)s
WHERE %(app_id)s::bigint IS NULL
   OR EXISTS (SELECT 1 FROM tidings.applications a
              WHERE a.id = %(app_id)s::bigint AND a.deleted_at IS NULL
              FOR KEY SHARE)
RETURNING id, prefix, scope, app_id, description, created_at, expires_at, revoked_at

-- name: tokens_with_prefix
-- The tokens whose prefix is the one presented (almost always one or none), with their hashes to
-- compare, their state, and their application's uid and whether it is deleted, read at one
-- moment (now() is that moment).
SELECT t.id, t.hash, t.scope, t.app_id, a.uid AS app_uid, a.deleted_at IS NOT NULL AS app_deleted,
       t.expires_at, t.revoked_at, t.usage_key_id, now() AS db_now
FROM tidings.tokens t
LEFT JOIN tidings.applications a ON a.id = t.app_id
WHERE t.prefix = %(prefix)s
ORDER BY t.id

-- name: token_with_hash
-- The token whose hash this is, whatever its state (the deploy's first admin token is looked up
-- this way, so that deploying again neither adds a second one nor brings a revoked one back).
SELECT t.id, t.revoked_at
FROM tidings.tokens t
WHERE t.hash = %(hash)s

-- name: list_tokens
-- A page of tokens by ascending id after the cursor id (0 for the first page), revoked and
-- expired ones included, never their hashes; one more row than the page size tells whether
-- another page follows.
SELECT t.id, t.prefix, t.scope, t.app_id, a.uid AS app_uid, t.description, t.created_at,
       t.expires_at, t.revoked_at
FROM tidings.tokens t
LEFT JOIN tidings.applications a ON a.id = t.app_id
WHERE t.id > %(after_id)s
ORDER BY t.id
LIMIT %(limit)s + 1

-- name: get_token
-- One token (never its hash).
SELECT t.id, t.prefix, t.scope, t.app_id, a.uid AS app_uid, t.description, t.created_at,
       t.expires_at, t.revoked_at
FROM tidings.tokens t
LEFT JOIN tidings.applications a ON a.id = t.app_id
WHERE t.id = %(token_id)s

-- name: revoke_token
-- Revokes a token (from now on it is refused); revoking it again keeps the first time.
UPDATE tidings.tokens t
SET revoked_at = coalesce(t.revoked_at, now())
WHERE t.id = %(token_id)s
RETURNING t.id, t.revoked_at

-- name: set_usage_key
-- Remembers the API Gateway API key made for a token's requests (the first one stored wins).
UPDATE tidings.tokens
SET usage_key_id = coalesce(usage_key_id, %(usage_key_id)s)
WHERE id = %(token_id)s

-- name: any_token
-- Whether any token was ever made (the local runtime asks for none while there is none).
SELECT EXISTS (SELECT 1 FROM tidings.tokens)
