"""``tidings dev --sender-processes``: the real handlers in sender processes of their own, fed by
the queue server; every process the runtime started ends with it, killed or stopped, and a
runtime started again delivers what the killed one left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.conftest import count_where, progress_table, wait_until
from tests.support.processes import running
from tests.support.secrets import secrets_keyring
from tests.support.webhooks import standard_verifier
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.delivery.attempt import webhook_id
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import ANY_PORT, LOOPBACK_NETWORKS

REPOSITORY = Path(__file__).resolve().parents[2]
EVENTS = 600
FAST_ENVIRONMENTS = 2
SLOW_ENVIRONMENTS = 4  # the runtime's default for the slow lane
QUEUE_SERVER = 1
# A killed runtime's claimed rows come back when their leases end: soon, here.
SETTINGS = {
    "TIDINGS_LEASE_S": "5",
    "TIDINGS_LEASE_QUEUE_ALLOWANCE_S": "1",
    "TIDINGS_CLAIM_IDLE_POLL_S": "0.2",
    "TIDINGS_CLAIM_STOP_BEFORE_TIMEOUT_S": "1",
}


def _children(pid: int) -> set[int]:
    """The running processes ``pid`` started as sender environments or queue server (from
    /proc; multiprocessing's resource tracker, which it starts as well, is not one of them)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        # Fields 3 and 4 of /proc/<pid>/stat: the state, the parent's pid.
        if int(fields[1]) == pid and fields[0] != "Z" and b"spawn_main" in command:
            found.add(int(entry.name))
    return found


class DevProcess:
    def __init__(self, database_url: str, workdir: Path) -> None:
        self.env = {
            **os.environ,
            **SETTINGS,
            "DATABASE_URL": database_url,
            "PYTHONPATH": str(REPOSITORY / "layers" / "tidings"),
            "POWERTOOLS_LOG_LEVEL": "WARNING",
        }
        self.env.pop("AWS_ENDPOINT_URL", None)
        self.workdir = workdir
        self.starts = 0
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> subprocess.Popen[bytes]:
        self.starts += 1
        out = (self.workdir / f"out-{self.starts}.log").open("wb")
        err = (self.workdir / f"err-{self.starts}.log").open("wb")
        # A session of its own, so that the test can signal its whole process group at once, as
        # a closed terminal or a service manager does.
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from tidings.cli import main; sys.exit(main())",
                "dev",
                "--no-api",
                "--sender-processes",
                "--senders",
                str(FAST_ENVIRONMENTS),
                "--claimer-slice",
                "5",
                "--data-dir",
                str(self.workdir / "data"),
            ],
            env=self.env,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        wait_until(
            lambda: b"tidings dev: ready" in (self.workdir / f"out-{self.starts}.log").read_bytes(),
            120,
            "the ready line",
            self.log,
        )
        return self.process

    def log(self) -> str:
        return "\n".join(
            path.read_text(errors="replace")[-3000:] for path in sorted(self.workdir.glob("*.log"))
        )


def _delivered(db: Database) -> int:
    return count_where(db, "m.status = 'delivered'")


@pytest.mark.slow
def test_sender_processes_end_with_the_runtime_and_nothing_is_lost(
    database_url: str, tmp_path: Path
) -> None:
    from tidings.logic.endpoints import create_endpoint

    receivers = Receivers((Kind.HEALTHY,), verifier=standard_verifier, latency_s=0.02).start()
    settings = Settings.from_env(SETTINGS, database_url=database_url).replace(
        allowed_networks=LOOPBACK_NETWORKS, endpoint_ports=ANY_PORT
    )
    db = Database(database_url)
    created = create_endpoint(
        db,
        keyring=secrets_keyring(),
        url=receivers.url(Kind.HEALTHY),
        event_types=["order.paid"],
        settings=settings,
    )
    receivers.register_secret(Kind.HEALTHY, created.secret)
    events = [DemoEvent("order.paid", f"order-{n}", {"n": n}) for n in range(EVENTS)]
    db.run(lambda cur: enqueue_events(cur, events), transaction=True)
    dev = DevProcess(database_url, tmp_path)
    try:
        first = dev.start()
        started = _children(first.pid)
        # Every environment of both lanes, and the queue server.
        assert len(started) == FAST_ENVIRONMENTS + SLOW_ENVIRONMENTS + QUEUE_SERVER, dev.log()
        wait_until(lambda: _delivered(db) >= EVENTS // 5, 120, "a fifth delivered", dev.log)
        first.send_signal(signal.SIGKILL)
        first.wait(30)
        # Nothing of its own shutdown ran; its processes end anyway, and nothing else holds the
        # rows they leased.
        wait_until(
            lambda: not any(running(pid) for pid in started),
            15,
            "the killed runtime's processes to end",
            lambda: str(sorted(pid for pid in started if running(pid))),
        )
        second = dev.start()
        again = _children(second.pid)
        wait_until(
            lambda: count_where(db, "m.status <> 'delivered'") == 0,
            180,
            "every message to be delivered",
            lambda: progress_table(db) + dev.log(),
        )
        assert len(again) == FAST_ENVIRONMENTS + SLOW_ENVIRONMENTS + QUEUE_SERVER, dev.log()
        # SIGTERM to the whole group: the children leave stopping to the runtime, which drains
        # them and ends cleanly.
        os.killpg(second.pid, signal.SIGTERM)
        assert second.wait(90) == 0, dev.log()
        assert "did not finish draining" not in dev.log()
        wait_until(
            lambda: not any(running(pid) for pid in again),
            15,
            "the stopped runtime's processes to end",
        )
    finally:
        if dev.process is not None and dev.process.poll() is None:
            dev.process.kill()
        receivers.stop()
    tally = receivers.snapshot()[Kind.HEALTHY]
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages")
        delivered = {webhook_id(row[0]) for row in cur.fetchall()}
    db.close()
    assert len(delivered) == EVENTS
    assert not delivered - set(tally.accepted), "delivered messages never reached the receiver"
    assert tally.bad_signatures == 0
    # Only answers not yet written at the kill can arrive twice: at most one record statement's
    # rows in each environment.
    assert tally.duplicates <= FAST_ENVIRONMENTS * settings.sender_record_rows, tally.duplicates
