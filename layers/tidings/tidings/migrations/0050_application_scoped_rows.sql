-- Applications reach events, subscriptions and credentials. The first of three migrations that
-- make (application, event type, event id) the idempotency key; 0051 builds its index without
-- blocking writes, 0052 swaps it in and teaches tidings.enqueue about applications. Until 0052
-- commits, the functions of 0010 keep working unchanged: every event they record is 'default''s.
--
-- Locks, in the order they are taken (all held until this migration's transaction commits, which
-- is quick: nothing below scans events or messages):
--   events         ACCESS EXCLUSIVE (ADD COLUMN with a constant default, ADD FOREIGN KEY NOT VALID:
--                  catalog changes only, no rewrite, no scan);
--   subscriptions, endpoints, applications: brief locks for small tables (an index build on
--                  endpoints, a scan of subscriptions to check its new foreign key).

-- The application an event was sent to; every event recorded so far went to 'default', as all
-- endpoints did. The foreign key is not validated here (that would read the whole table under the
-- lock above); new rows are checked from now on, and 0052 validates the old ones under a lock
-- that lets reads and writes go on.
ALTER TABLE tidings.events ADD COLUMN app_id bigint NOT NULL DEFAULT 1;
ALTER TABLE tidings.events ADD CONSTRAINT events_app_id_fkey
    FOREIGN KEY (app_id) REFERENCES tidings.applications (id) NOT VALID;

-- A subscription carries its endpoint's application, so that an event's fan-out reads the
-- subscribers of its type within its own application (subscriptions_by_app_and_type): its cost
-- follows those subscribers, not every application's. The composite foreign key keeps the copy
-- true (an endpoint never changes application). Before this migration only SQL could put an
-- endpoint in another application; the UPDATE catches such rows.
ALTER TABLE tidings.subscriptions ADD COLUMN app_id bigint NOT NULL DEFAULT 1;
UPDATE tidings.subscriptions s
SET app_id = e.app_id
FROM tidings.endpoints e
WHERE e.id = s.endpoint_id AND e.app_id <> s.app_id;
ALTER TABLE tidings.endpoints ADD CONSTRAINT endpoints_id_app_id_key UNIQUE (id, app_id);
ALTER TABLE tidings.subscriptions
    DROP CONSTRAINT subscriptions_endpoint_id_fkey,
    ADD CONSTRAINT subscriptions_endpoint_app_fkey FOREIGN KEY (endpoint_id, app_id)
        REFERENCES tidings.endpoints (id, app_id) ON DELETE CASCADE;
CREATE INDEX subscriptions_by_app_and_type ON tidings.subscriptions (app_id, event_type);

-- 'default' is where every caller that names no application lands: it can be neither deleted
-- nor renamed.
ALTER TABLE tidings.applications
    ADD CONSTRAINT default_application_stays CHECK (id <> 1 OR (deleted_at IS NULL AND uid = 'default'));

-- Credentials for the HTTP API: bearer tokens, shown once when created and stored only as a hash.
-- A token is 'tdg_' and 43 characters of URL-safe base64 (32 random bytes); prefix is its first
-- 12 characters, kept to find it and to tell tokens apart in a listing. hash is SHA-256 of the
-- whole token: for a secret of 256 random bits a fast hash is as strong as a slow one (nothing to
-- guess), and a request pays microseconds for it instead of a password hash's tens of
-- milliseconds.
--   scope admin: everything, applications and tokens included; producer: send events to any
--   application and read messages, nothing about endpoints; app: everything inside app_id.
CREATE TABLE tidings.tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    prefix        text NOT NULL CHECK (prefix ~ '^tdg_[A-Za-z0-9_-]{8}$'),
    hash          bytea NOT NULL UNIQUE CHECK (length(hash) = 32),
    scope         text NOT NULL CHECK (scope IN ('admin', 'producer', 'app')),
    app_id        bigint REFERENCES tidings.applications (id),
    description   text NOT NULL DEFAULT '' CHECK (length(description) <= 200),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz,
    revoked_at    timestamptz,
    -- On AWS: the API Gateway API key that the usage plan throttles this token's requests by
    -- (made on the token's first request; see tidings.usage_keys).
    usage_key_id  text,
    CHECK ((scope = 'app') = (app_id IS NOT NULL)),
    CHECK (expires_at IS NULL OR expires_at > created_at)
);
CREATE INDEX tokens_by_prefix ON tidings.tokens (prefix);
