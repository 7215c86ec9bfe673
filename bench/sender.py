"""Sender throughput: the sender Lambda handler, ten queue messages a batch, against a naive worker.

A receiver in its own process answers every POST after ``--latency-ms`` (100 ms). In one run:
- the baseline, a naive worker, delivers ``--baseline`` rows of plain tables of its own
  (``support.make_naive_tables``) one at a time, each in its own transaction: BEGIN, select a
  due row FOR UPDATE SKIP LOCKED, POST, insert the attempt, update the row, update the
  endpoint's health, COMMIT (seven round trips per delivery);
- then the sender handler (``tidings.handlers.sender``, one process standing for one Lambda
  execution environment, so batches run one after another) delivers ``--messages`` rows that the
  claimer leases in batches of ``--claim-batch`` onto a local queue with the SQS contract, with
  the deployment's settings otherwise (``deliveries_per_message`` rows to a queue message,
  ``sender_concurrency`` requests at once, ``sender_record_rows`` answers a record statement).

Round trips to PostgreSQL are counted at the client (every ``execute``; BEGIN and COMMIT count,
and so do the claimer's statements). SQS requests are counted as AWS bills them (every call
that moved messages, each 64 KiB of its payload one request). CPU time is this process's
less the claimer's (counted apart: it is a function of its own); the receiver runs elsewhere.
The share of it spent in the kernel (sockets, locks, thread switches) is printed beside it.
The last line is JSON: sender_per_s, baseline_per_s, ratio, db_statements_per_delivery,
sqs_requests_per_delivery, deliveries_per_invocation, cpu_ms_per_delivery,
claimer_cpu_ms_per_delivery, system_cpu_share (and the baseline's
round trips); the line before it prices the sender path on Lambda and SQS. Run:
``python bench/sender.py`` (embedded PostgreSQL) or with ``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import psycopg2
import psycopg2.extensions
import requests
from support import ROOT, Stopwatch, fresh_database, give_secret, make_naive_tables, server_dsn

sys.path.insert(0, str(ROOT))

from tidings import wiring
from tidings.config import Settings
from tidings.dal import connection as connection_module
from tidings.dal.connection import Database
from tidings.delivery import signing
from tidings.delivery.claimer import Claimer
from tidings.local.event_source import consume_once
from tidings.local.queue import LocalQueue
from tidings.queue import OutgoingMessage, ReceivedMessage
from tidings.queue.base import MAX_BATCH_ENTRIES, send_chunks

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
QUEUE_ARN = "arn:aws:sqs:local:000000000000:tidings-delivery"

# Prices (us-east-1, published list prices): Lambda arm64 duration per GB-second and requests;
# SQS standard queue requests (each 64 KiB of payload is one request; free tier ignored).
LAMBDA_ARM_GB_S_USD = 0.0000133334
LAMBDA_REQUEST_USD = 0.20 / 1_000_000
SQS_REQUEST_USD = 0.40 / 1_000_000
LAMBDA_MEMORY_GB = 0.25
# Lambda gives a function CPU in proportion to memory: one full vCPU at 1,769 MB.
FULL_VCPU_MB = 1769
# SQS bills every 64 KiB of a request's payload as one request.
SQS_BILLED_CHUNK_BYTES = 65_536


# ---------------------------------------------------------------- receiver (its own process)


def _serve(latency_s: float, port_out: Any) -> None:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in separate writes; Nagle would hold the body for an ACK.
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            time.sleep(latency_s)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

    server = Server(("127.0.0.1", 0), Handler)
    port_out.put(server.server_address[1])
    server.serve_forever()


@contextlib.contextmanager
def receiver(latency_ms: int) -> Iterator[str]:
    context = multiprocessing.get_context("spawn")
    port_out = context.Queue()
    process = context.Process(target=_serve, args=(latency_ms / 1000, port_out), daemon=True)
    process.start()
    try:
        yield f"http://127.0.0.1:{port_out.get(timeout=30)}/hook"
    finally:
        process.kill()
        process.join()


# ---------------------------------------------------------------- counting round trips


class _Counter:
    executes = 0


class CountingCursor(psycopg2.extensions.cursor):
    def execute(self, query: Any, vars: Any = None) -> None:
        _Counter.executes += 1
        super().execute(query, vars)


class CountingBoundedCursor(connection_module.BoundedCursor):
    # A bounded statement and its timeout travel in one query string: one round trip.
    def execute(self, query: Any, vars: Any = None) -> None:
        _Counter.executes += 1
        super().execute(query, vars)


@contextlib.contextmanager
def counting_connections() -> Iterator[None]:
    """Every connection opened inside the block counts its cursors' round trips."""
    real_connect = psycopg2.connect
    real_bounded = connection_module.BoundedCursor

    def connect(*args: Any, **kwargs: Any) -> Any:
        conn = real_connect(*args, **kwargs)
        conn.cursor_factory = CountingCursor
        return conn

    psycopg2.connect = connect
    connection_module.BoundedCursor = CountingBoundedCursor  # type: ignore[misc]
    try:
        yield
    finally:
        psycopg2.connect = real_connect
        connection_module.BoundedCursor = real_bounded  # type: ignore[misc]


