-- The event-type catalog: what each event type is for, what its payloads look like (a JSON
-- Schema, draft 2020-12) and examples of them, shared by every application of the deployment.
--
-- A type's schema and examples change together, as a version: each change adds a row to
-- tidings.event_type_versions (1, 2, 3, …) and moves the type's `version` to it, so every earlier
-- schema stays readable. Versions are never changed or deleted. `schema_digest` is the SHA-256
-- of the schema's canonical JSON text (keys sorted, no insignificant whitespace), written with
-- it: the API's instances cache a compiled validator by it, and the look-up that ingest makes
-- returns it, so a schema changed through one instance is used by every other at once.
--
-- Catalog names are event types whose characters need no escaping in a URL path (they are
-- addressed as /v1/event-types/{name}): letters, digits and . _ : ~ -. Events of any type can
-- still be sent; the catalog describes those it names.
--
-- events.example marks the events "send example" made, so that a message's history says it was
-- an example. A constant default: adding it changes the catalog only (no rewrite of events).
--
-- Locks: new tables; events gets a column with a constant default (a brief ACCESS EXCLUSIVE lock
-- for the catalog change, no rewrite).

CREATE TABLE tidings.event_types (
    id                bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name              text NOT NULL
        CONSTRAINT event_types_name_key UNIQUE
        CONSTRAINT event_types_name_check CHECK (name ~ '^[A-Za-z0-9._:~-]{1,200}$'),
    description       text NOT NULL DEFAULT ''
        CONSTRAINT event_types_description_check CHECK (length(description) <= 2000),
    deprecated        boolean NOT NULL DEFAULT false,
    -- Hidden from the portal; events of the type are still sent and delivered.
    archived          boolean NOT NULL DEFAULT false,
    -- Whether the API refuses events of the type whose payload does not match the schema.
    validate_payloads boolean NOT NULL DEFAULT false,
    version           integer NOT NULL DEFAULT 1 CONSTRAINT event_types_version_check CHECK (version >= 1),
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE tidings.event_type_versions (
    event_type_id bigint NOT NULL REFERENCES tidings.event_types (id),
    version       integer NOT NULL CONSTRAINT event_type_versions_version_check CHECK (version >= 1),
    schema        jsonb,
    schema_digest text
        CONSTRAINT event_type_versions_digest_check CHECK (schema_digest ~ '^[0-9a-f]{64}$'),
    examples      jsonb NOT NULL DEFAULT '[]'
        CONSTRAINT event_type_versions_examples_check CHECK (jsonb_typeof(examples) = 'array'),
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (event_type_id, version),
    CONSTRAINT event_type_versions_digest_with_schema
        CHECK ((schema IS NULL) = (schema_digest IS NULL))
);

ALTER TABLE tidings.events ADD COLUMN example boolean NOT NULL DEFAULT false;

-- The ingest API and operators keep the catalog, read it when events are sent (validation), mark
-- the events "send example" makes, and read that mark with messages.
GRANT SELECT (id, name, description, deprecated, archived, validate_payloads, version,
              created_at, updated_at),
      INSERT (name, description, deprecated, archived, validate_payloads),
      UPDATE (description, deprecated, archived, validate_payloads, version, updated_at)
    ON tidings.event_types TO tidings_ingest, tidings_operator;
GRANT SELECT, INSERT ON tidings.event_type_versions TO tidings_ingest, tidings_operator;
GRANT SELECT (example), UPDATE (example) ON tidings.events TO tidings_ingest, tidings_operator;
