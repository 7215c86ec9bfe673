"""The scheduled dead-letter report claims what it reports: every dead letter is reported once
(at least once when a publish or a commit fails), whatever the timing of the runs and of the
transactions that make dead letters. Concurrency is checked with several real connections."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
import pytest

from tests.integration.delivery.delivery_harness import make_pipeline
from tests.integration.maintenance.scheduled_support import make_messages
from tests.support.receivers import Receiver, running_receiver
from tests.support.seed import make_endpoint, seed_messages
from tidings.cli.dead_letters import build as build_view
from tidings.cli.dead_letters import render
from tidings.config import Settings
from tidings.dal import endpoints as endpoints_dal
from tidings.dal import health as maintenance
from tidings.dal.connection import Database
from tidings.local.notifier import MemoryNotifier
from tidings.logic.replay import replay_dead_letters
from tidings.maintenance.dead_letter_report import JSON_MARKER, ReportRun, run_report

SETTINGS = Settings()


def dead_letters(db: Database, endpoint: int, count: int, at: datetime) -> list[int]:
    with db.cursor() as cur:
        return make_messages(
            cur,
            endpoint,
            count,
            status="dead_letter",
            dead_lettered_at=at,
            attempts=5,
            last_error="http_500",
            last_status_code=500,
        )


def endpoints(n: int, db: Database) -> list[int]:
    with db.cursor() as cur:
        return [make_endpoint(cur, f"https://r{i}.example/hook") for i in range(n)]


def reported(run: ReportRun) -> dict[int, int]:
    """Dead letters per endpoint in a run's report."""
    return {e.stats.endpoint_id: e.stats.dead_letters for e in run.report.endpoints}


def unreported_ids(db: Database) -> list[int]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT id FROM tidings.messages"
            " WHERE status = 'dead_letter' AND dead_letter_reported_at IS NULL ORDER BY id"
        )
        return [row[0] for row in cur.fetchall()]


def published_json(notifier: MemoryNotifier) -> list[dict[str, Any]]:
    return [
        json.loads(alert.message.partition(f"\n\n{JSON_MARKER}\n")[2])
        for alert in notifier.published
    ]


class FailingNotifier:
    def __init__(self) -> None:
        self.calls = 0

    def publish(
        self, subject: str, message: str, attributes: Mapping[str, str] | None = None
    ) -> str:
        self.calls += 1
        raise RuntimeError("SNS is unreachable")


class HeldNotifier(MemoryNotifier):
    """Publishes once ``release`` is set, telling ``entered`` when a publish is waiting."""

    def __init__(self) -> None:
        super().__init__()
        self.entered = threading.Event()
        self.release = threading.Event()

    def publish(
        self, subject: str, message: str, attributes: Mapping[str, str] | None = None
    ) -> str:
        self.entered.set()
        assert self.release.wait(10), "the test never released the publish"
        return super().publish(subject, message, attributes)


def test_each_dead_letter_is_reported_once_across_consecutive_runs(db: Database) -> None:
    a, b = endpoints(2, db)
    now = datetime.now(UTC)
    dead_letters(db, a, 3, now - timedelta(minutes=30))
    dead_letters(db, b, 1, now - timedelta(days=3))  # older than any window: still reported
    notifier = MemoryNotifier()

    first = run_report(db, notifier, SETTINGS)
    assert reported(first) == {a: 3, b: 1}
    assert (first.report.since, first.report.until) == (
        now - timedelta(days=3),
        now - timedelta(minutes=30),
    )
    assert first.report.waiting == 0 and first.message_id is not None

    dead_letters(db, b, 2, now - timedelta(minutes=1))
    second = run_report(db, notifier, SETTINGS)
    assert reported(second) == {b: 2}

    third = run_report(db, notifier, SETTINGS)
    assert third.report.is_empty and third.message_id is None
    assert [m["total"] for m in published_json(notifier)] == [4, 2]
    assert unreported_ids(db) == []


