-- tidings:no-transaction
-- Each endpoint's rows in flight, for the claim's per-endpoint cap (tidings.rows_in_flight): a
-- partial index of the few in-flight rows, so counting a capped endpoint's reads neither its
-- backlog nor its retries waiting in the database. Built without blocking writes; safe to run
-- again (a build cut short leaves an invalid index, dropped first).
--
-- Its predicate is the status, not the lease token: every write of the delivery path matches a
-- row's lease token (m.lease_token = ...), which implies "lease_token IS NOT NULL", so an index
-- with that predicate is one the planner may scan whole, on every call, in place of the primary
-- key (measured in bench/e2e.py: begin_attempts took ten times as long).
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_in_flight_by_endpoint;
CREATE INDEX CONCURRENTLY messages_in_flight_by_endpoint
    ON tidings.messages (endpoint_id, next_attempt_at)
    WHERE status = 'in_flight';
