-- tidings:no-transaction
-- Each endpoint's rows under a lease, for the claim's per-endpoint cap (tidings.rows_in_flight):
-- a partial index of the few leased rows (in flight, or retrying through the queue), so counting
-- a capped endpoint's reads neither its backlog nor its retries waiting in the database. Built
-- without blocking writes; safe to run again.
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_leased_by_endpoint;
CREATE INDEX CONCURRENTLY messages_leased_by_endpoint
    ON tidings.messages (endpoint_id, next_attempt_at)
    WHERE lease_token IS NOT NULL;
