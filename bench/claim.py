"""Claim throughput through the data-access layer, against a bare UPDATE ... RETURNING baseline.

Part 1: lease and complete ``--rows`` queued rows (spread over ``--endpoints`` endpoints) with
``claim_due`` + ``record_outcomes`` in batches of ``--batch``; then the baseline, on a copy of
the same rows in a plain table of its own (``support.make_naive_tables``): a bare batch
``UPDATE ... WHERE id = ANY(...) RETURNING`` of the same batches, which neither chooses rows
fairly nor completes them.

Part 2: the claim time with ``--history`` delivered rows in the table against an empty history,
the median of ``--samples`` claims of 100 rows each.

The last line is JSON: claimed_per_s, baseline_per_s, ratio, and the history figures.
Run: ``python bench/claim.py`` (embedded PostgreSQL) or with ``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime

from support import Stopwatch, fresh_database, make_naive_tables, server_dsn

from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import AttemptOutcome, MessageStatus


def seed(db: Database, endpoints: int, rows: int) -> None:
    """``rows`` queued messages over ``endpoints`` endpoints, written straight to the message
    rows and the queue (what the enqueue functions write, without their routing)."""
    # Seeding statements may run longer than a statement timeout allows.
    with db.connection.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url)"
            " SELECT 'https://receiver.example/' || g FROM generate_series(1, %s) g",
            (endpoints,),
        )
        cur.execute(
            """
            WITH ev AS (
                INSERT INTO tidings.events (event_type, event_id, payload)
                SELECT 'bench.event', 'pending-' || g, jsonb_build_object('n', g)
                FROM generate_series(1, %(rows)s) g
                RETURNING id
            ),
            queued AS (
                INSERT INTO tidings.message_rows (event_ref, endpoint_id, event_type)
                SELECT ev.id, (SELECT min(id) FROM tidings.endpoints) + ev.id %% %(endpoints)s,
                       'bench.event'
                FROM ev
                RETURNING id, endpoint_id, next_attempt_at
            )
            INSERT INTO tidings.queue (message_id, endpoint_id, status, next_attempt_at)
            SELECT id, endpoint_id, 'pending', next_attempt_at FROM queued
            """,
            {"rows": rows, "endpoints": endpoints},
        )
    vacuum(db)


def vacuum(db: Database) -> None:
    with db.connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")


def claim_and_complete(db: Database, batch: int) -> tuple[int, float, int]:
    """Lease and finish every due row; returns rows, seconds and statements sent."""
    total = statements = 0
    with Stopwatch() as watch:
        while True:
            with db.cursor() as cur:
                rows = delivery.claim_due(cur, batch_size=batch, lease_s=300)
                statements += 1
                if not rows:
                    break
                now = datetime.now(UTC)
                delivery.record_outcomes(
                    cur,
                    [
                        AttemptOutcome(
                            r.lease, r.endpoint_id, MessageStatus.DELIVERED, 1, now, 200, 3
                        )
                        for r in rows
                    ],
                    base_cooldown_s=300,
                    max_cooldown_s=3600,
                )
                statements += 1
                total += len(rows)
    return total, watch.wall, statements


def bare_update(db: Database, batch: int) -> tuple[int, float]:
    with db.cursor() as cur:
        cur.execute("SELECT id FROM naive_messages WHERE status = 'pending' ORDER BY id")
        ids = [row[0] for row in cur.fetchall()]
    total = 0
    with Stopwatch() as watch, db.cursor() as cur:
        for start in range(0, len(ids), batch):
            cur.execute(
                "UPDATE naive_messages SET status = 'in_flight',"
                " lease_token = gen_random_uuid(), next_attempt_at = now() + interval '300 s'"
                " WHERE id = ANY(%s) RETURNING id",
                (ids[start : start + batch],),
            )
            total += len(cur.fetchall())
    return total, watch.wall


def copy_for_baseline(db: Database) -> None:
    """The baseline's own copy of the queued rows, with a lease column of its own."""
    with db.connection.cursor() as cur:
        make_naive_tables(cur)
        cur.execute("ALTER TABLE naive_messages ADD COLUMN lease_token uuid")
    vacuum(db)


