"""The dev runtime end to end against a naive delivery loop, on the same receiver, in one run.

E2E: ``--events`` messages (over ``--endpoints`` endpoints) delivered by the dev runtime (the
Lambda handlers: claimer, local queue, ``--senders`` sender environments, each a process of its
own as on Lambda, or with ``--sender-threads`` threads of the runtime's), timed from the end of
its start (every environment ready) to the last ``delivered``; CPU is counted from before its
start. Baseline, on a fresh copy of the same rows in a plain table of its own
(``support.make_naive_tables``): three worker processes, each selecting 50 due rows (``FOR
UPDATE SKIP LOCKED``), posting them one by one and marking each row delivered in the same
transaction. Both post to one local receiver (its own process) that answers
200 at once.

The last line is JSON: e2e_per_s, baseline_per_s, ratio, and where each side's CPU went, in
milliseconds of CPU per delivery (Linux only, read from /proc): ``*_own_cpu_ms`` (the runtime
process, or the three baseline workers), ``*_receiver_cpu_ms``, ``*_pg_cpu_ms`` (every process of
the PostgreSQL server, when it runs on this machine, less the server process of the
benchmark's own polling for the last delivery) and ``*_machine_cpu_ms`` (every process on the
machine); ``e2e_start_cpu_ms``, the part of ``e2e_own_cpu_ms`` spent before the runtime was ready
(starting its processes: not in its rate, and paid once per start, not per delivery); and
``*_pg_wal_bytes``, the write-ahead log the server wrote per delivery (what its
storage and any replica absorb). When a side keeps the machine's cores busy, its rate is the
cores divided by its machine CPU per delivery; ``ratio_ceiling`` is the ratio the runtime
would reach if its own CPU cost nothing and everything else (receiver, PostgreSQL) stayed as
measured: ``cores / (e2e_machine_cpu_ms - e2e_own_cpu_ms) / baseline_per_s``. And what explains
a slow run: ``e2e_endpoints_left_slow_lane`` and ``e2e_endpoints_slow_at_end`` (an answer of a
second or more, on a machine short of CPU, puts its endpoint in the slow lane until quick answers
there take it out) and ``e2e_slowest_delivery_ms``.
Run: ``python bench/e2e.py`` (embedded PostgreSQL) or with ``DATABASE_URL`` set.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import tempfile
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg2
from support import (
    ServerCpu,
    fresh_database,
    give_secret,
    make_naive_tables,
    process_cpu_s,
    process_stats,
    server_dsn,
)

from tidings.dal.connection import Database
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import DevRuntime, RuntimeConfig, dev_settings

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BASELINE_WORKERS = 3
BASELINE_BATCH = 50


def serve_receiver(port_out: Any, stop: Any, latency_s: float) -> None:
    receivers = Receivers((Kind.HEALTHY,), latency_s=latency_s).start()
    port_out.put(receivers.url(Kind.HEALTHY))
    stop.wait()
    receivers.stop()


def seed(url: str, endpoints: int, events: int, receiver_url: str, naive: bool = False) -> None:
    """Endpoints with a secret and a subscription each, and ``events`` events over them; with
    ``naive``, the naive loop's copy of their messages too."""
    db = Database(url)
    with db.cursor() as cur:
        for n in range(endpoints):
            cur.execute(
                "INSERT INTO tidings.endpoints (url) VALUES (%s) RETURNING id",
                (f"{receiver_url}?endpoint={n}",),
            )
            endpoint_id = cur.fetchone()[0]
            give_secret(cur, [endpoint_id], SECRET)
            cur.execute(
                "INSERT INTO tidings.subscriptions (endpoint_id, event_type) VALUES (%s, %s)",
                (endpoint_id, f"bench.{n}"),
            )
        batch: list[DemoEvent] = []
        for i in range(events):
            batch.append(DemoEvent(f"bench.{i % endpoints}", f"e-{i}", {"n": i, "pad": "x" * 200}))
            if len(batch) == 500:
                enqueue_events(cur, batch)
                batch = []
        enqueue_events(cur, batch)
        if naive:
            make_naive_tables(cur)
    # VACUUM cannot run in the transaction that the bounded cursor's timeout prefix opens.
    with db.connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    db.close()