# ---------------------------------------------------------------- counting SQS requests


class CountingQueue(LocalQueue):
    """A local queue that counts the SQS requests the same calls would be billed on AWS: each
    SendMessageBatch (ten entries, 256 KiB at most), each ReceiveMessage that returned messages
    (the event source mapping's; its empty long polls cost the same whatever the load), each
    DeleteMessageBatch; every 64 KiB of payload one request."""

    billed_requests = 0

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        for chunk in send_chunks(messages):
            self.billed_requests += _billed(sum(len(m.body.encode()) for m in chunk))
        return super().send_batch(messages)

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        received = super().receive(max_messages, wait_s)
        if received:
            self.billed_requests += _billed(sum(len(m.body.encode()) for m in received))
        return received

    def delete(self, receipt_handles: Sequence[str]) -> None:
        self.billed_requests += math.ceil(len(receipt_handles) / MAX_BATCH_ENTRIES)
        super().delete(receipt_handles)


def _billed(payload_bytes: int) -> int:
    return max(1, math.ceil(payload_bytes / SQS_BILLED_CHUNK_BYTES))


# ---------------------------------------------------------------- seeding


def seed(url: str, receiver_url: str, endpoints: int, rows: int, naive_rows: int) -> None:
    """``rows`` messages for the sender and ``naive_rows`` more, moved to the naive worker's own
    table, over ``endpoints`` endpoints with one signing secret."""
    conn = psycopg2.connect(url)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url)"
            " SELECT %s || '/' || g FROM generate_series(1, %s) g RETURNING id",
            (receiver_url, endpoints),
        )
        give_secret(cur, [row[0] for row in cur.fetchall()], SECRET)
        cur.execute(
            """
            WITH ev AS (
                INSERT INTO tidings.events (event_type, event_id, payload)
                SELECT 'bench.event', 'bench-' || g,
                       jsonb_build_object('n', g, 'order', jsonb_build_object(
                           'id', 'ord_' || g, 'amount', g * 3, 'currency', 'EUR'))
                FROM generate_series(1, %(rows)s) g
                RETURNING id
            )
            INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)
            SELECT ev.id, (SELECT min(id) FROM tidings.endpoints) + ev.id %% %(endpoints)s,
                   'bench.event'
            FROM ev
            """,
            {"rows": rows + naive_rows, "endpoints": endpoints},
        )
        make_naive_tables(cur)
        cur.execute(
            "DELETE FROM naive_messages WHERE id NOT IN"
            " (SELECT id FROM naive_messages ORDER BY id LIMIT %s)",
            (naive_rows,),
        )
        cur.execute("DELETE FROM tidings.messages WHERE id IN (SELECT id FROM naive_messages)")
        cur.execute("VACUUM ANALYZE")
    conn.close()


# ---------------------------------------------------------------- the naive worker

# The naive worker knows the one signing secret in clear (it does not decrypt one per row, as
# the sender does; that only flatters the baseline).
NAIVE_SELECT = """
SELECT m.id, m.endpoint_id, m.attempts, e.url, ev.payload::text
FROM naive_messages m
JOIN tidings.endpoints e ON e.id = m.endpoint_id
JOIN tidings.events ev ON ev.id = m.event_ref
WHERE m.status IN ('pending', 'failed') AND m.next_attempt_at <= now()
ORDER BY m.next_attempt_at
LIMIT 1
FOR UPDATE OF m SKIP LOCKED
"""
NAIVE_INSERT_ATTEMPT = """
INSERT INTO naive_attempts (message_id, endpoint_id, attempt_number, status_code, response_ms)
VALUES (%s, %s, %s, %s, %s)
"""
NAIVE_UPDATE_ROW = """
UPDATE naive_messages
SET status = 'delivered', attempts = attempts + 1, delivered_at = now(),
    last_status_code = %s, last_response_ms = %s
WHERE id = %s
"""
NAIVE_UPDATE_HEALTH = """
UPDATE tidings.endpoint_health
SET consecutive_failures = 0, last_success_at = now()
WHERE endpoint_id = %s
"""


