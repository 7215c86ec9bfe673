"""The database at the size of a large deployment: 100,000 endpoints, 50 of them with due work,
and 10 million logged attempts.

Measures, in one run and on the same server:
- the claim among 100 endpoints and among 100,000 (50 busy in both, 600 due rows each): the
  median of ``--claims`` claims of 100 rows in each database, each claimed batch then marked
  delivered, as senders would; ``claim_ratio`` is the second over the first (the claim's cost
  should follow the work, not the endpoint count). Both databases live side by side and their
  claims alternate, after a checkpoint, so that whatever else the server and the machine do
  (the large seed's background writes, autovacuum) weighs on both alike, and two runs agree;
  ``claim_spread`` is each side's interquartile range over its median;
- one run of each scheduled job on the large database, as its schedule runs it: the percentiles
  (its first runs, 5 minutes apart, which build the histograms from a day of attempts a slice at
  a time: how many runs that takes and the longest of them; then the next run, which every
  later run is like), the health monitor, the dead-letter report and the pruner (and how many
  delivered messages it pruned: those of the day past the retention).

The large database holds, besides the busy endpoints' due rows: 1,000,000 delivered messages over
the last 8 days (a day's worth past the 7-day retention) with the tallies of their deliveries,
20,000 dead letters over the last two days (half of them reported), and 10,000,000 attempts
over the last 48 hours spread over every endpoint (tallied a hundred to a row; the 2 % that
failed in the attempt log too), a hundred endpoints failing for six days.

The last line is JSON. Run: ``python bench/scale.py`` (embedded PostgreSQL) or with
``DATABASE_URL`` set; seeding takes several minutes.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
from support import fresh_database, server_dsn

from tidings.config import Settings
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.local.notifier import MemoryNotifier
from tidings.maintenance.dead_letter_report import run_report
from tidings.maintenance.health_monitor import run_monitor
from tidings.maintenance.percentiles import run_scheduled_refresh
from tidings.maintenance.pruning import prune

BUSY_ENDPOINTS = 50
DUE_ROWS = 600
CLAIM_BATCH = 100


def add_endpoints(db: Database, count: int) -> list[int]:
    """``count`` endpoints; the busy ones spread over the id range, each with its due rows."""
    with db.connection.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url)"
            " SELECT 'https://receiver.example/' || g FROM generate_series(1, %s) g",
            (count,),
        )
        cur.execute("SELECT id FROM tidings.endpoints ORDER BY id")
        ids = [row[0] for row in cur.fetchall()]
        busy = ids[:: max(1, len(ids) // BUSY_ENDPOINTS)][:BUSY_ENDPOINTS]
        cur.execute(
            """
            WITH ev AS (
                INSERT INTO tidings.events (event_type, event_id, payload)
                SELECT 'bench.due', 'due-' || e || '-' || g, jsonb_build_object('n', g)
                FROM unnest(%(busy)s::bigint[]) e, generate_series(1, %(rows)s) g
                RETURNING id, split_part(event_id, '-', 2)::bigint AS endpoint_id
            )
            INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)
            SELECT id, endpoint_id, 'bench.due' FROM ev
            """,
            {"busy": busy, "rows": DUE_ROWS},
        )
    return busy


def add_history(db: Database, attempts: int, delivered: int, dead_letters: int) -> None:
    """Delivered messages and dead letters with their events, and the attempts' record, written
    where the delivery path writes them: every attempt in a tally (a hundred to a row, as a
    sender's record of a busy part would write them), failures in the attempt log too."""
    with db.connection.cursor() as cur:
        # As the pruner makes them (owned by the schema's owner, whose functions prune them).
        cur.execute("SELECT tidings.ensure_attempt_partitions(current_date - 9, 13, 60000)")
        cur.execute(
            """
            WITH ev AS (
                INSERT INTO tidings.events (event_type, event_id, payload, created_at)
                SELECT 'bench.old', 'old-' || g, jsonb_build_object('n', g),
                       now() - (g::double precision / %(n)s) * interval '8 days'
                FROM generate_series(1, %(n)s) g
                RETURNING id, created_at
            ),
            done AS (
                INSERT INTO tidings.message_rows (event_ref, endpoint_id, event_type, status,
                                                  attempts, created_at, delivered_at,
                                                  last_attempted_at, last_status_code,
                                                  last_response_ms)
                SELECT ev.id, 1 + ev.id %% e.n, 'bench.old', 'delivered', 1, ev.created_at,
                       ev.created_at + interval '1 second', ev.created_at + interval '1 second',
                       200, 40
                FROM ev, (SELECT count(*) AS n FROM tidings.endpoints) e
                RETURNING id, endpoint_id, delivered_at
            )
            INSERT INTO tidings.attempt_tallies (recorded_at, endpoint_ids, message_ids,
                                                 response_ms, delivered)
            SELECT max(delivered_at), array_agg(endpoint_id ORDER BY id),
                   array_agg(id ORDER BY id), array_agg(40 ORDER BY id),
                   array_agg(true ORDER BY id)
            FROM done
            GROUP BY id / 100
            """,
            {"n": delivered},
        )
        cur.execute(
            """
            WITH ev AS (
                INSERT INTO tidings.events (event_type, event_id, payload, created_at)
                SELECT 'bench.dead', 'dead-' || g, jsonb_build_object('n', g),
                       now() - (g::double precision / %(n)s) * interval '2 days'
                FROM generate_series(1, %(n)s) g
                RETURNING id, created_at
            )
            INSERT INTO tidings.message_rows (event_ref, endpoint_id, event_type, status,
                                              attempts, created_at, dead_lettered_at,
                                              dead_letter_reported_at, last_error,
                                              last_status_code)
            SELECT ev.id, 1 + (ev.id * 7919) %% 1000, 'bench.dead', 'dead_letter', 5,
                   ev.created_at, ev.created_at + interval '1 hour',
                   CASE WHEN ev.id %% 2 = 0 THEN now() END, 'http_503', 503
            FROM ev
            """,
            {"n": dead_letters},
        )
        # In time order, as senders record them, a million at a time; 2 % failures; the last
        # 100 endpoints only fail. Their messages are long gone (ids past every message's).
        chunk = 1_000_000
        for start in range(0, attempts, chunk):
            cur.execute(
                """
                WITH attempt AS MATERIALIZED (
                    SELECT g, 1 + g %% c.n AS endpoint_id,
                           now() - interval '48 hours' + (g::double precision / %(n)s)
                               * interval '48 hours' AS at,
                           g %% 50 = 0 OR g %% c.n >= c.n - 100 AS failing,
                           (20 + random() * 400)::integer AS ms
                    FROM (SELECT count(*) AS n FROM tidings.endpoints) c
                    CROSS JOIN generate_series(%(start)s + 1, %(stop)s) g
                ),
                logged AS (
                    INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number,
                                                     attempted_at, status_code, response_ms,
                                                     error_class)
                    SELECT 1000000000 + g, endpoint_id, 1, at, 503, ms, 'http_503'
                    FROM attempt WHERE failing
                )
                INSERT INTO tidings.attempt_tallies (recorded_at, endpoint_ids, message_ids,
                                                     response_ms, delivered)
                SELECT max(at), array_agg(endpoint_id ORDER BY g),
                       array_agg(1000000000 + g ORDER BY g), array_agg(ms ORDER BY g),
                       array_agg(NOT failing ORDER BY g)
                FROM attempt
                GROUP BY g / 100
                """,
                {"n": attempts, "start": start, "stop": min(attempts, start + chunk)},
            )
        cur.execute(
            "UPDATE tidings.endpoint_health"
            " SET last_failure_at = now(), last_success_at = now() - interval '6 days'"
            " WHERE endpoint_id > (SELECT max(id) - 100 FROM tidings.endpoints)"
        )
        cur.execute("VACUUM ANALYZE")


def claim_ms(db: Database) -> float:
    """One claim of a batch, in milliseconds; the batch is then marked delivered."""
    started = time.perf_counter()
    rows = db.run(
        lambda cur: delivery.claim_due(cur, batch_size=CLAIM_BATCH, lease_s=180, probe_lease_s=120)
    )
    elapsed_ms = (time.perf_counter() - started) * 1000
    if not rows:
        raise RuntimeError("the claim found nothing due: too few due rows for the claims")
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'delivered', delivered_at = now(),"
            " attempts = 1, lease_token = NULL WHERE id = ANY (%s)",
            ([r.message_id for r in rows],),
        )
    return elapsed_ms


