"""Performance isolation: a healthy endpoint's delivery rate beside slow neighbours, against its
rate alone, measured side by side in one run through the dev runtime.

Cases (each on a fresh database, with a fresh runtime and fresh receivers):
- ``alone``: the healthy endpoint only (a receiver answering 200 at once): the baseline;
- ``one_2s``: beside one endpoint answering 200 after 2 s;
- ``ten_2s``: beside ten such endpoints;
- ``one_14s``: beside one endpoint answering 200 after 14 s, just under the 15 s HTTP timeout;
- ``one_never``: beside one endpoint that accepts the connection and never answers (the sender's
  own HTTP timeout cuts each request).

The healthy endpoint gets ``--events`` events, and so does every neighbour: all of them in one
transaction, the endpoints' events interleaved (healthy, neighbour 1, neighbour 2, ..., healthy,
...), as a real mix would arrive. The clock (the database's) starts when the claimer first
takes a row of the mix, seen by polling every 10 ms once the transaction has committed, and stops
at the healthy endpoint's last ``delivered_at``; the healthy rate is ``events / that time``. The
wait before that first claim is left out because an idle claimer looks again only every
``claim_idle_poll_s`` (1 s): a wait anywhere from 0 to 1 s, whatever the neighbours, on a
baseline of about 2 s. It is printed (``claim_wait_s``), and so is the rate counted from the
commit (``healthy_per_s_from_enqueue``). A case that runs past ``--timeout`` stops there and
reports the rate so far (``finished: false``). ``ratio`` is the case's healthy rate over the
``alone`` rate of the same run.

The runtime is the one ``tidings dev`` runs, in its own process: ``dev_settings`` and
``RuntimeConfig`` with their defaults (sender environments, batch sizes, concurrency, the 15 s
HTTP timeout, the retry schedule and circuit breaker, the scheduled functions); only the API is
off and the drain on shutdown is skipped. The receivers run in another process, so that their
work does not contend for the runtime's GIL.

Lambda cost: every sender invocation is timed (the handler's wall time, rounded up to the
millisecond as Lambda bills it) with the message ids of its records. ``healthy_sender_ms`` is
the billed time of the invocations that carried at least one healthy message, per healthy
delivery: what a healthy endpoint's deliveries cost when slow neighbours share their batches.
``cost_ratio`` is that over the ``alone`` figure; ``healthy_usd_per_million`` prices it (arm64
duration at the sender's memory, plus requests; SQS and the claimer left out).

One JSON line per case, then a summary line with every ratio, ``min_ratio`` and
``max_cost_ratio``. Run: ``python bench/isolation.py`` (embedded PostgreSQL) or with
``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import queue
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support import fresh_database, give_secret, server_dsn

from tidings.dal.connection import Database
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.delivery.envelope import MalformedEnvelope, envelopes_of
from tidings.deployment import SENDER
from tidings.local import runtime as runtime_module
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import DevRuntime, RuntimeConfig, dev_settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# Published us-east-1 list prices (as bench/sender.py): arm64 duration and requests.
LAMBDA_ARM_GB_S_USD = 0.0000133334
LAMBDA_REQUEST_USD = 0.20 / 1_000_000
# What each kind of neighbour's receiver does: answer 200 after a delay, or never answer.
NEIGHBOURS = {"2s": 2.0, "14s": 14.0, "never": None}
# case -> (neighbour kind, how many such neighbours)
CASES: dict[str, tuple[str | None, int]] = {
    "alone": (None, 0),
    "one_2s": ("2s", 1),
    "ten_2s": ("2s", 10),
    "one_14s": ("14s", 1),
    "one_never": ("never", 1),
}
POLL_S = 0.2


# ---------------------------------------------------------------- receivers (their own process)


def serve_receivers(urls_out: Any, stop: Any) -> None:
    """The healthy receiver and one of each neighbour kind, until ``stop`` is set."""
    servers: dict[str, tuple[Receivers, Kind]] = {
        "healthy": (Receivers((Kind.HEALTHY,)), Kind.HEALTHY)
    }
    for name, delay_s in NEIGHBOURS.items():
        if delay_s is None:
            # Accepts, reads the request, holds the connection without a byte of answer.
            servers[name] = (Receivers((Kind.SILENT,)), Kind.SILENT)
        else:
            servers[name] = (Receivers((Kind.HEALTHY,), latency_s=delay_s), Kind.HEALTHY)
    for receivers, _ in servers.values():
        receivers.start()
    urls_out.put({name: receivers.url(kind) for name, (receivers, kind) in servers.items()})
    stop.wait()
    for receivers, _ in servers.values():
        receivers.stop()


# ---------------------------------------------------------------- the runtime (its own process)


@dataclass
class Ledger:
    """Every sender invocation: its billed milliseconds and the message ids of its records."""

    invocations: list[tuple[int, list[int]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def timed(self, handler: Any) -> Any:
        """``handler``, timing every invocation that carries SQS records (a sender's)."""

        def invoke(event: Any, context: Any) -> Any:
            records = event.get("Records") if isinstance(event, dict) else None
            if not isinstance(records, list):
                return handler(event, context)
            ids = [message_id for record in records for message_id in _message_ids(record)]
            started = time.perf_counter()
            try:
                return handler(event, context)
            finally:
                billed_ms = math.ceil((time.perf_counter() - started) * 1000)
                with self.lock:
                    self.invocations.append((billed_ms, ids))

        return invoke


def _message_ids(record: Any) -> list[int]:
    """The rows a record carries (a fast lane's message carries several)."""
    try:
        return [envelope.message_id for envelope in envelopes_of(record["body"])]
    except (KeyError, TypeError, MalformedEnvelope):
        return []


def runtime_process(url: str, senders: int | None, ready: Any, stop: Any, ledger_out: Any) -> None:
    """A dev runtime with its defaults until ``stop`` is set; then its sender ledger."""
    from tidings.observability import logger

    logger.setLevel("WARNING")
    # The handlers print their EMF metrics, as on Lambda; keep them off the result. Log lines
    # (warnings and worse) go to standard error.
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    os.dup2(2, 1)
    ledger = Ledger()
    load_handler = runtime_module.load_handler

    def timed_load(name: str, functions_dir: Path | None = None, *, environment: int = 0) -> Any:
        return ledger.timed(load_handler(name, functions_dir, environment=environment))

    # Every handler the runtime loads is wrapped; only those invoked with SQS records are timed.
    runtime_module.load_handler = timed_load
    options: dict[str, Any] = {} if senders is None else {"sender_environments": senders}
    runtime = DevRuntime(
        dev_settings(database_url=url),
        RuntimeConfig(
            data_dir=Path(tempfile.mkdtemp(prefix="tidings-bench-")),
            serve_api=False,
            alerts_stream=None,
            # What is still queued at the end belongs to the slow neighbours: not worth waiting
            # for. Batches in flight still finish (within the HTTP timeout).
            drain_timeout_s=0.0,
            **options,
        ),
    )
    runtime.start()
    ready.set()
    stop.wait()
    runtime.stop()
    with ledger.lock:
        ledger_out.put(list(ledger.invocations))


# ---------------------------------------------------------------- one case


def seed_endpoints(url: str, targets: list[str]) -> list[int]:
    """One endpoint per target URL, subscribed to ``iso.<n>``, signing with SECRET."""
    db = Database(url)
    ids = []
    with db.cursor() as cur:
        for n, target in enumerate(targets):
            cur.execute(
                "INSERT INTO tidings.endpoints (url) VALUES (%s) RETURNING id",
                (f"{target}?endpoint={n}",),
            )
            endpoint_id = int(cur.fetchone()[0])
            give_secret(cur, [endpoint_id], SECRET)
            cur.execute(
                "INSERT INTO tidings.subscriptions (endpoint_id, event_type) VALUES (%s, %s)",
                (endpoint_id, f"iso.{n}"),
            )
            ids.append(endpoint_id)
    db.close()
    return ids


def enqueue_mix(db: Database, endpoints: int, events: int) -> float:
    """``events`` events per endpoint, interleaved, in one transaction; the database's clock
    (epoch seconds) once it has committed."""
    mix = [
        DemoEvent(f"iso.{n}", f"e-{n}-{i}", {"n": i, "pad": "x" * 200})
        for i in range(events)
        for n in range(endpoints)
    ]
    with db.transaction() as cur:
        for start in range(0, len(mix), 1000):
            enqueue_events(cur, mix[start : start + 1000])
    with db.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        return float(cur.fetchone()[0])


def progress(db: Database, healthy_id: int) -> tuple[int, float | None, int]:
    """Healthy rows delivered, the last one's ``delivered_at`` (epoch s), others delivered."""
    with db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FILTER (WHERE endpoint_id = %(h)s AND status = 'delivered'),"
            " extract(epoch FROM max(delivered_at) FILTER (WHERE endpoint_id = %(h)s))::float8,"
            " count(*) FILTER (WHERE endpoint_id <> %(h)s AND status = 'delivered')"
            " FROM tidings.messages",
            {"h": healthy_id},
        )
        done, last, others = cur.fetchone()
        return int(done), None if last is None else float(last), int(others)


