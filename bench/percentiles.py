"""Refreshing every endpoint's latency percentiles, against one exact query per endpoint.

Seeds ``--attempts`` attempts (log-normal latencies) spread over ``--endpoints`` endpoints and the
last 24 hours (in tallies, as senders record them, and one to a row in a plain table of the
baseline's own), builds the histograms once, then times the refresh a 5-minute schedule runs: the
attempts of the last 5 minutes rolled up and every endpoint's p50/p95/p99 rewritten (median of
``--runs`` runs after ``--warmup`` untimed ones, the histograms vacuumed after the build). The
baseline, in the same run and on the same data, loops over the endpoints with one exact
``percentile_cont`` query each. Also checks every refreshed figure against the exact
``percentile_disc`` of the same window and reports the largest relative error seen.

The last line is JSON: refresh_s, baseline_s, speedup, initial_build_s, max_relative_error.
Run: ``python bench/percentiles.py`` (embedded PostgreSQL) or with ``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime, timedelta
from functools import partial

from support import fresh_database, make_naive_tables, server_dsn

from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.maintenance.percentiles import MAX_RELATIVE_ERROR, floor_minute, refresh_percentiles

SCHEDULE = timedelta(minutes=5)


def seed_attempts(db: Database, count: int, start: datetime, end: datetime) -> None:
    """``count`` attempts spread evenly over the endpoints and over [start, end), recorded as
    senders record them (a hundred to a tally, in time order, each tally's attempts at its
    moment) and, for the exact queries, logged one to a row in the baseline's plain table."""
    with db.connection.cursor() as cur:
        cur.execute(
            """
            CREATE TEMPORARY TABLE IF NOT EXISTS fresh_attempts (
                n bigint, endpoint_id bigint, at timestamptz, response_ms integer
            )
            """
        )
        cur.execute("TRUNCATE fresh_attempts")
        cur.execute(
            """
            INSERT INTO fresh_attempts
            SELECT g, e.first_id + g %% e.endpoints,
                   %(start)s + ((g - 1) / 100 * 100)::double precision / %(count)s
                       * (%(end)s::timestamptz - %(start)s),
                   -- Log-normal: each endpoint has its own median, 20 ms to 3 s.
                   round(exp(ln(20 + (g %% e.endpoints) * 3)
                             + 0.8 * sqrt(-2 * ln(1 - random()))
                                   * cos(2 * pi() * random())))::integer
            FROM generate_series(1, %(count)s) g
            CROSS JOIN (SELECT min(id) AS first_id, count(*) AS endpoints
                        FROM tidings.endpoints) e
            """,
            {"count": count, "start": start, "end": end},
        )
        cur.execute(
            """
            INSERT INTO tidings.attempt_tallies (recorded_at, endpoint_ids, message_ids,
                                                 response_ms, delivered)
            SELECT min(at), array_agg(endpoint_id ORDER BY n), array_agg(n ORDER BY n),
                   array_agg(response_ms ORDER BY n), array_agg(true ORDER BY n)
            FROM fresh_attempts
            GROUP BY (n - 1) / 100
            """
        )
        cur.execute(
            "INSERT INTO naive_attempts (message_id, endpoint_id, attempt_number, attempted_at,"
            " status_code, response_ms)"
            " SELECT n, endpoint_id, 1, at, 200, response_ms FROM fresh_attempts"
        )
        cur.execute("VACUUM ANALYZE tidings.attempt_tallies")
        cur.execute("VACUUM ANALYZE naive_attempts")


def baseline(db: Database, now: datetime, window_from: datetime) -> dict[int, float]:
    """One exact percentile query per endpoint, as a loop over endpoints would do."""
    figures: dict[int, float] = {}
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.endpoints ORDER BY id")
        for (endpoint_id,) in cur.fetchall():
            cur.execute(
                "SELECT percentile_cont(ARRAY[0.5, 0.95, 0.99])"
                " WITHIN GROUP (ORDER BY response_ms), count(*)"
                " FROM naive_attempts"
                " WHERE endpoint_id = %s AND attempted_at >= %s AND attempted_at < %s"
                " AND response_ms IS NOT NULL",
                (endpoint_id, window_from, now),
            )
            row = cur.fetchone()
            assert row is not None and row[0] is not None
            figures[endpoint_id] = row[0][1]
    return figures