def test_a_dead_letter_committed_after_a_run_started_is_reported_by_the_next(
    database_url: str, db: Database
) -> None:
    early, late = endpoints(2, db)
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoints SET enabled = false WHERE id = %s", (late,))
        seed_messages(cur, late, 1)
    dead_letters(db, early, 1, datetime.now(UTC) - timedelta(minutes=5))
    # Another session dead-letters a message in a transaction that stays open across the run:
    # its dead_lettered_at is that transaction's now(), before the run starts.
    other = psycopg2.connect(database_url)
    try:
        with other.cursor() as cur:
            assert maintenance.dead_letter_unreachable_messages(cur, batch_size=10) == 1
            cur.execute("SELECT now()")
            row = cur.fetchone()
            assert row is not None
            stamped_at = row[0]
        time.sleep(0.05)
        run_started = datetime.now(UTC)
        notifier = MemoryNotifier()
        first = run_report(db, notifier, SETTINGS)
        assert stamped_at < run_started
        assert reported(first) == {early: 1}
        other.commit()
    finally:
        other.close()

    second = run_report(db, notifier, SETTINGS)
    assert reported(second) == {late: 1}
    assert second.report.since == stamped_at < run_started
    assert second.report.endpoints[0].stats.top_error == "endpoint disabled: no reason given"
    assert run_report(db, notifier, SETTINGS).message_id is None


def test_a_failed_publish_reports_nothing_and_the_next_run_reports_it_all(db: Database) -> None:
    (endpoint,) = endpoints(1, db)
    ids = dead_letters(db, endpoint, 4, datetime.now(UTC) - timedelta(minutes=10))
    failing = FailingNotifier()

    with pytest.raises(RuntimeError, match="SNS is unreachable"):
        run_report(db, failing, SETTINGS)

    assert failing.calls == 1
    assert unreported_ids(db) == ids
    notifier = MemoryNotifier()
    assert reported(run_report(db, notifier, SETTINGS)) == {endpoint: 4}
    assert unreported_ids(db) == []


def test_a_report_whose_commit_fails_is_reported_again(
    db: Database, postgres_admin_dsn: str
) -> None:
    (endpoint,) = endpoints(1, db)
    dead_letters(db, endpoint, 2, datetime.now(UTC) - timedelta(minutes=10))
    pid = db.connection.get_backend_pid()

    class PublishThenLoseTheConnection(MemoryNotifier):
        def publish(
            self, subject: str, message: str, attributes: Mapping[str, str] | None = None
        ) -> str:
            message_id = super().publish(subject, message, attributes)
            admin = psycopg2.connect(postgres_admin_dsn)
            admin.autocommit = True
            with admin.cursor() as cur:
                cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
            admin.close()
            return message_id

    notifier = PublishThenLoseTheConnection()
    # The outcome of the commit is unknown, so the run is not repeated; the error surfaces.
    with pytest.raises((psycopg2.OperationalError, psycopg2.InterfaceError)):
        run_report(db, notifier, SETTINGS)
    assert len(notifier.published) == 1

    # The claim was not committed: the next run reports the same dead letters (a duplicate,
    # never a gap).
    again = MemoryNotifier()
    assert reported(run_report(db, again, SETTINGS)) == {endpoint: 2}
    assert run_report(db, again, SETTINGS).message_id is None


@pytest.mark.parametrize("first_run_max_rows", [100, 4])
def test_overlapping_runs_never_report_the_same_dead_letter(
    database_url: str, first_run_max_rows: int
) -> None:
    setup = Database(database_url)
    # One dead letter per endpoint, a minute apart, so each report names exactly its rows.
    each = endpoints(6, setup)
    start = datetime.now(UTC) - timedelta(hours=1)
    for n, endpoint in enumerate(each):
        dead_letters(setup, endpoint, 1, start + timedelta(minutes=n))
    first_db, second_db = Database(database_url), Database(database_url)
    held = HeldNotifier()
    outcome: list[ReportRun] = []
    errors: list[BaseException] = []
    first_settings = SETTINGS.replace(dead_letter_report_max_rows=first_run_max_rows)

    def first_run() -> None:
        try:
            outcome.append(run_report(first_db, held, first_settings))
        except BaseException as exc:  # re-raised by the assertion below
            errors.append(exc)

    thread = threading.Thread(target=first_run)
    thread.start()
    try:
        # The first run has claimed and is publishing, its transaction open.
        assert held.entered.wait(10)
        second = run_report(second_db, MemoryNotifier(), SETTINGS)
        assert thread.is_alive()
        # Only the second run's claim is committed so far.
        assert len(unreported_ids(setup)) == len(each) - len(reported(second))
    finally:
        held.release.set()
        thread.join(15)
    try:
        assert not errors, errors
        (first,) = outcome
        taken = min(first_run_max_rows, len(each))
        assert set(reported(first)) == set(each[:taken])
        assert set(reported(second)) == set(each[taken:])
        assert (second.message_id is None) == (taken == len(each))
        assert len(held.published) == 1
        assert unreported_ids(setup) == []
        assert run_report(setup, MemoryNotifier(), SETTINGS).message_id is None
    finally:
        for database in (setup, first_db, second_db):
            database.close()


