"""Zero loss under faults: the runtime is SIGKILLed twice and PostgreSQL restarted once while
5,000 events flow to receivers that fail at random (5xx, hangs past the timeout, resets).

Afterwards every message is delivered or dead-lettered, none is left in flight, every delivered
message reached its receiver, and receivers saw under 1 % duplicates (the same ``webhook-id``
accepted twice: a kill between a receiver's answer and the record of it). Every complete request
carried a valid signature; a request cut short (a kill between its headers and its body) is
counted as incomplete, and those stay as rare as the kills make them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import pytest

from tests.e2e.conftest import count_where, message_states, progress_table, wait_until
from tests.support.secrets import secrets_keyring
from tests.support.webhooks import standard_verifier
from tidings import migrations
from tidings.config import Settings
from tidings.dal.connection import Database, connect
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import ANY_PORT, LOOPBACK_NETWORKS

EVENTS = 5000
ENDPOINTS = 4
REPOSITORY = Path(__file__).resolve().parents[2]
# Short enough that killed work returns quickly; retries plentiful enough that random
# failures rarely exhaust them.
FAULT_SETTINGS = {
    "TIDINGS_LEASE_S": "10",
    # A killed runtime's queue dies with it: its claimed rows come back when their lease ends.
    "TIDINGS_LEASE_QUEUE_ALLOWANCE_S": "1",
    "TIDINGS_HTTP_TIMEOUT_S": "0.5",
    "TIDINGS_BACKOFF_BASE_S": "0.2",
    "TIDINGS_BACKOFF_MAX_S": "2",
    "TIDINGS_MAX_ATTEMPTS": "10",
    "TIDINGS_CIRCUIT_COOLDOWN_S": "1",
    "TIDINGS_CIRCUIT_MAX_COOLDOWN_S": "2",
    "TIDINGS_CLAIM_IDLE_POLL_S": "0.2",
    "TIDINGS_CLAIM_STOP_BEFORE_TIMEOUT_S": "1",
}


class RestartablePostgres:
    """An embedded PostgreSQL of this test's own, so restarting it disturbs nothing else."""

    def __init__(self, folder: Path) -> None:
        import pgserver

        self.server = pgserver.get_server(folder, cleanup_mode="delete")
        self.dsn: str = self.server.get_uri()

    def restart(self) -> None:
        from pgserver._commands import pg_ctl

        pg_ctl(
            ["-w", "-m", "fast", "restart"],
            pgdata=self.server.pgdata,
            user=self.server.system_user,
            timeout=60,
        )

    def stop(self) -> None:
        # pgserver stops only the postmaster it started; after a restart that one is gone, so
        # the running one is stopped here before the folder is removed.
        from pgserver._commands import pg_ctl

        if self._running():
            pg_ctl(
                ["-w", "-m", "fast", "stop"],
                pgdata=self.server.pgdata,
                user=self.server.system_user,
                timeout=60,
            )
        self.server.cleanup()

    def _running(self) -> bool:
        from pgserver._commands import pg_ctl

        try:
            pg_ctl(["status"], pgdata=self.server.pgdata, user=self.server.system_user)
        except subprocess.CalledProcessError:
            return False  # pg_ctl status exits 3 when no server runs there
        return True


@pytest.fixture
def postgres() -> Iterator[RestartablePostgres]:
    server = RestartablePostgres(Path(tempfile.mkdtemp(prefix="tidings-e2e-pg-")))
    yield server
    server.stop()


class Runtime:
    """``tidings dev`` as a separate process, started and killed like a real one."""

    def __init__(self, dsn: str, workdir: Path) -> None:
        self.env = {
            **os.environ,
            **FAULT_SETTINGS,
            "DATABASE_URL": dsn,
            "PYTHONPATH": str(REPOSITORY / "layers" / "tidings"),
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
        self.env.pop("AWS_ENDPOINT_URL", None)
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    def start(self) -> None:
        self.starts += 1
        log = (self.workdir / f"runtime-{self.starts}.log").open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from tidings.cli import main; sys.exit(main())",
                "dev",
                "--no-api",
                "--data-dir",
                str(self.workdir),
                "--senders",
                # Few sends in flight at a kill: each unrecorded success becomes a duplicate.
                "2",
                "--claimer-slice",
                "5",
            ],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(30)

    def stop(self) -> int:
        """Stops the runtime as a person would (SIGTERM) once it is ready: before that, it has
        not yet taken the signal over, and the signal's default action would end it instead."""
        assert self.process is not None
        log = self.workdir / f"runtime-{self.starts}.log"
        deadline = time.monotonic() + 60
        while self.alive() and time.monotonic() < deadline:
            if b"tidings dev: ready" in log.read_bytes():
                break
            time.sleep(0.1)
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(90)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-3000:] for path in sorted(self.workdir.glob("*.log"))
        )


