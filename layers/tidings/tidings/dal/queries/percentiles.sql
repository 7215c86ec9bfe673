-- name: lock_percentiles_state
-- Takes (creating it on first use) and locks the percentiles job's state row for the transaction,
-- so overlapping runs of the job apply their histogram changes one after the other. The
-- transaction commits without waiting for its WAL flush: if a crash lost it, the state and the
-- histograms would be lost together and the next run would redo the same work. Its statements
-- are not JIT-compiled: the estimates of their per-endpoint look-ups run high, and compiling
-- would take far longer than the few index reads they do.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true), set_config('jit', 'off', true)
)
INSERT INTO tidings.job_state AS s (job) SELECT 'percentiles' FROM relaxed
ON CONFLICT (job) DO UPDATE SET updated_at = s.updated_at
RETURNING s.rolled_to, s.window_from, s.window_s, s.details;

-- name: reset_latency_window
-- Forgets the window histogram and the minute histograms before they are built anew from the
-- attempts (first run, or the window's length or the histograms' layout changed).
WITH minutes AS (
    DELETE FROM tidings.latency_buckets
)
DELETE FROM tidings.latency_window;

-- name: advance_latency_window
-- Rolls the attempts recorded in [reroll_from, now) (the tallies' latencies) up into per-minute
-- log-scale histograms
-- (re-reading the minutes already rolled, since attempts may commit late, and storing only the
-- counts that changed, so re-reading never double counts), then moves the window histogram
-- forward: adds what changed in the minutes from window_from on, and subtracts (and deletes) the
-- minutes before window_from, which left the window. Returns each window bucket's change and
-- whether the change emptied it. The minute histograms take plain inserts and updates, cheaper
-- than upserts: runs take turns under the percentiles state lock, so the counts read stay true
-- until they are written.
WITH fresh AS (
    SELECT u.endpoint_id,
           date_trunc('minute', t.recorded_at) AS minute,
           CASE WHEN u.response_ms <= 0 THEN -1
                ELSE floor(ln(u.response_ms::double precision) / ln(%(growth)s))
           END::smallint AS bucket,
           count(*)::integer AS n
    FROM tidings.attempt_tallies t
    CROSS JOIN LATERAL unnest(t.endpoint_ids, t.response_ms) AS u (endpoint_id, response_ms)
    WHERE t.recorded_at >= %(reroll_from)s
      AND t.recorded_at < %(now)s
      AND u.response_ms IS NOT NULL
    GROUP BY 1, 2, 3
),
changed AS (
    SELECT f.endpoint_id, f.minute, f.bucket, f.n, p.n AS stored_n,
           f.n - coalesce(p.n, 0) AS delta
    FROM fresh f
    LEFT JOIN tidings.latency_buckets p
        ON p.minute = f.minute AND p.endpoint_id = f.endpoint_id AND p.bucket = f.bucket
           AND p.minute >= %(reroll_from)s
    WHERE f.n IS DISTINCT FROM p.n
),
stored_new AS (
    INSERT INTO tidings.latency_buckets (minute, endpoint_id, bucket, n)
    SELECT minute, endpoint_id, bucket, n FROM changed WHERE stored_n IS NULL
),
stored_changed AS (
    UPDATE tidings.latency_buckets b
    SET n = c.n
    FROM changed c
    WHERE c.stored_n IS NOT NULL
      AND b.minute = c.minute AND b.endpoint_id = c.endpoint_id AND b.bucket = c.bucket
),
-- The table holds only the window's minutes, so what is older than its new start is what leaves.
leaving AS (
    DELETE FROM tidings.latency_buckets
    WHERE minute < %(window_from)s
    RETURNING endpoint_id, bucket, n
),
change AS (
    SELECT endpoint_id, bucket, delta AS n
    FROM changed
    WHERE minute >= %(window_from)s
    UNION ALL
    SELECT endpoint_id, bucket, -n FROM leaving
),
net AS (
    SELECT endpoint_id, bucket, sum(n)::integer AS n
    FROM change
    GROUP BY endpoint_id, bucket
    HAVING sum(n) <> 0
),
moved AS (
    INSERT INTO tidings.latency_window AS w (endpoint_id, bucket, n)
    SELECT endpoint_id, bucket, n FROM net
    ON CONFLICT (endpoint_id, bucket) DO UPDATE SET n = w.n + excluded.n
    RETURNING w.endpoint_id, w.bucket, w.n
)
SELECT net.endpoint_id, net.bucket, net.n AS change, moved.n = 0 AS emptied
FROM net
JOIN moved USING (endpoint_id, bucket);

-- name: roll_up_attempt_minutes
-- Counts, per endpoint and minute, the attempts recorded in [reroll_from, now) whose answer was a
-- success and those whose was not (re-reading the minutes already rolled, as the histograms do,
-- and writing only counts that changed), and forgets the minutes before keep_from: what the
-- endpoints' hourly charts read for the last day.
WITH fresh AS (
    SELECT u.endpoint_id, date_trunc('minute', t.recorded_at) AS minute,
           count(*) FILTER (WHERE u.delivered)::integer AS delivered,
           count(*) FILTER (WHERE NOT u.delivered)::integer AS failed
    FROM tidings.attempt_tallies t
    CROSS JOIN LATERAL unnest(t.endpoint_ids, t.delivered) AS u (endpoint_id, delivered)
    WHERE t.recorded_at >= %(reroll_from)s
      AND t.recorded_at < %(now)s
    GROUP BY 1, 2
),
stored AS (
    INSERT INTO tidings.attempt_minutes AS m (endpoint_id, minute, delivered, failed)
    SELECT f.endpoint_id, f.minute, f.delivered, f.failed FROM fresh f
    ON CONFLICT (endpoint_id, minute) DO UPDATE
    SET delivered = excluded.delivered, failed = excluded.failed
    WHERE (m.delivered, m.failed) IS DISTINCT FROM (excluded.delivered, excluded.failed)
)
DELETE FROM tidings.attempt_minutes m WHERE m.minute < %(keep_from)s;

-- name: delete_emptied_latency_window
-- Deletes the window buckets that the last advance emptied (parallel arrays).
DELETE FROM tidings.latency_window w
USING unnest(%(endpoint_ids)s::bigint[], %(buckets)s::smallint[]) AS e(endpoint_id, bucket)
WHERE w.endpoint_id = e.endpoint_id AND w.bucket = e.bucket AND w.n = 0;

-- name: analyze_latency_histograms
-- Refreshes the planner's statistics of the histograms after a build filled them (through a
-- function of the owner's: only a table's owner may analyze it).
SELECT tidings.analyze_latency_histograms();