def delivered(db: Database, table: str = "tidings.message_rows") -> int:
    with db.cursor() as cur:
        cur.execute(f"SELECT count(*) FROM {table} WHERE status = 'delivered'")
        return int(cur.fetchone()[0])


def unfinished(db: Database) -> bool:
    """Whether any message is still to be settled (the queue holds it): one probe, cheap enough
    to ask every 50 ms without adding to the database's load being measured."""
    with db.cursor() as cur:
        cur.execute("SELECT EXISTS (SELECT 1 FROM tidings.queue)")
        return bool(cur.fetchone()[0])


@dataclass
class CpuClock:
    """CPU seconds used so far: by this process's waited-for children, by one other process,
    and by the whole machine (every core, every process)."""

    children_s: float
    process_s: float
    machine_s: float

    @classmethod
    def read(cls, pid: int) -> CpuClock | None:
        if not Path("/proc/stat").exists():
            return None
        tick = os.sysconf("SC_CLK_TCK")
        times = os.times()
        # Fields 14 and 15 of /proc/<pid>/stat (after the command name): utime, stime.
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
        idle = cpu[3] + cpu[4]  # idle, iowait
        return cls(
            children_s=times.children_user + times.children_system,
            process_s=(int(fields[11]) + int(fields[12])) / tick,
            machine_s=(sum(cpu) - idle) / tick,
        )


def cpu_per_delivery(
    side: str,
    before: CpuClock | None,
    after: CpuClock | None,
    pg_s: float | None,
    events: int,
) -> dict[str, float]:
    if before is None or after is None:
        return {}

    def per_delivery(seconds: float) -> float:
        return round(1000 * seconds / events, 3)

    figures = {
        f"{side}_own_cpu_ms": per_delivery(after.children_s - before.children_s),
        f"{side}_receiver_cpu_ms": per_delivery(after.process_s - before.process_s),
        f"{side}_machine_cpu_ms": per_delivery(after.machine_s - before.machine_s),
    }
    if pg_s is not None:
        figures[f"{side}_pg_cpu_ms"] = per_delivery(pg_s)
    return figures


@dataclass(frozen=True)
class Timed:
    """A side's deliveries per second; the CPU its processes spent before they were ready, and
    the server CPU of the benchmark's own polling for the end (None where there is none, or
    where /proc cannot tell)."""

    per_s: float
    start_cpu_s: float | None = None
    probe_pg_cpu_s: float | None = None


def backend_cpu_s(db: Database) -> float | None:
    """CPU seconds so far of the server process behind ``db``'s connection (None when the
    server does not run here)."""
    return process_cpu_s(db.connection.get_backend_pid())


def tree_cpu_s(pid: int) -> float | None:
    """CPU seconds used so far by a process and every process below it that still runs (with
    what their own ended children used)."""
    if not Path("/proc/stat").exists():
        return None
    stats = process_stats()
    parents = {p: int(fields[1]) for p, fields in stats.items()}
    # utime, stime, and the times of their waited-for children.
    used = {p: sum(int(v) for v in fields[11:15]) for p, fields in stats.items()}
    tree, frontier = {pid}, [pid]
    while frontier:
        parent = frontier.pop()
        children = [child for child, of in parents.items() if of == parent]
        tree.update(children)
        frontier.extend(children)
    return sum(used.get(p, 0) for p in tree) / os.sysconf("SC_CLK_TCK")


def measured(
    side: str, url: str, receiver_pid: int, events: int, run: Any
) -> tuple[float, dict[str, float]]:
    """``run()``'s deliveries per second, and where the CPU went while it ran."""
    server = ServerCpu.of(url)
    wal_before = wal_position(url)
    pg_before = server.seconds()
    before = CpuClock.read(receiver_pid)
    timed = run()
    after = CpuClock.read(receiver_pid)
    pg_after = server.seconds()
    pg_s = None if pg_before is None or pg_after is None else pg_after - pg_before
    if pg_s is not None and timed.probe_pg_cpu_s is not None:
        # Asking whether every row is delivered is the benchmark's work, not the runtime's.
        pg_s -= timed.probe_pg_cpu_s
    figures = cpu_per_delivery(side, before, after, pg_s, events)
    if figures and timed.start_cpu_s is not None:
        figures[f"{side}_start_cpu_ms"] = round(1000 * timed.start_cpu_s / events, 3)
    # Write-ahead log per delivery: what the database's storage (and a replica) must absorb.
    figures[f"{side}_pg_wal_bytes"] = round(wal_since(url, wal_before) / events)
    return timed.per_s, figures