def _delivered(db: Database) -> int:
    try:
        return count_where(db, "m.status = 'delivered'")
    except psycopg2.OperationalError:
        db.close()
        return -1


@pytest.mark.slow
def test_no_message_is_lost_when_the_runtime_and_database_fail(
    postgres: RestartablePostgres, tmp_path: Path
) -> None:
    from tidings.delivery.attempt import webhook_id
    from tidings.logic.endpoints import create_endpoint

    conn = connect(Settings(database_url=postgres.dsn))
    migrations.migrate(conn)
    conn.close()
    settings = Settings.from_env(FAULT_SETTINGS, database_url=postgres.dsn).replace(
        allowed_networks=LOOPBACK_NETWORKS, endpoint_ports=ANY_PORT
    )
    receivers = Receivers((Kind.CHAOS,), verifier=standard_verifier, seed=21).start()
    db = Database(postgres.dsn)
    endpoint_ids: list[int] = []
    for n in range(ENDPOINTS):
        created = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=receivers.url(Kind.CHAOS) + f"?n={n}",
            event_types=["chaos"],
            settings=settings,
        )
        receivers.register_secret(Kind.CHAOS, created.secret)
        endpoint_ids.append(created.id)
    per_endpoint = EVENTS // ENDPOINTS
    events = [DemoEvent("chaos", f"chaos-{n}", {"n": n}) for n in range(per_endpoint)]
    for start in range(0, len(events), 250):
        batch = events[start : start + 250]
        db.run(lambda cur, batch=batch: enqueue_events(cur, batch), transaction=True)
    assert count_where(db, "true") == per_endpoint * ENDPOINTS

    runtime = Runtime(postgres.dsn, tmp_path)
    runtime.start()
    try:
        total = per_endpoint * ENDPOINTS
        wait_until(lambda: _delivered(db) >= total * 0.2, 120, "a fifth delivered")
        runtime.kill()
        runtime.start()
        wait_until(lambda: _delivered(db) >= total * 0.4, 120, "two fifths delivered")
        postgres.restart()
        wait_until(lambda: _delivered(db) >= total * 0.6, 120, "three fifths delivered")
        runtime.kill()
        runtime.start()
        wait_until(
            lambda: count_where(db, "m.status NOT IN ('delivered', 'dead_letter')") == 0,
            180,
            "every message to be delivered or dead-lettered",
            lambda: progress_table(db),
        )
        assert runtime.alive(), runtime.log()
        assert runtime.stop() == 0, runtime.log()
    finally:
        if runtime.alive():
            runtime.kill()
        receivers.stop()

    states = message_states(db)
    db.close()
    assert len(states) == total
    statuses = {row["status"] for row in states}
    assert statuses <= {"delivered", "dead_letter"}, statuses
    tally = receivers.snapshot()[Kind.CHAOS]
    delivered = {webhook_id(row["id"]) for row in states if row["status"] == "delivered"}
    missing = delivered - set(tally.accepted)
    assert not missing, f"{len(missing)} delivered messages never reached the receiver"
    assert tally.duplicates < total * 0.01, tally.duplicates
    complete = tally.requests - tally.incomplete
    assert tally.bad_signatures == 0, f"{tally.bad_signatures} of {complete} complete requests"
    # Only requests in flight at a kill (or cut off by their deadline) can arrive incomplete.
    assert tally.incomplete < total * 0.01, tally.incomplete
    # The receivers did fail: the run went through resets, hangs and 5xx answers.
    assert sum(count for status, count in tally.statuses.items() if status >= 500) > 0