def first_claim(db: Database, deadline: float) -> float | None:
    """When the claimer first took a row of the mix (epoch s, as seen every 10 ms), or None
    if it took none before ``deadline``."""
    while time.monotonic() < deadline:
        with db.cursor() as cur:
            cur.execute(
                "SELECT extract(epoch FROM clock_timestamp())::float8 WHERE EXISTS"
                " (SELECT 1 FROM tidings.messages WHERE status <> 'pending')"
            )
            row = cur.fetchone()
        if row is not None:
            return float(row[0])
        time.sleep(0.01)
    return None


def healthy_ids(db: Database, healthy_id: int) -> set[int]:
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages WHERE endpoint_id = %s", (healthy_id,))
        return {int(row[0]) for row in cur.fetchall()}


def db_now(db: Database) -> float:
    with db.cursor() as cur:
        cur.execute("SELECT extract(epoch FROM clock_timestamp())::float8")
        return float(cur.fetchone()[0])


def run_case(
    dsn: str, name: str, events: int, senders: int | None, timeout_s: float
) -> dict[str, Any]:
    neighbour, count = CASES[name]
    context = multiprocessing.get_context("fork")
    urls_out = context.Queue()
    receivers_stop = context.Event()
    receivers = context.Process(target=serve_receivers, args=(urls_out, receivers_stop))
    receivers.start()
    try:
        urls = urls_out.get(timeout=30)
        with fresh_database(dsn) as url:
            targets = [urls["healthy"], *([urls[neighbour]] * count if neighbour else [])]
            endpoint_ids = seed_endpoints(url, targets)
            healthy_id = endpoint_ids[0]
            figures = measure(
                url,
                healthy_id,
                endpoints=len(targets),
                events=events,
                senders=senders,
                timeout_s=timeout_s,
            )
    finally:
        receivers_stop.set()
        receivers.join(30)
        if receivers.is_alive():
            receivers.kill()
    return {"case": name, "neighbours": count, "neighbour": neighbour, **figures}