def median_claim_ms(db: Database, samples: int) -> float:
    timings = []
    for _ in range(samples):
        with db.cursor() as cur:
            started = time.perf_counter()
            rows = delivery.claim_due(cur, batch_size=100, lease_s=300)
            timings.append((time.perf_counter() - started) * 1000)
            delivery.release_leases(cur, [r.lease for r in rows])
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--history", type=int, default=10_000_000)
    parser.add_argument("--samples", type=int, default=50)
    args = parser.parse_args()

    with server_dsn() as dsn:
        with fresh_database(dsn) as url:
            db = Database(url)
            seed(db, args.endpoints, args.rows)
            copy_for_baseline(db)
            claimed, claim_s, statements = claim_and_complete(db, args.batch)
            assert claimed == args.rows, f"claimed {claimed} of {args.rows}"
            baseline_rows, baseline_s = bare_update(db, args.batch)
            assert baseline_rows == args.rows
            db.close()
        claimed_per_s = claimed / claim_s
        baseline_per_s = baseline_rows / baseline_s
        print(
            f"claim+complete: {claimed} rows in {claim_s:.2f} s ({claimed_per_s:,.0f}/s,"
            f" {statements} statements); bare UPDATE: {baseline_rows} rows in"
            f" {baseline_s:.2f} s ({baseline_per_s:,.0f}/s)"
        )

        with fresh_database(dsn) as url:
            db = Database(url)
            seed(db, args.endpoints, 20_000)
            empty_ms = median_claim_ms(db, args.samples)
            started = time.perf_counter()
            seed_history(db, args.history)
            print(
                f"seeded {args.history:,} delivered rows in {time.perf_counter() - started:.0f} s"
            )
            history_ms = median_claim_ms(db, args.samples)
            db.close()
        print(
            f"claim of 100 rows: {empty_ms:.2f} ms empty history, {history_ms:.2f} ms with history"
        )

    print(
        json.dumps(
            {
                "rows": claimed,
                "batch": args.batch,
                "claimed_per_s": round(claimed_per_s),
                "baseline_per_s": round(baseline_per_s),
                "ratio": round(claimed_per_s / baseline_per_s, 3),
                "history_rows": args.history,
                "claim_ms_empty_history": round(empty_ms, 3),
                "claim_ms_with_history": round(history_ms, 3),
                "history_ratio": round(history_ms / empty_ms, 3),
            }
        )
    )


def seed_history(db: Database, rows: int) -> None:
    """Delivered rows (message rows alone: a delivered message has no queue row), in chunks so
    that no single statement holds too much in memory."""
    chunk = 1_000_000
    with db.connection.cursor() as cur:
        cur.execute("SELECT min(id), count(*) FROM tidings.endpoints")
        first_endpoint, endpoints = cur.fetchone()
        for start in range(0, rows, chunk):
            cur.execute(
                """
                WITH ev AS (
                    INSERT INTO tidings.events (event_type, event_id, payload)
                    SELECT 'bench.history', 'h-' || g, jsonb_build_object('n', g)
                    FROM generate_series(%(start)s + 1, %(stop)s) g
                    RETURNING id
                )
                INSERT INTO tidings.message_rows (event_ref, endpoint_id, event_type, status,
                                                  attempts, delivered_at, created_at)
                SELECT ev.id, %(first)s + ev.id %% %(endpoints)s, 'bench.history', 'delivered', 1,
                       now() - interval '1 day', now() - interval '1 day'
                FROM ev
                """,
                {
                    "start": start,
                    "stop": min(rows, start + chunk),
                    "first": first_endpoint,
                    "endpoints": endpoints,
                },
            )
    vacuum(db)


if __name__ == "__main__":
    main()
