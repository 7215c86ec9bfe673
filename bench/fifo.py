"""Ordered delivery: one FIFO endpoint's delivery rate against a 20 ms receiver, beside the rate
of an unordered endpoint measured in the same run through the dev runtime.

Cases (each on a fresh database, with a fresh runtime; the receiver answers 200 after
``--receiver-latency-ms``, 20 by default):
- ``unordered``: an endpoint with ordering none: the baseline, delivered concurrently;
- ``fifo_batch_1``: a FIFO endpoint, every event in one line, one message per request: the
  rate of a strictly sequential line, about one receiver round trip plus Tidings' own turn
  (record, move the line on, queue, begin) per message;
- ``fifo_batch_50``: the same line with ``fifo_batch_size`` 50: up to 50 messages a request;
- ``fifo_16_keys``: batch 1, the events spread over 16 ordering keys: 16 lines side by side.

Each case sends ``--events`` events in one transaction. The clock (the database's) starts when
the claimer first takes a row (polled every 10 ms) and stops at the last ``delivered_at``; the
rate is events over that time. The endpoint has answered before (it is not new, so not in the
untried lane's one-at-a-time start). ``ratio`` is a case's rate over ``unordered``'s. One JSON
line per case, then a summary. Run: ``python bench/fifo.py`` (embedded PostgreSQL) or with
``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from typing import Any

from isolation import first_claim, runtime_process
from support import fresh_database, give_secret, server_dsn

from tidings.dal.connection import Database
from tidings.local.receivers import Kind, Receivers

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
# case -> (ordering, fifo_batch_size, ordering keys)
CASES: dict[str, tuple[str, int, int]] = {
    "unordered": ("none", 1, 0),
    "fifo_batch_1": ("fifo", 1, 0),
    "fifo_batch_50": ("fifo", 50, 0),
    "fifo_16_keys": ("fifo", 1, 16),
}
POLL_S = 0.1


def serve_receiver(latency_s: float, url_out: Any, stop: Any) -> None:
    receivers = Receivers((Kind.HEALTHY,), latency_s=latency_s)
    receivers.start()
    url_out.put(receivers.url(Kind.HEALTHY))
    stop.wait()
    receivers.stop()


def seed(url: str, target: str, ordering: str, batch_size: int) -> int:
    """The endpoint, subscribed to every type, signing with SECRET, as one that answered before."""
    db = Database(url)
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url, ordering, fifo_batch_size) VALUES (%s, %s, %s)"
            " RETURNING id",
            (target, ordering, batch_size),
        )
        endpoint_id = int(cur.fetchone()[0])
        give_secret(cur, [endpoint_id], SECRET)
        cur.execute(
            "INSERT INTO tidings.subscriptions (endpoint_id, event_type) VALUES (%s, '*')",
            (endpoint_id,),
        )
        cur.execute(
            "UPDATE tidings.endpoint_health SET last_success_at = now() WHERE endpoint_id = %s",
            (endpoint_id,),
        )
    db.close()
    return endpoint_id


def send(db: Database, events: int, keys: int) -> None:
    batch = [
        {
            "event_type": "ledger.entry",
            "event_id": f"e{i:06d}",
            "payload": {"n": i, "pad": "x" * 200},
            **({"ordering_key": f"acct_{i % keys:02d}"} if keys else {}),
        }
        for i in range(events)
    ]
    with db.transaction() as cur:
        for start in range(0, len(batch), 1000):
            cur.execute(
                "SELECT count(*) FROM tidings.enqueue_batch(%s::jsonb)",
                (json.dumps(batch[start : start + 1000]),),
            )


def run_case(
    dsn: str, name: str, events: int, latency_s: float, timeout_s: float
) -> dict[str, Any]:
    ordering, batch_size, keys = CASES[name]
    context = multiprocessing.get_context("fork")
    url_out, receiver_stop = context.Queue(), context.Event()
    receiver = context.Process(target=serve_receiver, args=(latency_s, url_out, receiver_stop))
    receiver.start()
    try:
        target = url_out.get(timeout=30)
        with fresh_database(dsn) as url:
            endpoint_id = seed(url, target, ordering, batch_size)
            ready, stop, ledger_out = context.Event(), context.Event(), context.Queue()
            runtime = context.Process(
                target=runtime_process, args=(url, None, ready, stop, ledger_out)
            )
            runtime.start()
            db = Database(url)
            try:
                if not ready.wait(120):
                    raise RuntimeError("the runtime did not start within 120 s")
                send(db, events, keys)
                deadline = time.monotonic() + timeout_s
                started = first_claim(db, deadline)
                while True:
                    with db.cursor() as cur:
                        cur.execute(
                            "SELECT count(*) FILTER (WHERE status = 'delivered'),"
                            " extract(epoch FROM max(delivered_at))::float8"
                            " FROM tidings.messages WHERE endpoint_id = %s",
                            (endpoint_id,),
                        )
                        done, last = cur.fetchone()
                    if done >= events or time.monotonic() > deadline:
                        break
                    time.sleep(POLL_S)
                with db.cursor() as cur:
                    cur.execute(
                        "SELECT count(*) FROM tidings.attempts WHERE endpoint_id = %s",
                        (endpoint_id,),
                    )
                    attempts = int(cur.fetchone()[0])
            finally:
                stop.set()
                ledger = ledger_out.get(timeout=90)
                runtime.join(30)
                if runtime.is_alive():
                    runtime.kill()
                db.close()
    finally:
        receiver_stop.set()
        receiver.join(30)
        if receiver.is_alive():
            receiver.kill()
    elapsed = (last or 0) - (started or 0)
    requests = sum(1 for _, ids in ledger if ids)
    return {
        "case": name,
        "ordering": ordering,
        "fifo_batch_size": batch_size,
        "ordering_keys": keys,
        "events": events,
        "delivered": int(done),
        "finished": int(done) >= events,
        "seconds": round(elapsed, 2),
        "per_s": round(int(done) / elapsed, 1) if elapsed > 0 else 0.0,
        "attempts_logged": attempts,
        "sender_invocations": requests,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=500, help="events per case")
    parser.add_argument("--receiver-latency-ms", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per case")
    parser.add_argument(
        "--cases",
        default=",".join(CASES),
        help=f"comma-separated, of {', '.join(CASES)} (unordered always runs: the baseline)",
    )
    args = parser.parse_args()
    from tidings.observability import logger

    logger.setLevel("WARNING")
    chosen = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = set(chosen) - set(CASES)
    if unknown:
        parser.error(f"no case named {sorted(unknown)}")
    names = ["unordered", *(n for n in CASES if n in chosen and n != "unordered")]
    results: dict[str, dict[str, Any]] = {}
    with server_dsn() as dsn:
        for name in names:
            result = run_case(dsn, name, args.events, args.receiver_latency_ms / 1000, args.timeout)
            base = results.get("unordered", result)
            result["ratio"] = round(result["per_s"] / base["per_s"], 3) if base["per_s"] else None
            results[name] = result
            print(json.dumps(result), flush=True)
    print(
        json.dumps(
            {
                "summary": True,
                "events": args.events,
                "receiver_latency_ms": args.receiver_latency_ms,
                "cores": os.cpu_count(),
                "unordered_per_s": results["unordered"]["per_s"],
                **{f"{n}_per_s": r["per_s"] for n, r in results.items() if n != "unordered"},
                "ratios": {n: r["ratio"] for n, r in results.items() if n != "unordered"},
                "unfinished": [n for n, r in results.items() if not r["finished"]],
            }
        )
    )


if __name__ == "__main__":
    main()