def wal_position(url: str) -> str:
    with closing(psycopg2.connect(url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_current_wal_lsn()::text")
        return str(cur.fetchone()[0])


def wal_since(url: str, position: str) -> int:
    """Bytes of write-ahead log the whole server wrote since ``position``."""
    with closing(psycopg2.connect(url)) as conn, conn.cursor() as cur:
        cur.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), %s::pg_lsn)", (position,))
        return int(cur.fetchone()[0])


@dataclass(frozen=True)
class RuntimeRun:
    """How the benchmark runs the dev runtime."""

    url: str
    senders: int
    sender_processes: bool
    log_path: Path


def runtime_process(run: RuntimeRun, ready: Any, stop: Any) -> None:
    """One dev runtime (claimer, local queue, senders) until ``stop`` is set; ``ready`` is set
    once it has started."""
    from tidings.observability import logger

    logger.setLevel("WARNING")
    # The handlers print their EMF metrics, as on Lambda (sender processes, on standard error):
    # keep them and the runtime's warnings off the result, in a log of their own.
    log = os.open(run.log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    runtime = DevRuntime(
        dev_settings(database_url=run.url),
        RuntimeConfig(
            data_dir=run.log_path.parent,
            serve_api=False,
            sender_environments=run.senders,
            sender_processes=run.sender_processes,
            intervals_s={},
            alerts_stream=None,
        ),
    )
    runtime.start()
    ready.set()
    stop.wait()
    runtime.stop()


def run_e2e(url: str, events: int, senders: int, sender_processes: bool, timeout_s: float) -> Timed:
    """Rows delivered per second by a dev runtime in its own process, timed from the end of
    its start (every sender environment ready; the claimer has begun) to the last row
    delivered."""
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    stop = context.Event()
    db = Database(url)
    log_path = Path(tempfile.mkdtemp(prefix="tidings-bench-")) / "runtime.log"
    run = RuntimeRun(url, senders, sender_processes, log_path)
    runtime = context.Process(target=runtime_process, args=(run, ready, stop))
    runtime.start()
    start_deadline = time.perf_counter() + timeout_s
    while not ready.wait(0.5):
        if not runtime.is_alive() or time.perf_counter() > start_deadline:
            runtime.kill()
            raise RuntimeError(f"e2e: the runtime did not start; see {log_path}")
    started = time.perf_counter()
    assert runtime.pid is not None
    start_cpu_s = tree_cpu_s(runtime.pid)
    probe_before = backend_cpu_s(db)
    try:
        deadline = started + timeout_s
        while unfinished(db):
            if time.perf_counter() > deadline:
                raise RuntimeError(
                    f"e2e: only {delivered(db)} of {events} delivered in time; see {log_path}"
                )
            time.sleep(0.05)
        elapsed = time.perf_counter() - started
        probe_after = backend_cpu_s(db)
    finally:
        stop.set()
        runtime.join(120)
    done = delivered(db)
    db.close()
    if done != events:
        raise RuntimeError(f"e2e: {done} of {events} delivered")
    probe_s = None if probe_before is None or probe_after is None else probe_after - probe_before
    return Timed(events / elapsed, start_cpu_s, probe_s)


def lane_figures(url: str) -> dict[str, int]:
    """What explains a slow run, read after it (outside the CPU measured): the endpoints that
    left the slow lane early and those still in it at the end, and the slowest answer that
    delivered a message. An answer of a second or more puts its endpoint in the slow lane, where
    its messages travel one to an invocation until quick answers take it out."""
    with closing(psycopg2.connect(url)) as conn, conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FILTER (WHERE left_slow_lane_at IS NOT NULL),"
            " count(*) FILTER (WHERE slow_until > now())"
            " FROM tidings.endpoint_health"
        )
        left_early, slow_at_end = cur.fetchone()
        cur.execute("SELECT coalesce(max(last_response_ms), 0) FROM tidings.message_rows")
        (slowest,) = cur.fetchone()
    return {
        "e2e_endpoints_left_slow_lane": int(left_early),
        "e2e_endpoints_slow_at_end": int(slow_at_end),
        "e2e_slowest_delivery_ms": int(slowest),
    }