-- name: allow_large_rollup
-- Gives this transaction more memory for sorts and hashes and more time, for the roll-up of a
-- whole window.
SELECT set_config('work_mem', %(work_mem)s, true),
       set_config('statement_timeout', %(statement_timeout_ms)s, true);

-- name: save_percentiles_state
-- Records how far the percentiles job rolled up, which window its histograms hold, and their
-- layout (bucket growth and group size: histograms of another layout must be rebuilt).
UPDATE tidings.job_state
SET rolled_to = %(rolled_to)s, window_from = %(window_from)s, window_s = %(window_s)s,
    details = %(layout)s, updated_at = now()
WHERE job = 'percentiles';

-- name: lock_endpoint_health
-- Locks every endpoint's health row in endpoint order, the order the senders lock them in, so
-- that the percentiles update that follows cannot deadlock with them.
SELECT endpoint_id FROM tidings.endpoint_health ORDER BY endpoint_id FOR UPDATE;

-- name: update_endpoint_percentiles
-- Computes p50/p95/p99 and the sample count of every endpoint from the window histogram and
-- writes them with the failure threshold that follows from p95. A percentile is the first bucket
-- whose cumulative count reaches q of the total. Each endpoint keeps, per percentile, the bucket
-- that held it with the counts before and in that bucket. The window's changes since (parallel
-- arrays) are applied to those counts; where the percentile then lies outside its bucket, it
-- steps to the next non-empty bucket up or down, one index read a step, until it is back inside.
-- Positions not yet placed (new endpoints, or all after a rebuild) are placed by one pass over
-- the endpoint's histogram. A percentile is reported as its bucket's error-balancing point.
-- Endpoints without samples get NULL percentiles and the normal threshold. Returns each
-- endpoint's figures and its previous threshold.
WITH RECURSIVE change AS (
    SELECT c.endpoint_id, c.bucket, c.n
    FROM unnest(%(change_endpoint_ids)s::bigint[], %(change_buckets)s::smallint[],
                %(change_counts)s::integer[]) AS c(endpoint_id, bucket, n)
),
kept AS (
    SELECT h.endpoint_id, h.failure_threshold AS previous_threshold,
           h.percentile_buckets IS NOT NULL AND NOT %(rebuilt)s AS placed,
           h.sample_count AS total,
           h.percentile_buckets AS buckets,
           h.percentile_below AS below,
           h.percentile_at AS at
    FROM tidings.endpoint_health h
),
-- Per placed endpoint, what changed in all, and before and in each percentile's bucket.
applied AS (
    SELECT k.endpoint_id,
           sum(c.n) AS total,
           ARRAY[coalesce(sum(c.n) FILTER (WHERE c.bucket < k.buckets[1]), 0),
                 coalesce(sum(c.n) FILTER (WHERE c.bucket < k.buckets[2]), 0),
                 coalesce(sum(c.n) FILTER (WHERE c.bucket < k.buckets[3]), 0)] AS below,
           ARRAY[coalesce(sum(c.n) FILTER (WHERE c.bucket = k.buckets[1]), 0),
                 coalesce(sum(c.n) FILTER (WHERE c.bucket = k.buckets[2]), 0),
                 coalesce(sum(c.n) FILTER (WHERE c.bucket = k.buckets[3]), 0)] AS at
    FROM kept k
    JOIN change c USING (endpoint_id)
    WHERE k.placed
    GROUP BY k.endpoint_id, k.buckets
),
-- Placed positions with the changes applied; the others placed from the whole histogram (an
-- endpoint without samples sits before every bucket).
current AS (
    SELECT k.endpoint_id, k.previous_threshold, q.i, q.pct,
           CASE WHEN k.placed THEN k.total + coalesce(a.total, 0)
                ELSE coalesce(s.total, 0) END AS total,
           CASE WHEN k.placed THEN k.buckets[q.i] ELSE coalesce(f.bucket, -32768) END AS bucket,
           CASE WHEN k.placed THEN k.below[q.i] + coalesce(a.below[q.i], 0)
                ELSE coalesce(f.below, 0) END AS below,
           CASE WHEN k.placed THEN k.at[q.i] + coalesce(a.at[q.i], 0)
                ELSE coalesce(f.at, 0) END AS at
    FROM kept k
    CROSS JOIN (VALUES (1, 50), (2, 95), (3, 99)) AS q(i, pct)
    LEFT JOIN applied a USING (endpoint_id)
    LEFT JOIN LATERAL (
        SELECT sum(w.n) AS total
        FROM tidings.latency_window w
        WHERE w.endpoint_id = k.endpoint_id AND NOT k.placed
    ) s ON true
    LEFT JOIN LATERAL (
        SELECT w.bucket, w.running - w.n AS below, w.n AS at
        FROM (SELECT bucket, n, sum(n) OVER (ORDER BY bucket) AS running
              FROM tidings.latency_window
              WHERE endpoint_id = k.endpoint_id AND NOT k.placed) w
        WHERE w.running * 100 >= s.total * q.pct
        ORDER BY w.bucket
        LIMIT 1
    ) f ON true
),
-- Fewer than q of the samples up to the bucket: a step up; at least q before it: a step down.
walk AS (
    SELECT endpoint_id, previous_threshold, i, pct, total, bucket, below, at, 0 AS steps
    FROM current
    UNION ALL
    SELECT w.endpoint_id, w.previous_threshold, w.i, w.pct, w.total, s.bucket,
           CASE WHEN s.bucket > w.bucket THEN w.below + w.at ELSE w.below - s.n END,
           s.n, w.steps + 1
    FROM walk w
    CROSS JOIN LATERAL (
        (SELECT b.bucket, b.n
         FROM tidings.latency_window b
         WHERE b.endpoint_id = w.endpoint_id AND b.bucket > w.bucket
           AND (w.below + w.at) * 100 < w.total * w.pct
         ORDER BY b.bucket
         LIMIT 1)
        UNION ALL
        (SELECT b.bucket, b.n
         FROM tidings.latency_window b
         WHERE b.endpoint_id = w.endpoint_id AND b.bucket < w.bucket
           AND w.total > 0 AND w.below * 100 >= w.total * w.pct
         ORDER BY b.bucket DESC
         LIMIT 1)
    ) s
),
settled AS (
    SELECT DISTINCT ON (endpoint_id, i) *
    FROM walk
    ORDER BY endpoint_id, i, steps DESC
),
figures AS (
    SELECT s.endpoint_id,
           max(s.previous_threshold) AS previous_threshold,
           max(s.total)::integer AS samples,
           array_agg(s.bucket ORDER BY s.i)::smallint[] AS buckets,
           array_agg(s.below ORDER BY s.i)::integer[] AS below,
           array_agg(s.at ORDER BY s.i)::integer[] AS at,
           max(s.bucket) FILTER (WHERE s.i = 1 AND s.total > 0) AS b50,
           max(s.bucket) FILTER (WHERE s.i = 2 AND s.total > 0) AS b95,
           max(s.bucket) FILTER (WHERE s.i = 3 AND s.total > 0) AS b99
    FROM settled s
    GROUP BY s.endpoint_id
),
valued AS (
    SELECT f.*,
           CASE WHEN f.b50 < 0 THEN 0
                ELSE 2 * power(%(growth)s, f.b50 + 1) / (1 + %(growth)s) END AS p50,
           CASE WHEN f.b95 < 0 THEN 0
                ELSE 2 * power(%(growth)s, f.b95 + 1) / (1 + %(growth)s) END AS p95,
           CASE WHEN f.b99 < 0 THEN 0
                ELSE 2 * power(%(growth)s, f.b99 + 1) / (1 + %(growth)s) END AS p99
    FROM figures f
)
UPDATE tidings.endpoint_health h
SET p50_ms = v.p50,
    p95_ms = v.p95,
    p99_ms = v.p99,
    sample_count = v.samples,
    percentile_buckets = v.buckets,
    percentile_below = v.below,
    percentile_at = v.at,
    percentiles_at = %(now)s,
    failure_threshold = CASE WHEN v.p95 > %(slow_p95_ms)s THEN %(slow_threshold)s
                             ELSE %(normal_threshold)s END
FROM valued v
WHERE h.endpoint_id = v.endpoint_id
RETURNING h.endpoint_id, h.p50_ms, h.p95_ms, h.p99_ms, h.sample_count, h.failure_threshold,
          v.previous_threshold;
