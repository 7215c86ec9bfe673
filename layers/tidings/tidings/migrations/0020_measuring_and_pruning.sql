-- Latency histograms, state of the scheduled jobs, failing streaks, and attempt partition upkeep.

-- Attempts' response times as log-scale histograms, one row per endpoint, minute and bucket.
-- Bucket b holds latencies in [g^b, g^(b+1)) ms for the growth factor g that tidings.percentiles
-- names; bucket -1 holds 0 ms. Rolled up from attempts by the percentiles job.
CREATE TABLE tidings.latency_buckets (
    endpoint_id  bigint NOT NULL,
    minute       timestamptz NOT NULL,
    bucket       smallint NOT NULL,
    n            integer NOT NULL CHECK (n > 0),
    -- Minute first: every read and delete is a range of minutes.
    PRIMARY KEY (minute, endpoint_id, bucket)
);

-- The roll-up reads the attempts of the last minutes of all endpoints. Attempts arrive in time
-- order, so a BRIN index finds them for almost nothing on the senders' insert path.
CREATE INDEX attempts_by_time ON tidings.attempts USING brin (attempted_at);

-- The sum of latency_buckets over the minutes of the rolling window, kept up to date
-- incrementally (minutes entering are added, minutes leaving subtracted), so that computing
-- every endpoint's percentiles reads one small histogram per endpoint. (n has no CHECK (n >= 0):
-- an upsert checks the proposed row, which carries the change, not the sum.)
CREATE TABLE tidings.latency_window (
    endpoint_id  bigint NOT NULL,
    bucket       smallint NOT NULL,
    n            integer NOT NULL,
    PRIMARY KEY (endpoint_id, bucket)
) WITH (fillfactor = 50);

-- The window histogram summed over groups of consecutive buckets (group g holds buckets
-- [g * size, (g + 1) * size) for the size tidings.percentiles names): the cumulative counts of a
-- few groups find the group holding a percentile, and only that group's buckets are read.
-- Both window tables leave room in their pages so that their counts change by HOT updates.
CREATE TABLE tidings.latency_window_coarse (
    endpoint_id  bigint NOT NULL,
    grp          smallint NOT NULL,
    n            integer NOT NULL,
    PRIMARY KEY (endpoint_id, grp)
) WITH (fillfactor = 50);

-- What a scheduled job remembers between runs (watermarks, counts seen last time).
CREATE TABLE tidings.job_state (
    job         text PRIMARY KEY,
    -- Percentiles: attempts before rolled_to are in latency_buckets (up to the re-read margin);
    -- latency_window holds the minutes from window_from on, for a window of window_s seconds.
    rolled_to   timestamptz,
    window_from timestamptz,
    window_s    double precision,
    details     jsonb NOT NULL DEFAULT '{}',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- When the endpoint's current run of failures began (NULL while it is not failing); kept by the
-- health monitor, which disables endpoints that have failed without a success for too long.
ALTER TABLE tidings.endpoint_health ADD COLUMN failing_since timestamptz;

-- Creates the daily partitions of attempts for [from_day, from_day + days) that do not exist,
-- skipping a day whose rows already sit in the default partition (creating that partition would
-- fail; those rows leave with the default partition's batched pruning). Gives up on a lock it
-- cannot take within lock_timeout_ms instead of stalling the senders' inserts behind it.
CREATE FUNCTION tidings.ensure_attempt_partitions(from_day date, days integer, lock_timeout_ms integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    day date;
    created integer := 0;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    FOR i IN 0 .. days - 1 LOOP
        day := from_day + i;
        CONTINUE WHEN to_regclass('tidings.attempts_' || to_char(day, 'YYYYMMDD')) IS NOT NULL;
        CONTINUE WHEN EXISTS (
            SELECT 1 FROM tidings.attempts_default
            WHERE attempted_at >= day::timestamp AT TIME ZONE 'UTC'
              AND attempted_at < (day + 1)::timestamp AT TIME ZONE 'UTC');
        created := created + tidings.create_attempt_partitions(day, 1);
    END LOOP;
    RETURN created;
END $$;

-- Drops the oldest daily partition of attempts whose whole day ends at or before cutoff, and
-- returns its name (NULL when none is due). One partition per call, so each drop is its own short
-- transaction: dropping a partition locks the parent table exclusively for a moment.
CREATE FUNCTION tidings.drop_oldest_attempt_partition(cutoff timestamptz, lock_timeout_ms integer)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    victim text;
BEGIN
    PERFORM set_config('lock_timeout', lock_timeout_ms::text, true);
    SELECT c.relname INTO victim
    FROM pg_inherits i
    JOIN pg_class c ON c.oid = i.inhrelid
    WHERE i.inhparent = 'tidings.attempts'::regclass
      AND c.relname ~ '^attempts_[0-9]{8}$'
      AND (to_date(substr(c.relname, 10), 'YYYYMMDD') + 1)::timestamp AT TIME ZONE 'UTC' <= cutoff
    ORDER BY c.relname
    LIMIT 1;
    IF victim IS NOT NULL THEN
        EXECUTE format('DROP TABLE tidings.%I', victim);
    END IF;
    RETURN victim;
END $$;
