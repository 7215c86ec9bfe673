-- name: lock_percentiles_state
-- Takes (creating it on first use) and locks the percentiles job's state row for the transaction,
-- so overlapping runs of the job apply their histogram changes one after the other.
INSERT INTO tidings.job_state AS s (job) VALUES ('percentiles')
ON CONFLICT (job) DO UPDATE SET updated_at = s.updated_at
RETURNING s.rolled_to, s.window_from, s.window_s;

-- name: reset_latency_window
-- Forgets the window histogram and the minute histograms from window_from on, before they are
-- rebuilt from the attempts (first run, or the window's length changed).
WITH minutes AS (
    DELETE FROM tidings.latency_buckets WHERE minute >= %(window_from)s
)
DELETE FROM tidings.latency_window;

-- name: advance_latency_window
-- Rolls the attempts made in [reroll_from, now) up into per-minute log-scale histograms
-- (re-reading the minutes already rolled, since attempts may commit late, and storing counts
-- idempotently), then moves the window histogram forward: adds what changed in the minutes from
-- window_from on, and subtracts the minutes in [old_window_from, window_from) that left it.
WITH fresh AS (
    SELECT a.endpoint_id,
           date_trunc('minute', a.attempted_at) AS minute,
           CASE WHEN a.response_ms <= 0 THEN -1
                ELSE floor(ln(a.response_ms::double precision) / ln(%(growth)s))
           END::smallint AS bucket,
           count(*)::integer AS n
    FROM tidings.attempts a
    WHERE a.attempted_at >= %(reroll_from)s
      AND a.attempted_at < %(now)s
      AND a.response_ms IS NOT NULL
    GROUP BY 1, 2, 3
),
previous AS (
    SELECT b.endpoint_id, b.minute, b.bucket, b.n
    FROM tidings.latency_buckets b
    WHERE b.minute >= %(reroll_from)s
),
stored AS (
    INSERT INTO tidings.latency_buckets AS b (endpoint_id, minute, bucket, n)
    SELECT endpoint_id, minute, bucket, n FROM fresh
    ON CONFLICT (endpoint_id, minute, bucket) DO UPDATE SET n = excluded.n
    WHERE b.n <> excluded.n
),
change AS (
    SELECT f.endpoint_id, f.bucket, f.n - coalesce(p.n, 0) AS n
    FROM fresh f
    LEFT JOIN previous p USING (endpoint_id, minute, bucket)
    WHERE f.minute >= %(window_from)s
    UNION ALL
    SELECT b.endpoint_id, b.bucket, -b.n
    FROM tidings.latency_buckets b
    WHERE b.minute >= %(old_window_from)s AND b.minute < %(window_from)s
),
net AS (
    SELECT endpoint_id, bucket, sum(n)::integer AS n
    FROM change
    GROUP BY endpoint_id, bucket
    HAVING sum(n) <> 0
)
INSERT INTO tidings.latency_window AS w (endpoint_id, bucket, n)
SELECT endpoint_id, bucket, n FROM net
ON CONFLICT (endpoint_id, bucket) DO UPDATE SET n = w.n + excluded.n;

-- name: trim_latency_buckets
-- Deletes the minute histograms that left the window and the window's emptied buckets.
WITH emptied AS (
    DELETE FROM tidings.latency_window WHERE n = 0
)
DELETE FROM tidings.latency_buckets WHERE minute < %(window_from)s;

-- name: save_percentiles_state
-- Records how far the percentiles job rolled up and which window its histogram holds.
UPDATE tidings.job_state
SET rolled_to = %(rolled_to)s, window_from = %(window_from)s, window_s = %(window_s)s,
    updated_at = now()
WHERE job = 'percentiles';

-- name: lock_endpoint_health
-- Locks every endpoint's health row in endpoint order, the order the senders lock them in, so
-- that the percentiles update that follows cannot deadlock with them.
SELECT endpoint_id FROM tidings.endpoint_health ORDER BY endpoint_id FOR UPDATE;

-- name: update_endpoint_percentiles
-- Computes p50/p95/p99 and the sample count of every endpoint from the window histogram in one
-- pass (cumulative counts per endpoint; a percentile is the first bucket whose cumulative count
-- reaches q of the total, reported as the bucket's error-balancing midpoint) and writes them with
-- the failure threshold that follows from p95. Endpoints without samples get NULL percentiles and
-- the normal threshold. Returns each endpoint's figures and its previous threshold.
WITH ranked AS (
    SELECT endpoint_id, bucket,
           sum(n) OVER (PARTITION BY endpoint_id ORDER BY bucket) AS cumulative,
           sum(n) OVER (PARTITION BY endpoint_id) AS total
    FROM tidings.latency_window
    WHERE n > 0
),
picked AS (
    SELECT endpoint_id,
           max(total)::integer AS samples,
           min(bucket) FILTER (WHERE cumulative >= 0.50 * total) AS b50,
           min(bucket) FILTER (WHERE cumulative >= 0.95 * total) AS b95,
           min(bucket) FILTER (WHERE cumulative >= 0.99 * total) AS b99
    FROM ranked
    GROUP BY endpoint_id
),
figures AS (
    SELECT h.endpoint_id,
           h.failure_threshold AS previous_threshold,
           coalesce(p.samples, 0) AS samples,
           CASE WHEN p.b50 < 0 THEN 0
                ELSE 2 * power(%(growth)s, p.b50 + 1) / (1 + %(growth)s) END AS p50,
           CASE WHEN p.b95 < 0 THEN 0
                ELSE 2 * power(%(growth)s, p.b95 + 1) / (1 + %(growth)s) END AS p95,
           CASE WHEN p.b99 < 0 THEN 0
                ELSE 2 * power(%(growth)s, p.b99 + 1) / (1 + %(growth)s) END AS p99
    FROM tidings.endpoint_health h
    LEFT JOIN picked p USING (endpoint_id)
)
UPDATE tidings.endpoint_health h
SET p50_ms = f.p50,
    p95_ms = f.p95,
    p99_ms = f.p99,
    sample_count = f.samples,
    percentiles_at = %(now)s,
    failure_threshold = CASE WHEN f.p95 > %(slow_p95_ms)s THEN %(slow_threshold)s
                             ELSE %(normal_threshold)s END
FROM figures f
WHERE h.endpoint_id = f.endpoint_id
RETURNING h.endpoint_id, h.p50_ms, h.p95_ms, h.p99_ms, h.sample_count, h.failure_threshold,
          f.previous_threshold;

-- name: track_failing_streaks
-- Marks when each endpoint's current run of failures began (its first failed attempt after its
-- last success, or its last failure when those attempts were pruned) and clears the mark of
-- endpoints that succeeded since.
UPDATE tidings.endpoint_health h
SET failing_since = CASE
        WHEN h.last_failure_at > coalesce(h.last_success_at, '-infinity') THEN
            coalesce((SELECT min(a.attempted_at)
                      FROM tidings.attempts a
                      WHERE a.endpoint_id = h.endpoint_id
                        AND a.attempted_at > coalesce(h.last_success_at, '-infinity')),
                     h.last_failure_at)
    END
WHERE (h.failing_since IS NULL AND h.last_failure_at > coalesce(h.last_success_at, '-infinity'))
   OR (h.failing_since IS NOT NULL AND h.last_success_at >= h.failing_since);

-- name: disable_failing_endpoints
-- Disables the enabled endpoints that have been failing without a single success since
-- failing_before, and returns them.
UPDATE tidings.endpoints e
SET enabled = false,
    disabled_reason = %(reason)s,
    disabled_at = %(now)s,
    updated_at = now()
FROM tidings.endpoint_health h
WHERE h.endpoint_id = e.id
  AND e.enabled
  AND e.deleted_at IS NULL
  AND h.failing_since <= %(failing_before)s
  AND coalesce(h.last_success_at, '-infinity') < h.failing_since
RETURNING e.id, e.url, h.failing_since;

-- name: ensure_attempt_partitions
-- Creates the daily partitions of attempts for the coming days that do not exist yet.
SELECT tidings.ensure_attempt_partitions(%(from_day)s, %(days)s, %(lock_timeout_ms)s);

-- name: drop_oldest_attempt_partition
-- Drops the oldest daily partition of attempts that ends at or before cutoff; returns its name.
SELECT tidings.drop_oldest_attempt_partition(%(cutoff)s, %(lock_timeout_ms)s);

-- name: prune_default_attempts
-- Deletes up to batch_size attempts older than cutoff from the default partition (the rows that
-- arrived while no daily partition covered their day).
DELETE FROM tidings.attempts_default
WHERE ctid IN (
    SELECT ctid FROM tidings.attempts_default
    WHERE attempted_at < %(cutoff)s
    LIMIT %(batch_size)s
);

-- name: prune_delivered_messages
-- Deletes up to batch_size messages delivered before cutoff (skipping rows another session holds)
-- and the events left without any message; returns how many of each went.
WITH doomed AS (
    SELECT id
    FROM tidings.messages
    WHERE status = 'delivered' AND delivered_at < %(cutoff)s
    ORDER BY delivered_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM tidings.messages m
    USING doomed d
    WHERE m.id = d.id
    RETURNING m.id, m.event_ref
),
orphaned AS (
    DELETE FROM tidings.events ev
    WHERE ev.id IN (SELECT event_ref FROM gone)
      AND NOT EXISTS (SELECT 1 FROM tidings.messages other
                      WHERE other.event_ref = ev.id
                        AND other.id NOT IN (SELECT id FROM gone))
    RETURNING ev.id
)
SELECT (SELECT count(*) FROM gone) AS messages, (SELECT count(*) FROM orphaned) AS events;

-- name: prune_dead_letters
-- Deletes up to batch_size dead letters older than cutoff (skipping rows another session holds)
-- and the events left without any message; returns how many of each went.
WITH doomed AS (
    SELECT id
    FROM tidings.messages
    WHERE status = 'dead_letter' AND dead_lettered_at < %(cutoff)s
    ORDER BY dead_lettered_at
    LIMIT %(batch_size)s
    FOR UPDATE SKIP LOCKED
),
gone AS (
    DELETE FROM tidings.messages m
    USING doomed d
    WHERE m.id = d.id
    RETURNING m.id, m.event_ref
),
orphaned AS (
    DELETE FROM tidings.events ev
    WHERE ev.id IN (SELECT event_ref FROM gone)
      AND NOT EXISTS (SELECT 1 FROM tidings.messages other
                      WHERE other.event_ref = ev.id
                        AND other.id NOT IN (SELECT id FROM gone))
    RETURNING ev.id
)
SELECT (SELECT count(*) FROM gone) AS messages, (SELECT count(*) FROM orphaned) AS events;
