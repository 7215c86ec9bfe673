-- name: insert_application
-- Creates an application; nothing when its uid is taken (by a live or a deleted application).
INSERT INTO tidings.applications (uid, name, metadata, default_payload_format)
VALUES (%(uid)s, %(name)s, %(metadata)s::jsonb, %(default_payload_format)s::text)
ON CONFLICT (uid) DO NOTHING
RETURNING id, uid, name, metadata, default_payload_format, created_at, updated_at

-- name: find_application
-- The live application a reference names: the one whose uid it is, else, for a reference made of
-- digits, the one whose id it is (a uid wins over an id).
SELECT a.id, a.uid, a.name, a.metadata, a.default_payload_format, a.created_at, a.updated_at
FROM tidings.applications a
WHERE a.deleted_at IS NULL
  AND (a.uid = %(ref)s OR a.id = %(id)s::bigint)
ORDER BY a.uid = %(ref)s DESC
LIMIT 1

-- name: list_applications
-- A page of live applications by ascending id after the cursor id (0 for the first page); one
-- more row than the page size tells whether another page follows.
SELECT a.id, a.uid, a.name, a.metadata, a.default_payload_format, a.created_at, a.updated_at
FROM tidings.applications a
WHERE a.deleted_at IS NULL AND a.id > %(after_id)s
ORDER BY a.id
LIMIT %(limit)s + 1

-- name: update_application
-- Changes the name, the metadata and/or the default payload format of its new endpoints (each
-- when its set_ flag is true; a NULL format means the deployment's) of a live application.
UPDATE tidings.applications a
SET name = CASE WHEN %(set_name)s THEN %(name)s ELSE a.name END,
    metadata = CASE WHEN %(set_metadata)s THEN %(metadata)s::jsonb ELSE a.metadata END,
    default_payload_format = CASE WHEN %(set_default_payload_format)s
                                  THEN %(default_payload_format)s::text
                                  ELSE a.default_payload_format END,
    updated_at = now()
WHERE a.id = %(app_id)s AND a.deleted_at IS NULL
RETURNING a.id, a.uid, a.name, a.metadata, a.default_payload_format, a.created_at, a.updated_at

-- name: lock_application_for_deletion
-- The deletion lock of an application, exclusively, until the deleting transaction ends: waits
-- for the transactions that are sending events to it (tidings.enqueue_batch holds it shared) and
-- makes those that come later wait in turn, so that a deletion is never starved by traffic.
SELECT pg_advisory_xact_lock(1953064041, mod(%(app_id)s, 2147483648)::integer)

-- name: mark_application_deleted
-- The next step of deleting an application (in the deleting transaction): marks it deleted,
-- after waiting, through FOR UPDATE, for every transaction that is sending events to it or
-- adding endpoints or tokens to it (they hold it FOR KEY SHARE); those that come later find it
-- deleted. 'default' is never deleted (its CHECK refuses it; excluded here).
WITH locked AS (
    SELECT a.id
    FROM tidings.applications a
    WHERE a.id = %(app_id)s AND a.id <> 1 AND a.deleted_at IS NULL
    FOR UPDATE
)
UPDATE tidings.applications a
SET deleted_at = now(), updated_at = now()
FROM locked
WHERE a.id = locked.id
RETURNING a.id

-- name: retire_application_endpoints
-- The last step of deleting an application, with a snapshot taken after the others (so it sees
-- every event sent to it until then): disables its endpoints, and dead-letters their undelivered
-- messages with the reason (kept as history, replayable should the application come back),
-- clearing leases so that an attempt in flight records nothing. Returns the endpoints disabled
-- and the messages dead-lettered.
WITH retired AS (
    UPDATE tidings.endpoints e
    SET enabled = false, disabled_reason = 'application deleted',
        disabled_at = coalesce(e.disabled_at, now()), updated_at = now()
    WHERE e.app_id = %(app_id)s AND e.deleted_at IS NULL
    RETURNING e.id
),
abandoned AS (
    UPDATE tidings.messages m
    SET status = 'dead_letter', dead_lettered_at = now(), dead_letter_reported_at = NULL,
        lease_token = NULL, last_error = 'endpoint disabled: application deleted'
    FROM tidings.endpoints e
    WHERE e.app_id = %(app_id)s
      AND m.endpoint_id = e.id
      AND m.status IN ('pending', 'failed', 'in_flight')
    RETURNING m.id
)
SELECT (SELECT count(*) FROM retired) AS endpoints, (SELECT count(*) FROM abandoned) AS messages
