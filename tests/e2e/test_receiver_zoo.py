"""The receiver zoo through ``tidings dev``: no receiver can break delivery for another (issue 11).

A healthy receiver and every hostile kind of the zoo (unusable Retry-After in every form, a
redirect to a private address, 401 / 400 / 413, a body of 50 MB, a body dripped a byte a second,
1 MB of response headers, a reset after the status line, a server that never answers, garbage
instead of HTTP, TLS with a self-signed certificate, a name that does not resolve) get their
endpoints; small claim batches make their messages share sender batches. Afterwards the healthy
receiver got every message exactly once, every other message is delivered or dead-lettered with
the error class its receiver earned, nothing is left in flight, no sender invocation failed, and
the dev process's memory grew by a bounded amount (responses are read up to a limit, never whole).
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import message_states, progress_table, wait_until
from tests.support.secrets import secrets_keyring
from tests.support.seed import make_endpoint
from tests.support.webhooks import standard_verifier
from tidings.dal.connection import Database, fetch_dicts
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.local.receivers import HUGE_BODY_BYTES, ZOO, Kind, Receivers
from tidings.local.runtime import dev_settings

REPOSITORY = Path(__file__).resolve().parents[2]
MAX_ATTEMPTS = 3
HEALTHY_MESSAGES = 200
ZOO_MESSAGES = 4
SETTINGS = {
    "TIDINGS_HTTP_TIMEOUT_S": "2",
    "TIDINGS_MAX_ATTEMPTS": str(MAX_ATTEMPTS),
    "TIDINGS_BACKOFF_BASE_S": "0.2",
    "TIDINGS_BACKOFF_MAX_S": "1",
    "TIDINGS_CIRCUIT_COOLDOWN_S": "0.5",
    "TIDINGS_CIRCUIT_MAX_COOLDOWN_S": "1",
    "TIDINGS_CLAIM_IDLE_POLL_S": "0.1",
    "TIDINGS_CLAIM_STOP_BEFORE_TIMEOUT_S": "1",
    # A couple of rows per endpoint per claim: every sender batch holds several endpoints.
    "TIDINGS_CLAIM_BATCH_SIZE": "20",
    "TIDINGS_LEASE_S": "20",
}
# What each receiver's messages come to: (status, attempts, error class of every attempt).
RETRIED = MAX_ATTEMPTS
EXPECTED: dict[Kind, tuple[str, int, set[str | None]]] = {
    Kind.HEALTHY: ("delivered", 1, {None}),
    Kind.UNUSABLE_RETRY_AFTER: ("dead_letter", RETRIED, {"http_429", "http_503"}),
    Kind.REDIRECT_PRIVATE: ("dead_letter", 1, {"http_307"}),
    Kind.UNAUTHORIZED: ("dead_letter", 1, {"http_401"}),
    Kind.BAD_REQUEST: ("dead_letter", 1, {"http_400"}),
    Kind.TOO_LARGE: ("dead_letter", 1, {"http_413"}),
    # The status line decides; the body is read up to the excerpt and a little more.
    Kind.HUGE_BODY: ("delivered", 1, {None}),
    Kind.DRIP: ("delivered", 1, {None}),
    Kind.HUGE_HEADERS: ("dead_letter", RETRIED, {"invalid_response"}),
    Kind.RESET_AFTER_STATUS: ("dead_letter", RETRIED, {"connection_reset"}),
    Kind.SILENT: ("dead_letter", RETRIED, {"timeout"}),
    Kind.GARBAGE: ("dead_letter", RETRIED, {"invalid_response"}),
    Kind.SELF_SIGNED_TLS: ("dead_letter", RETRIED, {"tls"}),
    Kind.UNRESOLVABLE: ("dead_letter", RETRIED, {"dns"}),
}
# How much the dev process's peak resident memory may exceed its size once ready. Four bodies
# of 50 MB are offered; reading one whole would take the peak past this on its own.
MEMORY_BOUND_MB = 40
# What may leave the huge-body receiver per answer when the sender reads 1 KiB of excerpt and
# 64 KiB more: whatever the two sockets' buffers hold on loopback (a few MB at most).
UNREAD_BODY_BOUND_BYTES = 16 * 1024 * 1024


def _rss_mb(pid: int, field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (the peak) of a process, in MiB."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    assert match is not None, status
    return int(match[1]) / 1024


def _attempt_classes(db: Database) -> dict[int, list[str | None]]:
    def read(cur: Any) -> list[dict[str, Any]]:
        cur.execute(
            "SELECT message_id, error_class, response_excerpt FROM tidings.attempts"
            " ORDER BY message_id, attempt_number"
        )
        return fetch_dicts(cur)

    classes: dict[int, list[str | None]] = {}
    for row in db.run(read):
        classes.setdefault(row["message_id"], []).append(row["error_class"])
    return classes


def _excerpt_lengths(db: Database, endpoint_id: int) -> set[int]:
    def read(cur: Any) -> list[tuple[int]]:
        cur.execute(
            "SELECT DISTINCT length(response_excerpt) FROM tidings.attempts WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        return list(cur.fetchall())

    return {row[0] for row in db.run(read)}


def _create_endpoints(db: Database, receivers: Receivers, database_url: str) -> dict[int, Kind]:
    from tidings.logic.endpoints import create_endpoint

    # The dev runtime's own rules: loopback targets, any port.
    settings = dev_settings({}, database_url=database_url)
    kind_of: dict[int, Kind] = {}
    for kind in EXPECTED:
        if kind is Kind.UNRESOLVABLE:
            # The API refuses a host that does not resolve; a name can stop resolving later.
            with db.cursor() as cur:
                endpoint_id = make_endpoint(cur, receivers.url(kind), event_types=[f"zoo.{kind}"])
        else:
            created = create_endpoint(
                db,
                keyring=secrets_keyring(),
                url=receivers.url(kind),
                event_types=[f"zoo.{kind}"],
                settings=settings,
            )
            receivers.register_secret(kind, created.secret)
            endpoint_id = created.id
        kind_of[endpoint_id] = kind
    return kind_of


def _enqueue(db: Database) -> int:
    events = [
        DemoEvent(f"zoo.{kind}", f"{kind}-{n}", {"n": n, "kind": str(kind)})
        for kind in EXPECTED
        for n in range(HEALTHY_MESSAGES if kind is Kind.HEALTHY else ZOO_MESSAGES)
    ]
    random.Random(11).shuffle(events)
    return int(db.run(lambda cur: enqueue_events(cur, events), transaction=True))


@pytest.mark.slow
def test_no_receiver_can_break_delivery_for_another(database_url: str, tmp_path: Path) -> None:
    from tidings.delivery.attempt import webhook_id

    assert set(EXPECTED) == {Kind.HEALTHY, *ZOO}
    receivers = Receivers((Kind.HEALTHY, *ZOO), verifier=standard_verifier, seed=5).start()
    db = Database(database_url)
    kind_of = _create_endpoints(db, receivers, database_url)
    total = _enqueue(db)
    assert total == HEALTHY_MESSAGES + ZOO_MESSAGES * len(ZOO)

    env = {
        **os.environ,
        **SETTINGS,
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(REPOSITORY / "layers" / "tidings"),
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    out_path, err_path = tmp_path / "out.log", tmp_path / "err.log"
    started = time.monotonic()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from tidings.cli import main; sys.exit(main())",
                "dev",
                "--no-api",
                "--data-dir",
                str(tmp_path / "data"),
                "--senders",
                "4",
                "--claimer-slice",
                "5",
            ],
            env=env,
            stdout=out,
            stderr=err,
        )
    try:
        wait_until(
            lambda: "tidings dev: ready" in out_path.read_text(),
            60,
            "the ready line",
            lambda: err_path.read_text()[-3000:],
        )
        baseline_mb = _rss_mb(process.pid, "VmRSS")
        wait_until(
            lambda: db.run(_unsettled) == 0,
            120,
            "every message to be delivered or dead-lettered",
            lambda: progress_table(db) + "\n" + err_path.read_text()[-3000:],
        )
        settled_s = time.monotonic() - started
        peak_mb = _rss_mb(process.pid, "VmHWM")
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, err_path.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
        receivers.stop()

    log = err_path.read_text() + out_path.read_text()
    states = message_states(db)
    classes = _attempt_classes(db)
    tallies = receivers.snapshot()
    print(
        f"zoo: {total} messages settled in {settled_s:.1f} s; dev process RSS {baseline_mb:.0f} MiB"
        f" when ready, peak {peak_mb:.0f} MiB (+{peak_mb - baseline_mb:.1f} MiB); huge bodies"
        f" sent before the sender stopped reading: {receivers.bodies_sent.get(Kind.HUGE_BODY)}"
    )

    # Nothing in flight, nothing waiting: every message ended.
    assert len(states) == total
    assert {row["status"] for row in states} <= {"delivered", "dead_letter"}
    # No batch was failed: every sender invocation ended normally, nothing was an internal error.
    assert "sender invocation failed" not in log, log[-3000:]
    assert "internal_error" not in log, log[-3000:]
    outcomes: dict[Kind, Counter[tuple[str, int]]] = {kind: Counter() for kind in EXPECTED}
    errors_seen: dict[Kind, set[str | None]] = {kind: set() for kind in EXPECTED}
    for row in states:
        kind = kind_of[row["endpoint_id"]]
        outcomes[kind][(row["status"], row["attempts"])] += 1
        errors_seen[kind].update(classes[row["id"]])
    for kind, (status, attempts, errors) in EXPECTED.items():
        count = HEALTHY_MESSAGES if kind is Kind.HEALTHY else ZOO_MESSAGES
        assert outcomes[kind] == {(status, attempts): count}, (kind, outcomes[kind])
        assert errors_seen[kind] <= errors, (kind, errors_seen[kind])
    dead = [row for row in states if row["status"] == "dead_letter"]
    assert all(classes[row["id"]][-1] is not None for row in dead)

    # The healthy receiver got every one of its messages exactly once, each signed.
    healthy = tallies[Kind.HEALTHY]
    healthy_ids = {
        webhook_id(row["id"]) for row in states if kind_of[row["endpoint_id"]] is Kind.HEALTHY
    }
    assert set(healthy.seen) == healthy_ids
    assert set(healthy.seen.values()) == {1}
    assert healthy.requests == HEALTHY_MESSAGES
    assert healthy.bad_signatures == 0 and healthy.unsigned == 0

    # The redirect was not followed; the huge body was cut to the excerpt.
    assert receivers.strays == {}
    huge_body_endpoint = next(e for e, k in kind_of.items() if k is Kind.HUGE_BODY)
    assert _excerpt_lengths(db, huge_body_endpoint) == {1024}
    assert tallies[Kind.HUGE_BODY].requests == ZOO_MESSAGES
    # The sender stopped reading each 50 MB body early: what left the receiver is what the
    # sockets' buffers took beyond the sender's excerpt and drain limit.
    sent = receivers.bodies_sent[Kind.HUGE_BODY]
    assert len(sent) == ZOO_MESSAGES
    assert max(sent) < UNREAD_BODY_BOUND_BYTES < HUGE_BODY_BYTES, sent
    assert HUGE_BODY_BYTES > MEMORY_BOUND_MB * 1024 * 1024

    # Memory: the peak stayed within a bound no whole 50 MB response fits in.
    assert peak_mb - baseline_mb < MEMORY_BOUND_MB, (baseline_mb, peak_mb)
    db.close()


def _unsettled(cur: Any) -> int:
    cur.execute(
        "SELECT count(*) FROM tidings.messages WHERE status NOT IN ('delivered', 'dead_letter')"
    )
    row = cur.fetchone()
    return int(row[0])