def alternating_claims(small: Database, large: Database, claims: int) -> tuple[list[float], ...]:
    """``claims`` claims in each database, taking turns (after three of each to warm up)."""
    for db in (small, large):
        with db.connection.cursor() as cur:
            cur.execute("VACUUM ANALYZE")
    checkpoint(large)
    timings: tuple[list[float], list[float]] = ([], [])
    for turn in range(claims + 3):
        for side, db in enumerate((small, large)):
            elapsed_ms = claim_ms(db)
            if turn >= 3:
                timings[side].append(elapsed_ms)
    return timings


def checkpoint(db: Database) -> None:
    """Write out what the seed left in memory, where the role may (a superuser's, or one with
    pg_checkpoint); elsewhere the alternation alone spreads the server's background writes."""
    try:
        with db.connection.cursor() as cur:
            cur.execute("CHECKPOINT")
    except psycopg2.Error:
        db.connection.rollback()


def spread(timings: list[float]) -> float:
    """The interquartile range over the median."""
    quartiles = statistics.quantiles(timings, n=4)
    return round((quartiles[2] - quartiles[0]) / statistics.median(timings), 2)


def timed(work: Callable[[], Any]) -> float:
    started = time.perf_counter()
    work()
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--endpoints", type=int, default=100_000)
    parser.add_argument("--attempts", type=int, default=10_000_000)
    parser.add_argument("--delivered", type=int, default=1_000_000)
    parser.add_argument("--dead-letters", type=int, default=20_000)
    parser.add_argument(
        "--claims",
        type=int,
        default=200,
        help=f"claims in each database (at most {BUSY_ENDPOINTS * DUE_ROWS // CLAIM_BATCH - 3})",
    )
    args = parser.parse_args()
    settings = Settings()
    result: dict[str, Any] = {"endpoints": args.endpoints, "attempts": args.attempts}
    with server_dsn() as dsn, fresh_database(dsn) as small_url, fresh_database(dsn) as url:
        small = Database(small_url)
        add_endpoints(small, 100)
        db = Database(url)
        started = time.perf_counter()
        add_endpoints(db, args.endpoints)
        add_history(db, args.attempts, args.delivered, args.dead_letters)
        result["seed_s"] = round(time.perf_counter() - started, 1)
        timings_100, timings_100k = alternating_claims(small, db, args.claims)
        small.close()
        result["claims"] = args.claims
        result["claim_ms_100"] = round(statistics.median(timings_100), 2)
        result["claim_ms_100k"] = round(statistics.median(timings_100k), 2)
        result["claim_spread"] = {"100": spread(timings_100), "100k": spread(timings_100k)}
        now = datetime.now(UTC)
        build_runs: list[float] = []
        while True:
            started = time.perf_counter()
            run = run_scheduled_refresh(db, settings, now)
            build_runs.append(time.perf_counter() - started)
            now += timedelta(minutes=5)
            if not run["building"]:
                break
        result["percentiles_build_runs"] = len(build_runs)
        result["percentiles_build_longest_run_s"] = round(max(build_runs), 2)
        result["percentiles_s"] = timed(lambda: run_scheduled_refresh(db, settings, now))
        notifier = MemoryNotifier()
        result["health_monitor_s"] = timed(lambda: run_monitor(db, notifier, settings))
        result["dead_letter_report_s"] = timed(lambda: run_report(db, notifier, settings))
        started = time.perf_counter()
        pruned = prune(db, settings)
        result["pruner_s"] = round(time.perf_counter() - started, 2)
        result["pruned_delivered"] = pruned.delivered_deleted
        db.close()
    result["claim_ratio"] = round(result["claim_ms_100k"] / result["claim_ms_100"], 2)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
