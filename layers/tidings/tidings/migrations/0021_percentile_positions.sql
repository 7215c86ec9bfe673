-- Percentiles found by moving each endpoint's kept position in its window histogram, instead of
-- locating every percentile afresh through group sums on every run.

-- The group sums only served that search; the kept positions replace it.
DROP TABLE tidings.latency_window_coarse;

-- Where each percentile (50, 95, 99, in that order) sits in the endpoint's window histogram, kept
-- by the percentiles job between runs: the bucket holding it, the count of the buckets before
-- that bucket, and the count in it. With sample_count (the window's total) these let a run apply
-- the window's changes and then step to the new bucket, reading only the buckets in between.
-- NULL until the job first places them; the job places them afresh after any rebuild.
ALTER TABLE tidings.endpoint_health
    ADD COLUMN percentile_buckets smallint[],
    ADD COLUMN percentile_below integer[],
    ADD COLUMN percentile_at integer[];
