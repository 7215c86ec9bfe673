-- name: insert_event_type
-- A new catalog entry with its first version (schema and examples); no row when the name is
-- taken.
WITH created AS (
    INSERT INTO tidings.event_types (name, description, deprecated, archived, validate_payloads)
    VALUES (%(name)s, %(description)s, %(deprecated)s, %(archived)s, %(validate_payloads)s)
    ON CONFLICT ON CONSTRAINT event_types_name_key DO NOTHING
    RETURNING id, version
)
INSERT INTO tidings.event_type_versions (event_type_id, version, schema, schema_digest, examples)
SELECT c.id, c.version, %(schema)s::jsonb, %(schema_digest)s, %(examples)s::jsonb
FROM created c
RETURNING event_type_id

-- name: lock_event_type
-- Locks one catalog entry's row until the transaction ends, so that changes to it are made one
-- after the other (its current version is read after, by get_event_type: a join here would
-- miss the row a concurrent change gave a new version while this waited).
SELECT t.id
FROM tidings.event_types t
WHERE t.name = %(name)s
FOR UPDATE

-- name: update_event_type
-- Sets a catalog entry's plain fields (those that make no new version).
UPDATE tidings.event_types
SET description = %(description)s, deprecated = %(deprecated)s, archived = %(archived)s,
    validate_payloads = %(validate_payloads)s, updated_at = now()
WHERE id = %(id)s

-- name: add_event_type_version
-- A new version of a catalog entry's schema and examples, which becomes its current one.
WITH bumped AS (
    UPDATE tidings.event_types
    SET version = version + 1, updated_at = now()
    WHERE id = %(id)s
    RETURNING id, version
)
INSERT INTO tidings.event_type_versions (event_type_id, version, schema, schema_digest, examples)
SELECT b.id, b.version, %(schema)s::jsonb, %(schema_digest)s, %(examples)s::jsonb
FROM bumped b
RETURNING version

-- name: get_event_type
-- One catalog entry with its current schema and examples.
SELECT t.id, t.name, t.description, t.deprecated, t.archived, t.validate_payloads, t.version,
       t.created_at, t.updated_at, v.schema::text AS schema, v.examples::text AS examples
FROM tidings.event_types t
JOIN tidings.event_type_versions v ON v.event_type_id = t.id AND v.version = t.version
WHERE t.name = %(name)s

-- name: list_event_types
-- A page of the catalog by ascending id after the cursor id (NULL for the first page), archived
-- entries only when asked for; one extra row tells whether a next page exists.
SELECT t.id, t.name, t.description, t.deprecated, t.archived, t.validate_payloads, t.version,
       t.created_at, t.updated_at, v.schema::text AS schema, v.examples::text AS examples
FROM tidings.event_types t
JOIN tidings.event_type_versions v ON v.event_type_id = t.id AND v.version = t.version
WHERE (%(after_id)s::bigint IS NULL OR t.id > %(after_id)s::bigint)
  AND (%(include_archived)s OR NOT t.archived)
ORDER BY t.id
LIMIT %(limit)s + 1

-- name: get_event_type_version
-- One version of a catalog entry's schema and examples.
SELECT t.name, v.version, v.schema::text AS schema, v.examples::text AS examples, v.created_at
FROM tidings.event_types t
JOIN tidings.event_type_versions v ON v.event_type_id = t.id
WHERE t.name = %(name)s AND v.version = %(version)s

-- name: payload_validators
-- Of the named event types, those whose payloads are checked: their current version and its
-- schema's digest (the key of a compiled validator), never the schema itself, which is read
-- once per digest (event_type_schema).
SELECT t.name, t.version, v.schema_digest
FROM tidings.event_types t
JOIN tidings.event_type_versions v ON v.event_type_id = t.id AND v.version = t.version
WHERE t.name = ANY(%(names)s::text[]) AND t.validate_payloads AND v.schema IS NOT NULL

-- name: event_type_schema
-- The schema of one version of a catalog entry.
SELECT v.schema::text AS schema
FROM tidings.event_types t
JOIN tidings.event_type_versions v ON v.event_type_id = t.id
WHERE t.name = %(name)s AND v.version = %(version)s

-- name: mark_example_event
-- Marks an event as one "send example" made (its messages' histories say so).
UPDATE tidings.events SET example = true WHERE id = %(event_ref)s
