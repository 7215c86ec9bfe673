-- The consumer portal: links that open it for one application, the sessions they are exchanged
-- for, read-only application tokens, and the current signing secret revealed on request.
--
-- Scopes of tokens, in addition to admin, producer and app:
--   app_read: read everything inside app_id (endpoints, messages, health), change nothing and
--     reveal no secret (a read-only portal session, or a token made for a dashboard);
--   portal_link: nothing but being exchanged, once, for a session of session_scope ('app' or
--     'app_read') in app_id. It always expires. exchanged_at says when it was used.
-- A session is an app or app_read token whose portal_link_id names the link it came from.
-- created_by names the token that made a link (NULL: an operator, from the command line): a link
-- and its sessions are refused once that token is revoked or expired, and a session once its
-- link is revoked (tokens_with_prefix reads the chain), so revoking a leaked token or link ends
-- everything that came from it.
ALTER TABLE tidings.tokens DROP CONSTRAINT tokens_scope_check;
ALTER TABLE tidings.tokens DROP CONSTRAINT tokens_check;
ALTER TABLE tidings.tokens
    ADD COLUMN session_scope text CHECK (session_scope IN ('app', 'app_read')),
    ADD COLUMN exchanged_at timestamptz,
    ADD COLUMN portal_link_id bigint REFERENCES tidings.tokens (id),
    ADD COLUMN created_by bigint REFERENCES tidings.tokens (id),
    ADD CONSTRAINT tokens_scope_check
        CHECK (scope IN ('admin', 'producer', 'app', 'app_read', 'portal_link')),
    ADD CONSTRAINT tokens_application_check
        CHECK ((scope IN ('app', 'app_read', 'portal_link')) = (app_id IS NOT NULL)),
    ADD CONSTRAINT tokens_portal_link_check
        CHECK ((scope = 'portal_link') = (session_scope IS NOT NULL)
               AND (scope <> 'portal_link' OR expires_at IS NOT NULL)
               AND (exchanged_at IS NULL OR scope = 'portal_link')
               AND (portal_link_id IS NULL OR scope IN ('app', 'app_read'))
               AND (created_by IS NULL OR scope = 'portal_link'));

-- endpoint_signing_secret_v1: the current signing secret of an endpoint of an application, as
-- stored (sealed: the caller opens it with its data key), for revealing it on request. No row
-- when the endpoint is not the application's, is deleted, or has no current secret. The only way
-- besides the sender's begin_attempts_v1 that a sealed secret leaves the database.
CREATE FUNCTION tidings.endpoint_signing_secret_v1(p_app_id bigint, p_endpoint_id bigint)
RETURNS TABLE (data_key_id bigint, ciphertext bytea)
LANGUAGE sql STABLE AS $$
    SELECT s.data_key_id, s.ciphertext
    FROM tidings.endpoint_secrets s
    JOIN tidings.endpoints e ON e.id = s.endpoint_id
    WHERE e.id = p_endpoint_id AND e.app_id = p_app_id AND e.deleted_at IS NULL
      AND s.expires_at IS NULL
    ORDER BY s.id DESC
    LIMIT 1
$$;
ALTER FUNCTION tidings.endpoint_signing_secret_v1(bigint, bigint)
    SECURITY DEFINER SET search_path = pg_catalog, pg_temp;
REVOKE ALL ON FUNCTION tidings.endpoint_signing_secret_v1(bigint, bigint) FROM PUBLIC;

-- The API makes links, opens sessions, reveals secrets and draws the health chart; operators make
-- links from the command line (no session, no secret revealed) and list them.
GRANT SELECT (session_scope, exchanged_at, portal_link_id, created_by),
      INSERT (session_scope, portal_link_id, created_by),
      UPDATE (exchanged_at)
    ON tidings.tokens TO tidings_ingest;
GRANT EXECUTE ON FUNCTION tidings.endpoint_signing_secret_v1(bigint, bigint) TO tidings_ingest;
GRANT SELECT (endpoint_id) ON tidings.attempts TO tidings_ingest;
GRANT SELECT (session_scope, exchanged_at, portal_link_id), INSERT (session_scope, created_by)
    ON tidings.tokens TO tidings_operator;
GRANT SELECT (portal_link_id, created_by) ON tidings.tokens TO tidings_authorizer;
