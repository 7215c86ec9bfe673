"""The database's cost per delivery of the delivery path's statements, against a naive loop's.

Tidings: ``--events`` messages (over ``--endpoints`` endpoints, each with a signing secret, as
``bench/e2e.py`` seeds them) go through the statements a deployment runs for them, on one
connection with nothing else running: the claimer's ``claim_due`` (``--batch`` rows), the
sender's ``begin_attempts`` for the rows claimed, a sender batch at a time (ten fast-lane
messages' deliveries: 100 by default), and ``record_outcomes`` a part of ``--part``
rows at a time (the sender's ``sender_record_rows``: the answers one record statement writes),
every outcome a delivery. Baseline, on a fresh copy of the same rows in a plain table of its
own: the naive worker of ``bench/e2e.py`` without its requests (select 50 pending rows ``FOR
UPDATE SKIP LOCKED``, mark each delivered by an ``UPDATE`` of its own, commit).

Per delivery, for each statement and in all: the server's CPU (the connection's backend process,
read from /proc, so only with the server on this machine) and the write-ahead log it wrote.
``--wal-detail`` adds where Tidings' log went, by record kind and by relation (the
``pg_walinspect`` extension, PostgreSQL 15 and later; the embedded server lacks it: set
``DATABASE_URL``). No HTTP, no concurrency: what is left is the statements' own cost, which
``bench/e2e.py`` measures with everything else around it.

The last line is JSON: the figures, ``cpu_ratio`` (baseline CPU over Tidings') and ``wal_ratio``
(the same for the log): above 1 where Tidings costs the database less than the naive loop, which
records no attempt, no health and no lease. Then the circuit's share, per record call carrying
one success summary and no outcome: ``health_refresh_call_pg_cpu_ms``, a summary whose last
success is seconds after the one known (the record writes the health row: an endpoint's first
success, then about one a second while it takes traffic), against its baseline in the same run,
``health_unchanged_call_pg_cpu_ms``, one whose last success is known to the second (nothing to
write). And what a begin call of a hundred rows costs by itself (rows no lease holds: it finds
none and writes nothing), the server's CPU and this process's, as the sender makes it
(``begin_call_pg_cpu_ms``, ``begin_call_client_cpu_ms``: each array one literal) against the
same statement with psycopg2's own arrays (``begin_call_constructors_*``: ``ARRAY[...]`` of an
expression per element) in the same run.
Run: ``python bench/statements.py`` (embedded PostgreSQL) or with ``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
from e2e import seed
from support import ServerCpu, fresh_database, process_cpu_s, server_dsn

from tidings.config import Settings
from tidings.dal import delivery
from tidings.dal.connection import Cursor, Database
from tidings.dal.delivery import AttemptOutcome, AttemptRequest, CircuitSummary, MessageStatus
from tidings.dal.queries import sql
from tidings.deployment import FAST_LANE

NAIVE_BATCH = 50
UNREACHABLE = "http://127.0.0.1:9/"  # nothing is sent: the rows only need an endpoint URL


@dataclass
class Meter:
    """The server CPU and write-ahead log of the statements run through it, by name."""

    db: Database
    url: str
    cpu_s: dict[str, float] = field(default_factory=dict)
    client_cpu_s: dict[str, float] = field(default_factory=dict)
    wal_bytes: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.pid = self.db.connection.get_backend_pid()
        # The backend's pid names a process here only when the server runs here.
        self.local = ServerCpu.of(self.url).available

    def run(self, name: str, work: Callable[[Cursor], Any], *, transaction: bool = False) -> Any:
        before_wal = self.wal_position()
        before_cpu = self._cpu_s()
        before_client_cpu = time.process_time()
        result = self.db.run(work, transaction=transaction)
        self.client_cpu_s[name] = (
            self.client_cpu_s.get(name, 0.0) + time.process_time() - before_client_cpu
        )
        self.cpu_s[name] = self.cpu_s.get(name, 0.0) + self._cpu_s() - before_cpu
        self.wal_bytes[name] = self.wal_bytes.get(name, 0) + self._wal_since(before_wal)
        return result

    def _cpu_s(self) -> float:
        return (process_cpu_s(self.pid) or 0.0) if self.local else 0.0

    def wal_position(self) -> str:
        with self.db.cursor() as cur:
            cur.execute("SELECT pg_current_wal_lsn()::text")
            return str(cur.fetchone()[0])

    def _wal_since(self, position: str) -> int:
        with self.db.cursor() as cur:
            cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (position,))
            return int(cur.fetchone()[0])


def run_tidings(meter: Meter, settings: Settings, batch: int, part: int) -> int:
    """Claim, begin and record every message; returns how many were delivered."""
    done = 0
    while True:
        # As the claimer leases: long enough for the time in the queue too.
        claimed = meter.run(
            "claim",
            lambda cur: delivery.claim_due(
                cur,
                batch_size=batch,
                lease_s=settings.lease_s + settings.lease_queue_allowance_s,
                probe_lease_s=settings.lease_s,
            ),
        )
        if not claimed:
            return done
        # A sender batch: the fast lane's messages of one invocation, their deliveries begun by
        # one call and recorded a part at a time.
        per_batch = FAST_LANE.batch_size * settings.deliveries_per_message
        for first_row in range(0, len(claimed), per_batch):
            requests = [
                AttemptRequest(delivery.Lease(row.message_id, row.lease_token), row.attempts + 1)
                for row in claimed[first_row : first_row + per_batch]
            ]
            started = meter.run(
                "begin",
                lambda cur, requests=requests: delivery.begin_attempts(
                    cur, requests, lease_s=settings.lease_s
                ),
            )
            for first in range(0, len(started), part):
                done += record_part(meter, settings, started[first : first + part])


def record_part(meter: Meter, settings: Settings, rows: list[delivery.StartedAttempt]) -> int:
    now = datetime.now(UTC)
    outcomes = [
        AttemptOutcome(
            delivery.Lease(row.message_id, row.lease_token),  # type: ignore[arg-type]
            row.endpoint_id,
            MessageStatus.DELIVERED,
            row.attempts + 1,
            now,
            200,
            response_ms=1,
        )
        for row in rows
        if row.permitted
    ]
    summaries = [
        CircuitSummary(endpoint_id, True, 0, now, None)
        for endpoint_id in sorted({row.endpoint_id for row in rows})
    ]
    recorded = meter.run(
        "record",
        lambda cur: delivery.record_outcomes(
            cur,
            outcomes,
            summaries,
            base_cooldown_s=settings.circuit_cooldown_s,
            max_cooldown_s=settings.circuit_max_cooldown_s,
        ),
    )
    if len(recorded.written_ids) != len(rows):
        raise RuntimeError(f"recorded {len(recorded.written_ids)} of {len(rows)} outcomes")
    return len(rows)


HEALTH_CALLS = 400
DELIVERY_STATEMENTS = ("claim", "begin", "record")


def run_health_calls(meter: Meter, settings: Settings) -> None:
    """Record calls that carry only a success summary, ``HEALTH_CALLS`` of each kind,
    alternating: ``refresh``, whose last success is seconds after the one known (an endpoint's
    first success, then one a second while it takes traffic: the health row is written), and
    ``unchanged``, whose last success is already known to the second (nothing is written)."""
    with meter.db.cursor() as cur:
        cur.execute("SELECT endpoint_id FROM tidings.endpoint_health ORDER BY endpoint_id")
        endpoints = [row[0] for row in cur.fetchall()]
    latest = datetime.now(UTC)
    for call in range(HEALTH_CALLS):
        endpoint_id = endpoints[call % len(endpoints)]
        latest += timedelta(seconds=2)
        for name, at in (("refresh", latest), ("unchanged", latest)):
            meter.run(
                name,
                lambda cur, endpoint_id=endpoint_id, at=at: delivery.record_outcomes(
                    cur,
                    [],
                    [CircuitSummary(endpoint_id, True, 0, at, None)],
                    base_cooldown_s=settings.circuit_cooldown_s,
                    max_cooldown_s=settings.circuit_max_cooldown_s,
                ),
            )


BEGIN_CALLS = 300
BEGIN_CALL_ROWS = 100
# Passed to both kinds of begin call, so that they differ in the arrays' form alone.
BEGIN_CALL_HOLD_BACK_S = 1.0


def run_begin_calls(meter: Meter, settings: Settings) -> None:
    """Begin calls of ``BEGIN_CALL_ROWS`` rows that no lease holds (the begin finds none and
    writes nothing: what is left is the call itself), ``BEGIN_CALLS`` of each kind,
    alternating: ``begin_call``, as the sender makes it (each array one literal,
    ``tidings.dal.arrays``), and its baseline ``begin_call_constructors``, the same statement
    with the arrays as psycopg2 adapts a list (an ``ARRAY[...]`` of one expression per
    element)."""
    requests = [
        AttemptRequest(delivery.Lease(2**62 + row, uuid.uuid4()), 1, want_payload=False)
        for row in range(BEGIN_CALL_ROWS)
    ]
    constructors = {
        "ids": [r.lease.message_id for r in requests],
        "tokens": [r.lease.token for r in requests],
        "attempts": [r.attempt for r in requests],
        "want_payload": [r.want_payload for r in requests],
        "lease_s": settings.lease_s,
        "hold_back_s": BEGIN_CALL_HOLD_BACK_S,
    }
    for _ in range(BEGIN_CALLS):
        meter.run(
            "begin_call",
            lambda cur: delivery.begin_attempts(
                cur, requests, lease_s=settings.lease_s, hold_back_s=BEGIN_CALL_HOLD_BACK_S
            ),
        )
        meter.run(
            "begin_call_constructors",
            lambda cur: cur.execute(sql("begin_attempts"), constructors),
        )


def run_after_deliveries(meter: Meter, settings: Settings) -> None:
    run_health_calls(meter, settings)
    run_begin_calls(meter, settings)


def run_naive(meter: Meter) -> int:
    def one_batch(cur: Cursor) -> int:
        cur.execute(
            "SELECT m.id FROM naive_messages m WHERE m.status = 'pending'"
            " ORDER BY m.id LIMIT %s FOR UPDATE OF m SKIP LOCKED",
            (NAIVE_BATCH,),
        )
        ids = [row[0] for row in cur.fetchall()]
        for message_id in ids:
            cur.execute(
                "UPDATE naive_messages SET status = 'delivered', attempts = attempts + 1,"
                " delivered_at = now() WHERE id = %s",
                (message_id,),
            )
        return len(ids)

    done = 0
    while taken := meter.run("naive", one_batch, transaction=True):
        done += taken
    return done


def wal_detail(db: Database, start: str, end: str, deliveries: int) -> dict[str, Any]:
    """Where the log between two positions went: bytes per delivery by record kind and by
    relation (the ten largest of each)."""
    with db.connection.cursor() as cur:
        cur.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        cur.execute(
            'SELECT "resource_manager/record_type", combined_size'
            " FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn, true)"
            " WHERE count > 0 ORDER BY combined_size DESC LIMIT 10",
            (start, end),
        )
        by_kind = {kind: round(int(size) / deliveries) for kind, size in cur.fetchall()}
        cur.execute(
            "SELECT coalesce(c.relname, 'other'), sum(r.record_length)"
            " FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn) r"
            " LEFT JOIN pg_class c ON c.relfilenode::text ="
            "   substring(r.block_ref from 'rel \\d+/\\d+/(\\d+)')"
            " GROUP BY 1 ORDER BY 2 DESC LIMIT 10",
            (start, end),
        )
        by_relation = {name: round(int(size) / deliveries) for name, size in cur.fetchall()}
    return {"wal_by_kind": by_kind, "wal_by_relation": by_relation}


def can_inspect_wal(dsn: str) -> bool:
    """Whether the server has pg_walinspect to offer (PostgreSQL 15 or later, contrib built)."""
    with closing(psycopg2.connect(dsn)) as conn, conn.cursor() as cur:
        cur.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_walinspect'")
        return cur.fetchone() is not None


def measure(
    dsn: str,
    events: int,
    endpoints: int,
    run: Callable[[Meter], int],
    *,
    detail: bool,
    naive: bool,
    after: Callable[[Meter], None] | None = None,
) -> tuple[Meter, int, dict[str, Any]]:
    with fresh_database(dsn) as url:
        seed(url, endpoints, events, UNREACHABLE, naive=naive)
        db = Database(url)
        meter = Meter(db, url)
        start = meter.wal_position()
        done = run(meter)
        end = meter.wal_position()
        if done != events:
            raise RuntimeError(f"{done} of {events} delivered")
        found = wal_detail(db, start, end, done) if detail else {}
        if after is not None:
            after(meter)
        db.close()
    return meter, done, found


def main() -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000)
    parser.add_argument("--endpoints", type=int, default=4)
    parser.add_argument("--batch", type=int, default=settings.claim_batch_size)
    parser.add_argument("--part", type=int, default=settings.sender_record_rows)
    parser.add_argument("--wal-detail", action="store_true")
    args = parser.parse_args()

    with server_dsn() as dsn:
        if args.wal_detail and not can_inspect_wal(dsn):
            print(
                "--wal-detail needs the pg_walinspect extension, which this server lacks"
                " (PostgreSQL 15 or later with its contrib modules; the embedded server has"
                " none): set DATABASE_URL to such a server",
                file=sys.stderr,
            )
            raise SystemExit(2)
        naive, naive_done, _ = measure(
            dsn, args.events, args.endpoints, run_naive, detail=False, naive=True
        )
        tidings, done, detail = measure(
            dsn,
            args.events,
            args.endpoints,
            lambda meter: run_tidings(meter, settings, args.batch, args.part),
            after=lambda meter: run_after_deliveries(meter, settings),
            detail=args.wal_detail,
            naive=False,
        )
    result: dict[str, Any] = {
        "events": args.events,
        "batch": args.batch,
        "part": args.part,
        "server_on_this_machine": tidings.local,
    }

    def cpu_ms(seconds: float, deliveries: int) -> float | None:
        return round(seconds * 1000 / deliveries, 4) if tidings.local else None

    for name in DELIVERY_STATEMENTS:
        result[f"{name}_pg_cpu_ms"] = cpu_ms(tidings.cpu_s[name], done)
        result[f"{name}_wal_bytes"] = round(tidings.wal_bytes[name] / done)
    pg_cpu_ms = cpu_ms(sum(tidings.cpu_s[name] for name in DELIVERY_STATEMENTS), done)
    baseline_cpu_ms = cpu_ms(naive.cpu_s["naive"], naive_done)
    wal_bytes = sum(tidings.wal_bytes[name] for name in DELIVERY_STATEMENTS) / done
    baseline_wal_bytes = naive.wal_bytes["naive"] / naive_done
    result |= {
        "pg_cpu_ms": pg_cpu_ms,
        "wal_bytes": round(wal_bytes),
        "baseline_pg_cpu_ms": baseline_cpu_ms,
        "baseline_wal_bytes": round(baseline_wal_bytes),
        "cpu_ratio": round(baseline_cpu_ms / pg_cpu_ms, 2)
        if pg_cpu_ms and baseline_cpu_ms
        else None,
        "wal_ratio": round(baseline_wal_bytes / wal_bytes, 2),
        # Per record call carrying one success summary (no outcome): one that moves a healthy
        # circuit's last success on, and, its baseline, one whose last success is known.
        "health_refresh_call_pg_cpu_ms": cpu_ms(tidings.cpu_s["refresh"], HEALTH_CALLS),
        "health_unchanged_call_pg_cpu_ms": cpu_ms(tidings.cpu_s["unchanged"], HEALTH_CALLS),
        # Per begin call of a hundred rows it does not hold, as the sender makes it and, its
        # baseline, with psycopg2's ARRAY[...] for each array: the server's CPU and this
        # process's (building the parameters, sending, reading the answer).
        "begin_call_pg_cpu_ms": cpu_ms(tidings.cpu_s["begin_call"], BEGIN_CALLS),
        "begin_call_constructors_pg_cpu_ms": cpu_ms(
            tidings.cpu_s["begin_call_constructors"], BEGIN_CALLS
        ),
        "begin_call_client_cpu_ms": round(
            tidings.client_cpu_s["begin_call"] * 1000 / BEGIN_CALLS, 3
        ),
        "begin_call_constructors_client_cpu_ms": round(
            tidings.client_cpu_s["begin_call_constructors"] * 1000 / BEGIN_CALLS, 3
        ),
        **detail,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
