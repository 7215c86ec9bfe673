-- tidings: outside a transaction
-- The index of the new idempotency key (application, event type, event id), built without
-- blocking writes: CREATE INDEX CONCURRENTLY takes SHARE UPDATE EXCLUSIVE on events, so
-- producers keep inserting and senders keep reading while it scans the table twice; it waits for
-- the transactions open when it starts. It cannot run in a transaction block, hence this
-- migration runs on its own. 0052 turns it into the constraint.
--
-- A failed or interrupted build leaves an invalid index behind; a second run drops it first
-- (DROP INDEX takes ACCESS EXCLUSIVE on events for a moment, and only then).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_index i
               WHERE i.indexrelid = to_regclass('tidings.events_app_key') AND NOT i.indisvalid) THEN
        DROP INDEX tidings.events_app_key;
    END IF;
END $$;
-- tidings: next statement
CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS events_app_key
    ON tidings.events (app_id, event_type, event_id);
