-- Retry schedules: an endpoint may have its own list of waits between attempts (seconds); NULL
-- means the deployment's schedule. A nullable column without a default changes the catalog only;
-- the CHECK reads the (small) endpoints table once.
ALTER TABLE tidings.endpoints
    ADD COLUMN retry_schedule integer[]
    CONSTRAINT endpoints_retry_schedule_check CHECK (
        retry_schedule IS NULL OR (
            array_ndims(retry_schedule) = 1
            AND cardinality(retry_schedule) BETWEEN 1 AND 50
            AND array_position(retry_schedule, NULL) IS NULL
            AND 1 <= ALL (retry_schedule)
            AND 86400 >= ALL (retry_schedule)));
