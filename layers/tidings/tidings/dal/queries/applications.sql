-- name: insert_application
-- Creates an application; nothing when its uid is taken (by a live or a deleted application).
INSERT INTO tidings.applications (uid, name, metadata, default_payload_format)
VALUES (%(uid)s, %(name)s, %(metadata)s::jsonb, %(default_payload_format)s::text)
ON CONFLICT (uid) DO NOTHING
RETURNING id, uid, name, metadata, default_payload_format, created_at, updated_at

-- name: find_application
-- The live application a reference names: the one whose uid it is, else, for a reference made of
-- digits, the one whose id it is (a uid wins over an id). A uid keeps naming its application once
-- it is deleted (uids are never reused), so a reference never moves on to another application:
-- nothing, then.
SELECT a.id, a.uid, a.name, a.metadata, a.default_payload_format, a.created_at, a.updated_at
FROM (SELECT n.id, n.uid, n.name, n.metadata, n.default_payload_format, n.created_at,
             n.updated_at, n.deleted_at
      FROM tidings.applications n
      WHERE n.uid = %(ref)s OR n.id = %(id)s::bigint
      ORDER BY n.uid = %(ref)s DESC
      LIMIT 1) a
WHERE a.deleted_at IS NULL

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

-- name: mark_application_deleted
-- The first step of deleting an application, committed on its own with the retirement below:
-- marks it deleted (not 'default': its CHECK refuses it; excluded here). It waits for nobody:
-- FOR KEY SHARE, which sending events, adding endpoints and adding tokens hold, does not conflict
-- with this update. Once it commits, every later call reads the application as deleted and
-- refuses it before it locks anything, and its endpoints are disabled.
UPDATE tidings.applications a
SET deleted_at = now(), updated_at = now()
WHERE a.id = %(app_id)s AND a.id <> 1 AND a.deleted_at IS NULL
RETURNING a.id

-- name: wait_for_application_writers
-- The second step of deleting an application (its own transaction, after the first committed):
-- its row FOR UPDATE, which waits for the transactions still sending events to it or adding
-- endpoints or tokens to it (they hold it FOR KEY SHARE). Nobody joins them once the deletion
-- is committed, so the wait ends when they do, however steady the traffic.
SELECT a.id
FROM tidings.applications a
WHERE a.id = %(app_id)s AND a.deleted_at IS NOT NULL
FOR UPDATE

-- name: retire_application_endpoints
-- The last step of deleting an application, in the transaction of the second, with a snapshot
-- taken after it (so it sees every event sent to the application until it was deleted): disables its endpoints, and dead-letters their undelivered
-- messages with the reason (kept as history, replayable should the application come back),
-- out of the queue, so that an attempt in flight records nothing. Returns the endpoints disabled
-- and the messages dead-lettered.
WITH retired AS (
    UPDATE tidings.endpoints e
    SET enabled = false, disabled_reason = 'application deleted',
        disabled_at = coalesce(e.disabled_at, now()), updated_at = now()
    WHERE e.app_id = %(app_id)s AND e.deleted_at IS NULL
    RETURNING e.id
),
dequeued AS (
    DELETE FROM tidings.queue q
    USING tidings.endpoints e
    WHERE e.app_id = %(app_id)s
      AND q.endpoint_id = e.id
    RETURNING q.message_id
),
abandoned AS (
    UPDATE tidings.message_rows m
    SET status = 'dead_letter', dead_lettered_at = now(), dead_letter_reported_at = NULL,
        last_error = 'endpoint disabled: application deleted'
    FROM dequeued q
    WHERE m.id = q.message_id
    RETURNING m.id
)
SELECT (SELECT count(*) FROM retired) AS endpoints, (SELECT count(*) FROM abandoned) AS messages

-- name: operational_application
-- The uid of the deployment's operational application, as the migrator last wrote it (from
-- TIDINGS_OPERATIONAL_APPLICATION): the database's word, whatever the caller's environment says.
SELECT s.text_value FROM tidings.settings s WHERE s.name = 'operational_application'