def naive_worker(url: str, count: int) -> tuple[int, float, float, int]:
    """Deliver ``count`` rows one at a time; returns delivered, wall s, CPU s, round trips."""
    conn = psycopg2.connect(url)
    conn.autocommit = True
    session = requests.Session()
    before = _Counter.executes
    delivered = 0
    with Stopwatch() as watch, conn.cursor() as cur:
        for _ in range(count):
            cur.execute("BEGIN")
            cur.execute(NAIVE_SELECT)
            row = cur.fetchone()
            if row is None:
                cur.execute("COMMIT")
                break
            message_id, endpoint_id, attempts, target, payload = row
            body = payload.encode()
            headers = signing.webhook_headers(f"msg_{message_id}", int(time.time()), body, [SECRET])
            headers["Content-Type"] = "application/json"
            started = time.perf_counter()
            response = session.post(target, data=body, headers=headers, timeout=15)
            elapsed_ms = round((time.perf_counter() - started) * 1000)
            cur.execute(
                NAIVE_INSERT_ATTEMPT,
                (message_id, endpoint_id, attempts + 1, response.status_code, elapsed_ms),
            )
            cur.execute(NAIVE_UPDATE_ROW, (response.status_code, elapsed_ms, message_id))
            cur.execute(NAIVE_UPDATE_HEALTH, (endpoint_id,))
            cur.execute("COMMIT")
            delivered += 1
    conn.close()
    return delivered, watch.wall, watch.cpu, _Counter.executes - before


# ---------------------------------------------------------------- the sender handler


@dataclass
class LambdaContext:
    function_name: str = "tidings-sender"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:local:000000000000:function:tidings-sender"
    aws_request_id: str = "bench"
    started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


@contextlib.contextmanager
def stdout_silenced() -> Iterator[None]:
    """Logs and EMF still get written (their cost is part of a delivery), just not shown."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(devnull)
        os.close(saved)


@dataclass
class SenderRun:
    delivered: int
    wall_s: float
    cpu_s: float
    system_cpu_s: float
    claimer_cpu_s: float
    round_trips: int
    invocations: int
    sqs_requests: int


def sender_run(url: str, count: int, claim_batch: int) -> SenderRun:
    """Deliver ``count`` rows through the claimer and the sender handler, with the deployment's
    settings (deliveries per queue message, sender concurrency) but for the claim's batch."""
    from tidings.handlers import sender as sender_app

    settings = Settings(allowed_networks=("127.0.0.0/8",), claim_batch_size=claim_batch)
    queue = CountingQueue(visibility_timeout_s=60)
    claimer_db = Database(url)
    claimer = Claimer(claimer_db, queue, settings)
    wiring.override(settings=settings, queue=queue, database_factory=lambda: Database(url))
    context = LambdaContext()
    already = delivered_rows(url)
    before = _Counter.executes
    invocations = 0
    claimer_cpu = 0.0

    def claim() -> int:
        # The claimer runs on this thread alone, so this thread's CPU time is the claim's.
        nonlocal claimer_cpu
        started = time.thread_time()
        claimed = claimer.claim_once().claimed
        claimer_cpu += time.thread_time() - started
        return claimed

    try:
        with Stopwatch() as watch:
            while True:
                # The claimer keeps the queue stocked a little ahead of the sender: half a claim.
                queued = queue.approximate_depth() * settings.deliveries_per_message
                if queued < claim_batch // 2:
                    claim()
                result = consume_once(
                    queue, sender_app.handler, queue_arn=QUEUE_ARN, context=context
                )
                if not result.received:
                    if claim() == 0:
                        break
                    continue
                invocations += 1
                if result.failed:
                    raise RuntimeError(f"the sender failed records: {result.failed}")
    finally:
        wiring.reset()
        claimer_db.close()
    round_trips = _Counter.executes - before
    return SenderRun(
        delivered_rows(url) - already,
        watch.wall,
        watch.cpu,
        watch.system,
        claimer_cpu,
        round_trips,
        invocations,
        queue.billed_requests,
    )


def delivered_rows(url: str, table: str = "tidings.messages") -> int:
    conn = psycopg2.connect(url)
    with conn.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table} WHERE status = 'delivered'")
        (count,) = cur.fetchone()
    conn.close()
    return int(count)


