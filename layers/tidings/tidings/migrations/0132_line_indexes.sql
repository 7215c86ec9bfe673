-- tidings:no-transaction
-- The places in the lines of FIFO endpoints (0131): one message a place (a line's head is found
-- by its place), and the waiting messages of each line in order, from which an advancer takes
-- the next head and a batch its members. Both hold only the messages of FIFO endpoints. Built
-- without blocking writes; safe to run again (a build cut short leaves an invalid index,
-- dropped first).
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_line_place;
CREATE UNIQUE INDEX CONCURRENTLY messages_line_place
    ON tidings.messages (endpoint_id, line_key, line_seq)
    WHERE line_key IS NOT NULL;
DROP INDEX CONCURRENTLY IF EXISTS tidings.messages_line_waiting;
CREATE INDEX CONCURRENTLY messages_line_waiting
    ON tidings.messages (endpoint_id, line_key, line_seq)
    WHERE status = 'waiting';
