-- tidings:no-transaction
-- Events past the idempotency window that no message refers to are pruned: found by time. A BRIN
-- index costs the ingest path almost nothing (events arrive in time order). Built concurrently,
-- so ingest goes on meanwhile; what a failed build left goes first.
DROP INDEX CONCURRENTLY IF EXISTS tidings.events_by_time;
CREATE INDEX CONCURRENTLY events_by_time ON tidings.events USING brin (created_at);