def measure(
    url: str,
    healthy_id: int,
    *,
    endpoints: int,
    events: int,
    senders: int | None,
    timeout_s: float,
) -> dict[str, Any]:
    """Run one runtime on ``url``'s endpoints (the healthy one first), enqueue the mix, wait for
    the healthy endpoint's last delivery (or the timeout); its figures."""
    context = multiprocessing.get_context("fork")
    ready, stop, ledger_out = context.Event(), context.Event(), context.Queue()
    runtime = context.Process(target=runtime_process, args=(url, senders, ready, stop, ledger_out))
    runtime.start()
    db = Database(url)
    try:
        if not ready.wait(120):
            raise RuntimeError("the runtime did not start within 120 s")
        committed = enqueue_mix(db, endpoints, events)
        deadline = time.monotonic() + timeout_s
        started = first_claim(db, deadline) or committed
        while True:
            done, last, others = progress(db, healthy_id)
            if done >= events or time.monotonic() > deadline:
                break
            time.sleep(POLL_S)
        finished = done >= events
        end = last if finished and last is not None else db_now(db)
        elapsed = end - started
        mine = healthy_ids(db, healthy_id)
    finally:
        stop.set()
        ledger: list[tuple[int, list[int]]] = []
        # A runtime that hangs on stop leaves no ledger; the rates stand without it.
        with contextlib.suppress(queue.Empty):
            ledger = ledger_out.get(timeout=90)
        runtime.join(30)
        if runtime.is_alive():
            runtime.kill()
            runtime.join()
        db.close()
    carrying = [(ms, ids) for ms, ids in ledger if any(i in mine for i in ids)]
    billed_ms = sum(ms for ms, _ in carrying)
    gb_s = billed_ms / 1000 * SENDER.memory_mb / 1024
    usd = gb_s * LAMBDA_ARM_GB_S_USD + len(carrying) * LAMBDA_REQUEST_USD
    return {
        "finished": finished,
        "healthy_delivered": done,
        "healthy_s": round(elapsed, 2),
        "healthy_per_s": round(done / elapsed, 1) if elapsed > 0 else 0.0,
        # The claimer's wait before it saw the mix (up to its idle poll), and the rate with it.
        "claim_wait_s": round(started - committed, 2),
        "healthy_per_s_from_enqueue": round(done / (end - committed), 1),
        "neighbours_delivered": others,
        "neighbours_events": events * (endpoints - 1),
        "healthy_invocations": len(carrying),
        "healthy_sender_ms": round(billed_ms / done, 2) if done else None,
        "healthy_usd_per_million": round(usd / done * 1_000_000, 3) if done else None,
        "sender_invocations": len(ledger),
        "sender_s": round(sum(ms for ms, _ in ledger) / 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000, help="events per endpoint")
    parser.add_argument(
        "--timeout", type=float, default=120.0, help="seconds per case before it is cut"
    )
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated, of {', '.join(CASES)} (alone always runs: it is the baseline)",
    )
    parser.add_argument(
        "--senders",
        type=int,
        default=None,
        help="sender environments (default: the runtime's own default)",
    )
    args = parser.parse_args()
    from tidings.observability import logger

    # The migrations of each fresh database log a line each; keep them off the result.
    logger.setLevel("WARNING")
    chosen = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = set(chosen) - set(CASES)
    if unknown:
        parser.error(f"no case named {sorted(unknown)}")
    names = ["alone", *(name for name in CASES if name in chosen and name != "alone")]

    results: dict[str, dict[str, Any]] = {}
    with server_dsn() as dsn:
        for name in names:
            result = run_case(dsn, name, args.events, args.senders, args.timeout)
            alone = results.get("alone", result)
            result["ratio"] = round(result["healthy_per_s"] / alone["healthy_per_s"], 3)
            if result["healthy_sender_ms"] and alone["healthy_sender_ms"]:
                result["cost_ratio"] = round(
                    result["healthy_sender_ms"] / alone["healthy_sender_ms"], 2
                )
            results[name] = result
            print(json.dumps(result), flush=True)
    ratios = {name: r["ratio"] for name, r in results.items() if name != "alone"}
    cost_ratios = {name: r.get("cost_ratio") for name, r in results.items() if name != "alone"}
    print(
        json.dumps(
            {
                "summary": True,
                "events": args.events,
                "senders": args.senders,
                "cores": os.cpu_count(),
                "alone_per_s": results["alone"]["healthy_per_s"],
                "ratios": ratios,
                "min_ratio": min(ratios.values(), default=None),
                "cost_ratios": cost_ratios,
                "max_cost_ratio": max(
                    (v for v in cost_ratios.values() if v is not None), default=None
                ),
                "unfinished": [name for name, r in results.items() if not r["finished"]],
            }
        )
    )


if __name__ == "__main__":
    main()
