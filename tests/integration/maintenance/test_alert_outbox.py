"""Alerts are never lost: a monitor killed between claiming an alert and publishing it leaves the
notification in the outbox, and a later run publishes it, once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.support.seed import make_endpoint
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.notifier import MemoryNotifier
from tidings.maintenance.alerts import PUBLISH_CLAIM_S
from tidings.maintenance.health_monitor import run_monitor

REPOSITORY = Path(__file__).resolve().parents[3]

# A monitor run whose publish step never returns: it says so, then waits to be killed.
DYING_MONITOR = """
import sys, time
from datetime import datetime
from pathlib import Path

import pytest
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.maintenance.health_monitor import run_monitor

class Stuck:
    def publish(self, subject, message, attributes=None):
        Path(sys.argv[2]).write_text(subject)
        time.sleep(120)

run_monitor(Database(sys.argv[1]), Stuck(), Settings(), datetime.fromisoformat(sys.argv[3]))
"""


def outbox(db: Database) -> list[str]:
    with db.cursor() as cur:
        cur.execute("SELECT alert_key FROM tidings.alert_outbox ORDER BY id")
        return [row[0] for row in cur.fetchall()]


def firing(db: Database) -> list[str]:
    with db.cursor() as cur:
        cur.execute("SELECT alert_key FROM tidings.alerts WHERE firing ORDER BY alert_key")
        return [row[0] for row in cur.fetchall()]


def test_an_alert_whose_publish_was_killed_is_published_by_a_later_run(
    database_url: str, db: Database, tmp_path: Path
) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        cur.execute("UPDATE tidings.endpoint_health SET state = 'open', opened_at = %s", (now,))
    key = f"circuit_open:{endpoint}"
    marker = tmp_path / "publishing"
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY / "layers" / "tidings")}
    env["POWERTOOLS_LOG_LEVEL"] = "WARNING"
    child = subprocess.Popen(
        [sys.executable, "-c", DYING_MONITOR, database_url, str(marker), now.isoformat()],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert child.poll() is None, child.stderr.read() if child.stderr else b""
            assert time.monotonic() < deadline, "the monitor never reached its publish step"
            time.sleep(0.05)
        # The function dies in the middle of publishing (a timeout, an instance lost).
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(30)
    assert marker.read_text() == f"[Tidings] ALERT circuit open for endpoint {endpoint}"

    # The alert is claimed (marked firing), so no run would fire it again; its notification
    # waits in the outbox, held by the dead run.
    assert firing(db) == [key]
    assert outbox(db) == [key]

    # An overlapping run, while the dead one's hold lasts, leaves it alone (it might still be
    # publishing it).
    notifier = MemoryNotifier()
    overlapping = run_monitor(db, notifier, Settings(), now + timedelta(seconds=10))
    assert (overlapping.fired, overlapping.caught_up, notifier.published) == ((), (), [])

    # The next run publishes it, once.
    later = run_monitor(db, notifier, Settings(), now + timedelta(seconds=PUBLISH_CLAIM_S + 240))
    assert later.caught_up == (key,)
    assert [a.subject for a in notifier.published] == [
        f"[Tidings] ALERT circuit open for endpoint {endpoint}"
    ]
    assert outbox(db) == []
    again = run_monitor(db, notifier, Settings(), now + timedelta(minutes=10))
    assert (again.fired, again.caught_up) == ((), ())
    assert len(notifier.published) == 1


class Dies(BaseException):
    """What ends a function abruptly: not an error it could catch and handle."""


class DyingNotifier:
    def publish(self, subject: str, message: str, attributes: object = None) -> str:
        raise Dies


def test_an_alert_goes_out_before_its_resolution_when_both_were_left(db: Database) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        cur.execute("UPDATE tidings.endpoint_health SET state = 'open', opened_at = %s", (now,))
    with pytest.raises(Dies):
        run_monitor(db, DyingNotifier(), Settings(), now)
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoint_health SET state = 'closed', opened_at = NULL")
    # The circuit closed before the dead run's hold ran out: the resolution is claimed, and
    # held by this run, which dies too.
    with pytest.raises(Dies):
        run_monitor(db, DyingNotifier(), Settings(), now + timedelta(seconds=5))
    assert outbox(db) == [f"circuit_open:{endpoint}"] * 2

    notifier = MemoryNotifier()
    run_monitor(db, notifier, Settings(), now + timedelta(minutes=5))
    assert [a.subject for a in notifier.published] == [
        f"[Tidings] ALERT circuit open for endpoint {endpoint}",
        f"[Tidings] RESOLVED circuit_open:{endpoint}",
    ]
    assert outbox(db) == []
    assert firing(db) == []