def worst_relative_error(db: Database, now: datetime, window_from: datetime) -> float:
    with db.cursor() as cur:
        cur.execute(
            """
            WITH exact AS (
                SELECT endpoint_id,
                       percentile_disc(ARRAY[0.5, 0.95, 0.99])
                           WITHIN GROUP (ORDER BY response_ms) AS p
                FROM naive_attempts
                WHERE attempted_at >= %s AND attempted_at < %s AND response_ms IS NOT NULL
                GROUP BY endpoint_id
            )
            SELECT max(greatest(abs(h.p50_ms - e.p[1]) / nullif(e.p[1], 0),
                                abs(h.p95_ms - e.p[2]) / nullif(e.p[2], 0),
                                abs(h.p99_ms - e.p[3]) / nullif(e.p[3], 0)))
            FROM exact e JOIN tidings.endpoint_health h USING (endpoint_id)
            """,
            (window_from, now),
        )
        row = cur.fetchone()
        assert row is not None
        return float(row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--attempts", type=int, default=1_000_000)
    parser.add_argument("--endpoints", type=int, default=1_000)
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    settings = Settings()
    now = floor_minute(datetime.now(UTC))
    window = timedelta(seconds=settings.latency_window_s)
    per_schedule = round(args.attempts * SCHEDULE / window)

    with server_dsn() as dsn, fresh_database(dsn) as url:
        db = Database(url, statement_timeout_ms=600_000)
        with db.cursor() as cur:
            cur.execute(
                "INSERT INTO tidings.endpoints (url)"
                " SELECT 'https://receiver.example/' || g FROM generate_series(1, %s) g",
                (args.endpoints,),
            )
            cur.execute("SELECT tidings.ensure_attempt_partitions(current_date - 2, 5, 60000)")
            make_naive_tables(cur)
        # The day before the first timed run, then each run's 5 minutes of new attempts.
        seed_attempts(db, args.attempts, now - window, now)
        started = time.perf_counter()
        db.run(lambda cur: refresh_percentiles(cur, settings, now), transaction=True)
        initial_build_s = time.perf_counter() - started
        # Steady state, as hours after a rebuild: autovacuum has been through the freshly
        # filled histograms (here at once, so it does not run during the timed refreshes).
        with db.connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE tidings.latency_buckets, tidings.latency_window")

        timings = []
        for run in range(args.warmup + args.runs):
            seed_attempts(db, per_schedule, now, now + SCHEDULE)
            now += SCHEDULE
            started = time.perf_counter()
            db.run(partial(refresh_percentiles, settings=settings, now=now), transaction=True)
            if run >= args.warmup:
                timings.append(time.perf_counter() - started)
        refresh_s = statistics.median(timings)

        window_from = floor_minute(now - window)
        error = worst_relative_error(db, now, window_from)
        started = time.perf_counter()
        exact = baseline(db, now, window_from)
        baseline_s = time.perf_counter() - started
        assert len(exact) == args.endpoints
        db.close()

    print(
        f"{args.attempts} attempts over {args.endpoints} endpoints; "
        f"initial build {initial_build_s:.3f} s; refresh (median of {args.runs}, "
        f"{per_schedule} new attempts each) {refresh_s:.3f} s; "
        f"per-endpoint exact loop {baseline_s:.3f} s; "
        f"largest relative error {error:.4f} (bound {MAX_RELATIVE_ERROR:.4f})"
    )
    print(
        json.dumps(
            {
                "refresh_s": round(refresh_s, 4),
                "baseline_s": round(baseline_s, 4),
                "speedup": round(baseline_s / refresh_s, 1),
                "initial_build_s": round(initial_build_s, 4),
                "max_relative_error": round(error, 5),
                "error_bound": round(MAX_RELATIVE_ERROR, 5),
                "attempts": args.attempts,
                "endpoints": args.endpoints,
            }
        )
    )


if __name__ == "__main__":
    main()
