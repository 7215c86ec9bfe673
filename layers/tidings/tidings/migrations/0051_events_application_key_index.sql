-- tidings:no-transaction
-- The index of the new idempotency key (application, event type, event id), built without
-- blocking writes: CREATE INDEX CONCURRENTLY takes SHARE UPDATE EXCLUSIVE on events, so
-- producers keep inserting and senders keep reading while it scans the table twice; it waits for
-- the transactions open when it starts. It cannot run in a transaction block, hence this
-- migration runs on its own. 0052 turns it into the constraint.
--
-- A failed or interrupted build leaves an invalid index behind; a second run drops whatever is
-- there first, concurrently too.
DROP INDEX CONCURRENTLY IF EXISTS tidings.events_app_key;
CREATE UNIQUE INDEX CONCURRENTLY events_app_key ON tidings.events (app_id, event_type, event_id);
