-- name: lock_percentiles_state
-- Takes (creating it on first use) and locks the percentiles job's state row for the transaction,
-- so overlapping runs of the job apply their histogram changes one after the other. The
-- transaction commits without waiting for its WAL flush: if a crash lost it, the state and the
-- histograms would be lost together and the next run would redo the same work.
WITH relaxed AS (
    SELECT set_config('synchronous_commit', 'off', true)
)
INSERT INTO tidings.job_state AS s (job) SELECT 'percentiles' FROM relaxed
ON CONFLICT (job) DO UPDATE SET updated_at = s.updated_at
RETURNING s.rolled_to, s.window_from, s.window_s, s.details;

-- name: reset_latency_window
-- Forgets the window histograms and the minute histograms before they are rebuilt from the
-- attempts (first run, or the window's length changed).
WITH minutes AS (
    DELETE FROM tidings.latency_buckets
),
coarse AS (
    DELETE FROM tidings.latency_window_coarse
)
DELETE FROM tidings.latency_window;

-- name: rebuild_latency_window
-- Rolls every attempt made in [reroll_from, now) up into per-minute log-scale histograms and
-- sums them into the window histograms (after reset_latency_window emptied them).
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
stored AS (
    -- In minute order, as the runs that follow add them: each later run's minutes that leave
    -- the window then sit on few pages.
    INSERT INTO tidings.latency_buckets (minute, endpoint_id, bucket, n)
    SELECT minute, endpoint_id, bucket, n FROM fresh ORDER BY minute, endpoint_id, bucket
),
fine AS (
    INSERT INTO tidings.latency_window (endpoint_id, bucket, n)
    SELECT endpoint_id, bucket, sum(n) FROM fresh GROUP BY endpoint_id, bucket
    RETURNING endpoint_id, bucket, n
)
INSERT INTO tidings.latency_window_coarse (endpoint_id, grp, n)
SELECT endpoint_id, (bucket + %(group_size)s) / %(group_size)s - 1, sum(n)
FROM fine
GROUP BY 1, 2;

-- name: advance_latency_window
-- Rolls the attempts made in [reroll_from, now) up into per-minute log-scale histograms
-- (re-reading the minutes already rolled, since attempts may commit late, and storing only the
-- counts that changed, so re-reading never double counts), then moves the window histograms
-- forward: adds what changed in the minutes from window_from on, and subtracts (and deletes) the
-- minutes before window_from, which left the window. Returns the window rows it emptied.
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
changed AS (
    SELECT f.endpoint_id, f.minute, f.bucket, f.n, f.n - coalesce(p.n, 0) AS delta
    FROM fresh f
    LEFT JOIN tidings.latency_buckets p
        ON p.minute = f.minute AND p.endpoint_id = f.endpoint_id AND p.bucket = f.bucket
           AND p.minute >= %(reroll_from)s
    WHERE f.n IS DISTINCT FROM p.n
),
stored AS (
    INSERT INTO tidings.latency_buckets AS b (minute, endpoint_id, bucket, n)
    SELECT minute, endpoint_id, bucket, n FROM changed
    ON CONFLICT (minute, endpoint_id, bucket) DO UPDATE SET n = excluded.n
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
),
moved_coarse AS (
    INSERT INTO tidings.latency_window_coarse AS c (endpoint_id, grp, n)
    SELECT endpoint_id, (bucket + %(group_size)s) / %(group_size)s - 1, sum(n)
    FROM net
    GROUP BY 1, 2
    ON CONFLICT (endpoint_id, grp) DO UPDATE SET n = c.n + excluded.n
    RETURNING c.endpoint_id, c.grp, c.n
)
SELECT 'fine' AS level, endpoint_id, bucket FROM moved WHERE n = 0
UNION ALL
SELECT 'coarse', endpoint_id, grp FROM moved_coarse WHERE n = 0;

-- name: delete_emptied_latency_window
-- Deletes the window buckets and groups that the last advance emptied (parallel arrays).
WITH fine AS (
    DELETE FROM tidings.latency_window w
    USING unnest(%(endpoint_ids)s::bigint[], %(buckets)s::smallint[]) AS e(endpoint_id, bucket)
    WHERE w.endpoint_id = e.endpoint_id AND w.bucket = e.bucket AND w.n = 0
)
DELETE FROM tidings.latency_window_coarse c
USING unnest(%(group_endpoint_ids)s::bigint[], %(groups)s::smallint[]) AS e(endpoint_id, grp)
WHERE c.endpoint_id = e.endpoint_id AND c.grp = e.grp AND c.n = 0;

-- name: analyze_latency_histograms
-- Refreshes the planner's statistics of the histograms after a rebuild filled them.
ANALYZE tidings.latency_buckets, tidings.latency_window, tidings.latency_window_coarse;

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
-- Computes p50/p95/p99 and the sample count of every endpoint from the window histograms and
-- writes them with the failure threshold that follows from p95. A percentile is the first bucket
-- whose cumulative count reaches q of the total: the group of buckets holding it is found from
-- cumulative group counts, then the bucket by a short scan inside that group. It is reported as
-- the bucket's error-balancing point. Endpoints without samples get NULL percentiles and the
-- normal threshold. Returns each endpoint's figures and its previous threshold.
WITH coarse AS (
    SELECT endpoint_id, grp, n,
           sum(n) OVER (PARTITION BY endpoint_id ORDER BY grp) AS cumulative,
           sum(n) OVER (PARTITION BY endpoint_id) AS total
    FROM tidings.latency_window_coarse
    WHERE n > 0
),
-- Per endpoint and percentile: {group, count before the group} of the first group whose
-- cumulative count reaches the rank (the smallest such array is the smallest group).
target AS (
    SELECT endpoint_id,
           max(total) AS total,
           min(ARRAY[grp, cumulative - n]) FILTER (WHERE cumulative * 100 >= total * 50) AS t50,
           min(ARRAY[grp, cumulative - n]) FILTER (WHERE cumulative * 100 >= total * 95) AS t95,
           min(ARRAY[grp, cumulative - n]) FILTER (WHERE cumulative * 100 >= total * 99) AS t99
    FROM coarse
    GROUP BY endpoint_id
),
located AS (
    SELECT t.endpoint_id, q.pct, t.total, f.bucket
    FROM target t
    CROSS JOIN LATERAL (VALUES (50, t.t50), (95, t.t95), (99, t.t99)) AS q(pct, found)
    CROSS JOIN LATERAL (
        SELECT w.bucket
        FROM (SELECT bucket, sum(n) OVER (ORDER BY bucket) AS running
              FROM tidings.latency_window
              WHERE endpoint_id = t.endpoint_id
                AND bucket >= q.found[1] * %(group_size)s
                AND bucket < (q.found[1] + 1) * %(group_size)s
                AND n > 0) w
        WHERE (q.found[2] + w.running) * 100 >= t.total * q.pct
        ORDER BY w.bucket
        LIMIT 1
    ) f
),
picked AS (
    SELECT endpoint_id,
           max(total)::integer AS samples,
           max(bucket) FILTER (WHERE pct = 50) AS b50,
           max(bucket) FILTER (WHERE pct = 95) AS b95,
           max(bucket) FILTER (WHERE pct = 99) AS b99
    FROM located
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

-- name: dead_letter_unreachable_messages
-- Dead-letters up to batch_size undelivered messages of deleted or disabled endpoints, with the
-- reason ("endpoint deleted", "endpoint disabled: 410 Gone"), so every message still ends
-- delivered or dead-lettered and can be replayed once its endpoint is enabled again. Catches
-- what a disabling path left behind: messages held back from a sender, and those a producer's
-- transaction committed after the endpoint was deleted. Rows a sender holds under a live lease
-- are left to it (the circuit gate holds them back at once).
UPDATE tidings.messages m
SET status = 'dead_letter', dead_lettered_at = now(), lease_token = NULL,
    last_error = CASE WHEN u.deleted_at IS NOT NULL THEN 'endpoint deleted'
                      ELSE 'endpoint disabled: ' || coalesce(u.disabled_reason, 'no reason given')
                 END
FROM (
    SELECT q.id, e.deleted_at, e.disabled_reason
    FROM tidings.endpoints e
    JOIN tidings.messages q ON q.endpoint_id = e.id
    WHERE (e.deleted_at IS NOT NULL OR NOT e.enabled)
      AND q.status IN ('pending', 'failed', 'in_flight')
      AND (q.status <> 'in_flight' OR q.next_attempt_at <= now())
    LIMIT %(batch_size)s
    FOR UPDATE OF q SKIP LOCKED
) u
WHERE m.id = u.id
RETURNING m.id;
