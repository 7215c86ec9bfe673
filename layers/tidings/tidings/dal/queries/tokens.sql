-- name: insert_token
-- Stores a new token's prefix and hash. An application token is made only for a live application,
-- held FOR KEY SHARE until the commit (so a concurrent deletion either waits for this token or
-- is seen); nothing is returned when that application is not there. A portal link made by a
-- token (created_by) expires no later than that token.
INSERT INTO tidings.tokens (prefix, hash, scope, app_id, description, expires_at, session_scope,
                            created_by)
SELECT %(prefix)s, %(hash)s, %(scope)s, %(app_id)s, %(description)s,
       least(%(expires_at)s::timestamptz,
             (SELECT m.expires_at FROM tidings.tokens m WHERE m.id = %(created_by)s::bigint)),
       %(session_scope)s, %(created_by)s
WHERE %(app_id)s::bigint IS NULL
   OR EXISTS (SELECT 1 FROM tidings.applications a
              WHERE a.id = %(app_id)s::bigint AND a.deleted_at IS NULL
              FOR KEY SHARE)
RETURNING id, prefix, scope, app_id, description, created_at, expires_at, revoked_at,
          session_scope, exchanged_at, portal_link_id

-- name: exchange_portal_link
-- Uses a portal link, once: marks it exchanged and makes the session it opens, an app or app_read
-- token of the link's application that expires session_s from now, in one statement. Nothing
-- (no row) when the link is not a portal link, is used already, revoked or expired, the token
-- that made it is revoked or expired, or its application is deleted; the application is held FOR KEY SHARE until the commit, as for any
-- new token.
WITH used AS (
    UPDATE tidings.tokens l
    SET exchanged_at = now()
    WHERE l.id = %(link_id)s
      AND l.scope = 'portal_link'
      AND l.exchanged_at IS NULL
      AND l.revoked_at IS NULL
      AND l.expires_at > now()
      AND NOT EXISTS (SELECT 1 FROM tidings.tokens m
                      WHERE m.id = l.created_by
                        AND (m.revoked_at IS NOT NULL OR m.expires_at <= now()))
      AND EXISTS (SELECT 1 FROM tidings.applications a
                  WHERE a.id = l.app_id AND a.deleted_at IS NULL
                  FOR KEY SHARE)
    RETURNING l.id, l.app_id, l.session_scope
),
made AS (
    INSERT INTO tidings.tokens AS t (prefix, hash, scope, app_id, description, expires_at,
                                     portal_link_id)
    SELECT %(prefix)s, %(hash)s, u.session_scope, u.app_id, 'portal session',
           now() + %(session_s)s * interval '1 second', u.id
    FROM used u
    RETURNING t.id, t.scope, t.app_id, t.expires_at
)
SELECT made.id, made.scope, made.app_id, made.expires_at, a.uid AS app_uid, a.name AS app_name
FROM made
JOIN tidings.applications a ON a.id = made.app_id

-- name: tokens_with_prefix
-- The tokens whose prefix is the one presented (almost always one or none), with their hashes to
-- compare, their state, their application's uid and whether it is deleted, and whether what they
-- came from is revoked or expired (a session's link; the token that made a link or its
-- session's link), read at one moment (now() is that moment).
SELECT t.id, t.hash, t.scope, t.app_id, a.uid AS app_uid, a.deleted_at IS NOT NULL AS app_deleted,
       t.expires_at, t.revoked_at, t.usage_key_id, t.portal_link_id,
       coalesce(l.revoked_at IS NOT NULL OR m.revoked_at IS NOT NULL OR m.expires_at <= now(),
                false) AS origin_revoked,
       now() AS db_now
FROM tidings.tokens t
LEFT JOIN tidings.applications a ON a.id = t.app_id
LEFT JOIN tidings.tokens l ON l.id = t.portal_link_id
LEFT JOIN tidings.tokens m ON m.id = coalesce(l.created_by, t.created_by)
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
       t.expires_at, t.revoked_at, t.session_scope, t.exchanged_at, t.portal_link_id
FROM tidings.tokens t
LEFT JOIN tidings.applications a ON a.id = t.app_id
WHERE t.id > %(after_id)s
ORDER BY t.id
LIMIT %(limit)s + 1

-- name: get_token
-- One token (never its hash).
SELECT t.id, t.prefix, t.scope, t.app_id, a.uid AS app_uid, t.description, t.created_at,
       t.expires_at, t.revoked_at, t.session_scope, t.exchanged_at, t.portal_link_id
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