def test_a_large_backlog_is_reported_oldest_first_over_several_runs(db: Database) -> None:
    each = endpoints(5, db)
    start = datetime.now(UTC) - timedelta(days=1)
    for n, endpoint in enumerate(each):
        dead_letters(db, endpoint, 1, start + timedelta(minutes=n))
    settings = SETTINGS.replace(dead_letter_report_max_rows=2)
    notifier = MemoryNotifier()

    runs = [run_report(db, notifier, settings) for _ in range(4)]

    assert [set(reported(r)) for r in runs] == [set(each[0:2]), set(each[2:4]), {each[4]}, set()]
    assert [r.report.waiting for r in runs] == [3, 1, 0, 0]
    assert "3 more dead letter(s) wait for the next report." in notifier.published[0].message
    assert [m["waiting"] for m in published_json(notifier)] == [3, 1, 0]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


def test_a_replayed_message_that_dies_again_is_reported_again(
    db: Database, receiver: Receiver
) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, receiver.url("status/400"))
        seed_messages(cur, endpoint, 1)
    pipeline = make_pipeline(db)
    assert pipeline.claim_and_deliver().dead_lettered == 1
    notifier = MemoryNotifier()
    assert reported(run_report(db, notifier, SETTINGS)) == {endpoint: 1}

    assert replay_dead_letters(db, endpoint_id=endpoint).requeued == 1
    with db.cursor() as cur:
        cur.execute("SELECT status::text, dead_letter_reported_at FROM tidings.messages")
        assert cur.fetchall() == [("pending", None)]
    assert run_report(db, notifier, SETTINGS).message_id is None
    assert pipeline.claim_and_deliver().dead_lettered == 1

    again = run_report(db, notifier, SETTINGS)
    assert reported(again) == {endpoint: 1}
    assert again.report.endpoints[0].stats.top_error == "http_400"
    assert len(notifier.published) == 2


def stale_mark(db: Database, endpoint: int) -> None:
    """A report mark on a row that is not a dead letter: no path leaves one, so this checks that
    each dead-lettering statement clears it rather than relying on that."""
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET dead_letter_reported_at = now() - interval '1 day'"
            " WHERE endpoint_id = %s",
            (endpoint,),
        )


@pytest.mark.parametrize("path", ["delivery", "disabled endpoint", "deleted endpoint"])
def test_every_statement_that_makes_a_dead_letter_leaves_it_unreported(
    db: Database, receiver: Receiver, path: str
) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, receiver.url("status/400"))
        seed_messages(cur, endpoint, 1)
    stale_mark(db, endpoint)
    if path == "delivery":
        assert make_pipeline(db).claim_and_deliver().dead_lettered == 1
    elif path == "disabled endpoint":
        with db.cursor() as cur:
            cur.execute("UPDATE tidings.endpoints SET enabled = false WHERE id = %s", (endpoint,))
            assert maintenance.dead_letter_unreachable_messages(cur, batch_size=10) == 1
    else:
        with db.cursor() as cur:
            assert endpoints_dal.soft_delete_endpoint(cur, 1, endpoint)
    assert len(unreported_ids(db)) == 1
    assert reported(run_report(db, MemoryNotifier(), SETTINGS)) == {endpoint: 1}


def test_the_operator_view_marks_nothing(db: Database) -> None:
    (endpoint,) = endpoints(1, db)
    ids = dead_letters(db, endpoint, 3, datetime.now(UTC) - timedelta(minutes=5))

    view = build_view(db, SETTINGS)
    assert view.total == 3 and "3 dead letter(s)" in render(view)
    assert build_view(db, SETTINGS).total == 3

    assert unreported_ids(db) == ids
    assert reported(run_report(db, MemoryNotifier(), SETTINGS)) == {endpoint: 3}
    # The view still shows what was reported: it is a window, not a queue.
    assert build_view(db, SETTINGS).total == 3