def baseline_worker(url: str) -> None:
    import requests

    db = Database(url)
    session = requests.Session()
    while True:
        with db.transaction() as cur:
            cur.execute(
                "SELECT m.id, e.url, ev.payload::text FROM naive_messages m"
                " JOIN tidings.endpoints e ON e.id = m.endpoint_id"
                " JOIN tidings.events ev ON ev.id = m.event_ref"
                " WHERE m.status = 'pending' ORDER BY m.id LIMIT %s"
                " FOR UPDATE OF m SKIP LOCKED",
                (BASELINE_BATCH,),
            )
            rows = cur.fetchall()
            for message_id, target, payload in rows:
                reply = session.post(
                    target,
                    data=payload.encode(),
                    headers={"Content-Type": "application/json"},
                    timeout=15,
                )
                status = "delivered" if reply.ok else "failed"
                cur.execute(
                    "UPDATE naive_messages SET status = %s::tidings.message_status,"
                    " attempts = attempts + 1,"
                    " delivered_at = CASE WHEN %s = 'delivered' THEN now() END WHERE id = %s",
                    (status, status, message_id),
                )
        if not rows:
            break
    db.close()


def run_baseline(url: str, events: int) -> Timed:
    started = time.perf_counter()
    workers = [
        multiprocessing.Process(target=baseline_worker, args=(url,))
        for _ in range(BASELINE_WORKERS)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.perf_counter() - started
    db = Database(url)
    done = delivered(db, "naive_messages")
    db.close()
    if done != events:
        raise RuntimeError(f"baseline: {done} of {events} delivered")
    return Timed(events / elapsed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--endpoints", type=int, default=4)
    parser.add_argument("--senders", type=int, default=8, help="sender environments")
    parser.add_argument(
        "--sender-threads",
        action="store_true",
        help="run the sender environments as threads of the runtime (default: processes)",
    )
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument(
        "--receiver-latency-ms",
        type=float,
        default=0.0,
        help="added to every answer, as a network would (default 0: answers at once)",
    )
    args = parser.parse_args()

    # The receiver gets its own process (and core) before any thread starts here.
    context = multiprocessing.get_context("fork")
    port_queue = context.Queue()
    stop = context.Event()
    receiver = context.Process(
        target=serve_receiver,
        args=(port_queue, stop, args.receiver_latency_ms / 1000),
        daemon=True,
    )
    receiver.start()
    receiver_url = port_queue.get(timeout=30)
    receiver_pid = receiver.pid
    assert receiver_pid is not None
    try:
        with server_dsn() as dsn:
            with fresh_database(dsn) as url:
                seed(url, args.endpoints, args.events, receiver_url, naive=True)
                baseline_per_s, cpu = measured(
                    "baseline",
                    url,
                    receiver_pid,
                    args.events,
                    lambda: run_baseline(url, args.events),
                )
            with fresh_database(dsn) as url:
                seed(url, args.endpoints, args.events, receiver_url)
                e2e_per_s, e2e_cpu = measured(
                    "e2e",
                    url,
                    receiver_pid,
                    args.events,
                    lambda: run_e2e(
                        url, args.events, args.senders, not args.sender_threads, args.timeout
                    ),
                )
                cpu |= e2e_cpu | lane_figures(url)
    finally:
        stop.set()
        receiver.join(10)
    result: dict[str, Any] = {
        "events": args.events,
        "senders": args.senders,
        "sender_processes": not args.sender_threads,
        "receiver_latency_ms": args.receiver_latency_ms,
        "cores": os.cpu_count(),
        **cpu,
    }
    if cpu:
        others_ms = cpu["e2e_machine_cpu_ms"] - cpu["e2e_own_cpu_ms"]
        cores = os.cpu_count() or 1
        result["ratio_ceiling"] = round(cores * 1000 / others_ms / baseline_per_s, 2)
    result |= {
        "e2e_per_s": round(e2e_per_s, 1),
        "baseline_per_s": round(baseline_per_s, 1),
        "ratio": round(e2e_per_s / baseline_per_s, 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
