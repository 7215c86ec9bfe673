-- Applications: the tenants of a deployment, each with its own endpoints; and what a fair claim
-- across them needs.

-- An application is one customer of the producer's (Svix calls it an application, Convoy a
-- project). uid is the producer's own id for that customer. Rows made before this migration
-- belong to the application 'default', which single-tenant use keeps using without naming it.
CREATE TABLE tidings.applications (
    id          bigint GENERATED ALWAYS AS IDENTITY (START WITH 2) PRIMARY KEY,
    uid         text NOT NULL UNIQUE
                CHECK (uid ~ '^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$'),
    name        text NOT NULL DEFAULT '' CHECK (length(name) <= 200),
    metadata    jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    -- A deleted application keeps its row, so that the history of its messages stays readable.
    deleted_at  timestamptz,
    -- The claimer's place among this application's endpoints: the last one that got the larger
    -- part in a round that split the application's part unevenly (0 before any). The next such
    -- round starts after it. Written by the claim only, and only in those rounds.
    claim_after_endpoint_id  bigint NOT NULL DEFAULT 0
);
INSERT INTO tidings.applications (id, uid, name)
    OVERRIDING SYSTEM VALUE VALUES (1, 'default', 'default');

-- A constant default: adding the column changes the catalog only (no rewrite of endpoints), and
-- every endpoint made without naming an application lands in 'default'.
ALTER TABLE tidings.endpoints
    ADD COLUMN app_id bigint NOT NULL DEFAULT 1 REFERENCES tidings.applications (id);
CREATE INDEX endpoints_by_app ON tidings.endpoints (app_id, id);

-- The claimer's place among applications: the last one that got the larger part in a round that
-- split the batch unevenly among them. One row, moved at most once per claim round.
CREATE TABLE tidings.claim_rotation (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    after_app_id  bigint NOT NULL DEFAULT 0
);
INSERT INTO tidings.claim_rotation DEFAULT VALUES;

-- The rows in flight, for the claim's bound on them (max_in_flight): counting them through the
-- claim index would read every queued row. A row enters it when it is leased (an update that
-- writes index entries anyway) and leaves when its outcome is recorded.
CREATE INDEX messages_in_flight ON tidings.messages (next_attempt_at) WHERE status = 'in_flight';
