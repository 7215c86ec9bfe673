"""Ingest throughput through the API handler, against bare multi-row INSERTs of the same rows.

``--events`` events (default 50,000), each fanned out to ``--fanout`` subscribed endpoints, go
through the ingest handler as API Gateway events for ``POST /v1/events/batch`` with
``--batch`` events each (validation, idempotency, fan-out, one transaction per batch). The
baseline, in a second fresh database of the same server in the same run, writes the same rows
(events, then their messages) with two bare multi-row INSERTs per batch in one transaction:
no idempotency, no validation, no HTTP. Then all events are sent through the handler again,
which must create nothing.

The last line is JSON: ingest_per_s, baseline_per_s, ratio, resend_created_rows, and details.
Run: ``python bench/ingest.py`` (embedded PostgreSQL) or with ``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import psycopg2.extras
from support import Stopwatch, fresh_database, server_dsn

from tidings import wiring
from tidings.api.app import handle
from tidings.config import Settings
from tidings.dal.connection import Database

EVENT_TYPES = ("order.created", "order.paid", "user.signed_up", "invoice.sent")


def make_endpoints(db: Database, fanout: int) -> None:
    """``fanout`` endpoints subscribed to every type, and a few that subscribe elsewhere."""
    with db.cursor() as cur:
        for n in range(fanout + 3):
            cur.execute(
                "INSERT INTO tidings.endpoints (url) VALUES (%s) RETURNING id",
                (f"https://receiver.example/{n}",),
            )
            row = cur.fetchone()
            assert row is not None
            event_type = "*" if n < fanout else "unrelated.type"
            cur.execute(
                "INSERT INTO tidings.subscriptions (endpoint_id, event_type) VALUES (%s, %s)",
                (row[0], event_type),
            )


def make_events(count: int) -> list[dict[str, Any]]:
    return [
        {
            "event_type": EVENT_TYPES[i % len(EVENT_TYPES)],
            "event_id": f"evt-{i:08d}",
            "payload": {"id": i, "amount_cents": 1999 + i, "currency": "EUR", "note": "x" * 40},
        }
        for i in range(count)
    ]


def api_event(batch: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "resource": "/v1/events/batch",
        "path": "/v1/events/batch",
        "httpMethod": "POST",
        "headers": {"Content-Type": "application/json"},
        "multiValueHeaders": {"Content-Type": ["application/json"]},
        "queryStringParameters": None,
        "multiValueQueryStringParameters": None,
        "pathParameters": None,
        "requestContext": {
            "resourcePath": "/v1/events/batch",
            "httpMethod": "POST",
            # What API Gateway's token authorizer passes on for a producer token.
            "authorizer": {"principalId": "token-1", "scope": "producer", "token_id": "1"},
        },
        "body": json.dumps({"events": batch}),
        "isBase64Encoded": False,
    }


def through_handler(batches: list[list[dict[str, Any]]]) -> list[int]:
    statuses = []
    for batch in batches:
        response = handle(api_event(batch), None)  # type: ignore[arg-type]
        statuses.append(int(response["statusCode"]))
    return statuses


def bare_inserts(
    db: Database, batches: list[list[dict[str, Any]]], endpoint_ids: list[int]
) -> None:
    for batch in batches:
        with db.transaction() as cur:
            events = psycopg2.extras.execute_values(
                cur,
                "INSERT INTO tidings.events (event_type, event_id, payload) VALUES %s RETURNING id",
                [(e["event_type"], e["event_id"], json.dumps(e["payload"])) for e in batch],
                page_size=len(batch),
                fetch=True,
            )
            psycopg2.extras.execute_values(
                cur,
                "INSERT INTO tidings.messages (event_ref, endpoint_id, event_type) VALUES %s",
                [
                    (ref, endpoint, e["event_type"])
                    for (ref,), e in zip(events, batch, strict=True)
                    for endpoint in endpoint_ids
                ],
                page_size=len(batch) * len(endpoint_ids),
            )


def row_count(db: Database) -> int:
    with db.cursor() as cur:
        cur.execute(
            "SELECT (SELECT count(*) FROM tidings.events) + (SELECT count(*) FROM tidings.messages)"
        )
        row = cur.fetchone()
        assert row is not None
        return int(row[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--fanout", type=int, default=2)
    args = parser.parse_args()

    events = make_events(args.events)
    batches = [events[i : i + args.batch] for i in range(0, len(events), args.batch)]
    with server_dsn() as dsn, fresh_database(dsn) as api_url, fresh_database(dsn) as base_url:
        api_db = Database(api_url)
        base_db = Database(base_url)
        make_endpoints(api_db, args.fanout)
        make_endpoints(base_db, args.fanout)
        with base_db.cursor() as cur:
            cur.execute(
                "SELECT endpoint_id FROM tidings.subscriptions WHERE event_type = '*'"
                " ORDER BY endpoint_id"
            )
            fanout_ids = [int(r[0]) for r in cur.fetchall()]

        settings = Settings(database_url=api_url)
        with wiring.overridden(settings=settings, database_factory=lambda: Database(api_url)):
            with Stopwatch() as ingest:
                statuses = through_handler(batches)
            if set(statuses) != {202}:
                raise SystemExit(f"unexpected statuses from the handler: {sorted(set(statuses))}")
            rows_after_first = row_count(api_db)
            with Stopwatch() as resend:
                again = through_handler(batches)
            if set(again) != {200}:
                raise SystemExit(f"unexpected statuses on resend: {sorted(set(again))}")
            resend_created = row_count(api_db) - rows_after_first

        with Stopwatch() as baseline:
            bare_inserts(base_db, batches, fanout_ids)
        if row_count(base_db) != rows_after_first:
            raise SystemExit("the baseline wrote a different number of rows")
        api_db.close()
        base_db.close()

    ingest_per_s = args.events / ingest.wall
    baseline_per_s = args.events / baseline.wall
    print(
        f"handler: {args.events} events ({rows_after_first} rows) in {ingest.wall:.2f} s "
        f"(CPU {ingest.cpu:.2f} s); baseline {baseline.wall:.2f} s; resend {resend.wall:.2f} s"
    )
    print(
        json.dumps(
            {
                "ingest_per_s": round(ingest_per_s),
                "baseline_per_s": round(baseline_per_s),
                "ratio": round(ingest_per_s / baseline_per_s, 3),
                "resend_created_rows": resend_created,
                "resend_per_s": round(args.events / resend.wall),
                "events": args.events,
                "batch": args.batch,
                "fanout": args.fanout,
            }
        )
    )


if __name__ == "__main__":
    main()
