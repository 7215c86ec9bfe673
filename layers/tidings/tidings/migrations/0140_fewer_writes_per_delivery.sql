-- tidings:no-transaction
-- Fewer writes per delivery: what each one costs the database's CPU and write-ahead log.
--
-- A message row changes three times on its way (claimed, begun, recorded). The sender's begin
-- changes no indexed column (the claim's lease already covers the time in the queue: see
-- lease_queue_allowance_s), so it can be a HOT update, which writes no index entry, as long as
-- the row's page has room for the new version. A fifth of each page is now kept free for that
-- (new and moved rows only: pages written before fill up as they are rewritten).
--
-- messages_in_flight (next_attempt_at, of in-flight rows) was read only by the claim's count of
-- live leases, which reads every live lease whichever index gives them;
-- messages_in_flight_by_endpoint (endpoint_id, next_attempt_at, of the same rows) gives them as
-- well. Each claim and each begin that moved a row wrote an entry to both.
ALTER TABLE tidings.messages SET (fillfactor = 80);
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_in_flight;