def cost_per_million(
    per_s: float, cpu_ms: float, deliveries_per_invocation: float, sqs_per_delivery: float
) -> str:
    # Billed duration is wall time; at 256 MB the function has a fraction of a vCPU, so CPU
    # time stretches by FULL_VCPU_MB / 256 when it, not the receivers, is the bottleneck.
    wall_s = 1 / per_s
    cpu_bound_s = cpu_ms / 1000 * FULL_VCPU_MB / (LAMBDA_MEMORY_GB * 1024)
    billed_s = max(wall_s, cpu_bound_s)
    duration = billed_s * LAMBDA_MEMORY_GB * LAMBDA_ARM_GB_S_USD * 1e6
    invocations = LAMBDA_REQUEST_USD / deliveries_per_invocation * 1e6
    sqs = sqs_per_delivery * SQS_REQUEST_USD * 1e6
    total = duration + invocations + sqs
    return (
        f"cost per million deliveries (sender on arm64 256 MB at ${LAMBDA_ARM_GB_S_USD}/GB-s and "
        f"$0.20/M requests, SQS at $0.40/M requests, {sqs_per_delivery:.3f} per delivery): "
        f"duration ${duration:.4f} ({billed_s * 1000:.1f} ms billed per delivery) + "
        f"invocations ${invocations:.4f} + SQS ${sqs:.4f} = ${total:.4f}; the claimer adds a "
        f"fixed ~${60 * 24 * 30 * 50 * LAMBDA_MEMORY_GB * LAMBDA_ARM_GB_S_USD:.2f}/month "
        "(one 50 s invocation a minute)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--baseline", type=int, default=500)
    parser.add_argument("--endpoints", type=int, default=10)
    parser.add_argument("--latency-ms", type=int, default=100)
    parser.add_argument("--claim-batch", type=int, default=100)
    args = parser.parse_args()

    with server_dsn() as dsn, fresh_database(dsn) as url, receiver(args.latency_ms) as target:
        seed(url, target, args.endpoints, args.messages, args.baseline)
        with counting_connections():
            base_n, base_wall, _, base_trips = naive_worker(url, args.baseline)
            with stdout_silenced():
                run = sender_run(url, args.messages, args.claim_batch)
                sent_n, sent_wall, sent_cpu, sent_trips = (
                    run.delivered,
                    run.wall_s,
                    run.cpu_s,
                    run.round_trips,
                )
        total_delivered = delivered_rows(url) + delivered_rows(url, "naive_messages")

    if base_n != args.baseline or sent_n != args.messages:
        raise SystemExit(f"incomplete run: baseline {base_n}, sender {sent_n}")
    if total_delivered != args.baseline + args.messages:
        raise SystemExit(f"the database shows {total_delivered} delivered rows")
    sender_per_s = sent_n / sent_wall
    baseline_per_s = base_n / base_wall
    # The claimer shares this process but is a Lambda function of its own (priced apart below).
    claimer_cpu_ms = run.claimer_cpu_s * 1000 / sent_n
    cpu_ms = sent_cpu * 1000 / sent_n - claimer_cpu_ms
    system_share = run.system_cpu_s / sent_cpu if sent_cpu else 0.0
    print(
        f"baseline: {base_n} in {base_wall:.1f} s ({baseline_per_s:.1f}/s), "
        f"{base_trips / base_n:.2f} round trips each; sender: {sent_n} in {sent_wall:.1f} s "
        f"({sender_per_s:.1f}/s) over {run.invocations} invocations, "
        f"{sent_trips / sent_n:.3f} round trips and {cpu_ms:.2f} ms of sender CPU each "
        f"(the claimer's {claimer_cpu_ms:.2f} ms apart; {system_share:.0%} of the process's CPU "
        "in the kernel)"
    )
    print(
        cost_per_million(sender_per_s, cpu_ms, sent_n / run.invocations, run.sqs_requests / sent_n)
    )
    print(
        json.dumps(
            {
                "sender_per_s": round(sender_per_s, 1),
                "baseline_per_s": round(baseline_per_s, 1),
                "ratio": round(sender_per_s / baseline_per_s, 2),
                "db_statements_per_delivery": round(sent_trips / sent_n, 3),
                "sqs_requests_per_delivery": round(run.sqs_requests / sent_n, 3),
                "deliveries_per_invocation": round(sent_n / run.invocations, 1),
                "cpu_ms_per_delivery": round(cpu_ms, 2),
                "claimer_cpu_ms_per_delivery": round(claimer_cpu_ms, 3),
                "system_cpu_share": round(system_share, 2),
                "baseline_db_statements_per_delivery": round(base_trips / base_n, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
