"""The health summary and the monitor's alerts: fired once, never repeated, resolved once."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from moto import mock_aws

from tests.integration.maintenance.scheduled_support import (
    LambdaContext,
    SnsInbox,
    aws_test_environment,
    insert_attempts,
    load_handler,
    make_messages,
)
from tests.support.seed import make_endpoint
from tidings import wiring
from tidings.config import Settings
from tidings.dal import alerts as reports
from tidings.dal.connection import Database
from tidings.maintenance.health import health_summary
from tidings.maintenance.health_monitor import run_monitor
from tidings.notify import SnsNotifier

SETTINGS = Settings()


@pytest.fixture
def inbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SnsInbox]:
    aws_test_environment(monkeypatch)
    with mock_aws():
        yield SnsInbox()


def subjects(inbox: SnsInbox) -> list[str]:
    return [n["Subject"] for n in inbox.read()]


def monitor(db: Database, inbox: SnsInbox, now: datetime) -> list[str]:
    run_monitor(db, SnsNotifier(inbox.topic_arn), SETTINGS, now)
    return subjects(inbox)


def execute(db: Database, statement: str, *params: Any) -> None:
    with db.cursor() as cur:
        cur.execute(statement, params)


def test_summary_counts_what_was_made(db: Database) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        make_messages(cur, endpoint, 3)
        make_messages(cur, endpoint, 2, status="failed", created_at=now - timedelta(minutes=45))
        make_messages(cur, endpoint, 1, status="in_flight")
        make_messages(
            cur, endpoint, 4, status="dead_letter", dead_lettered_at=now - timedelta(minutes=5)
        )
        make_messages(
            cur, endpoint, 1, status="dead_letter", dead_lettered_at=now - timedelta(hours=2)
        )
        # Delivered 1 s and 3 s after creation in the last hour, and once long ago.
        created = now - timedelta(minutes=10)
        for delivered_at, count in (
            (created + timedelta(seconds=1), 2),
            (created + timedelta(seconds=3), 2),
            (now - timedelta(hours=2), 1),
        ):
            make_messages(
                cur,
                endpoint,
                count,
                status="delivered",
                created_at=created,
                delivered_at=delivered_at,
            )
        insert_attempts(cur, endpoint, [now - timedelta(minutes=m) for m in (1, 2, 3)], [5, 6, 7])
        insert_attempts(
            cur,
            endpoint,
            [now - timedelta(minutes=4)],
            [None],
            status_code=None,
            error_class="timeout",
        )
        insert_attempts(cur, endpoint, [now - timedelta(minutes=5)], [9], status_code=503)
        insert_attempts(cur, endpoint, [now - timedelta(hours=3)], [9], status_code=503)
        summary = health_summary(cur, SETTINGS, now)

    assert (summary.pending, summary.awaiting_retry, summary.in_flight) == (3, 2, 1)
    assert (summary.dead_letters, summary.dead_lettered_recently) == (5, 4)
    assert summary.delivered_recently == 4
    assert summary.failed_attempts_recently == 2
    assert summary.oldest_undelivered_age_s == pytest.approx(45 * 60, abs=0.01)
    assert summary.delivery_mean_ms == pytest.approx(2000)
    assert summary.delivery_p95_ms == pytest.approx(3000)
    data = summary.to_dict()
    assert data["checked_at"] == now.isoformat()
    assert json.loads(json.dumps(data)) == data


def test_circuit_alert_fires_once_and_resolves_once(db: Database, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, "https://down.example/hook")
        make_endpoint(cur, "https://fine.example/hook")
    execute(
        db,
        "UPDATE tidings.endpoint_health SET state = 'open', opened_at = %s,"
        " consecutive_failures = 10 WHERE endpoint_id = %s",
        now,
        endpoint,
    )

    notifications = inbox.read()
    assert notifications == []
    assert monitor(db, inbox, now) == [f"[Tidings] ALERT circuit open for endpoint {endpoint}"]
    for minutes in (5, 10):
        assert monitor(db, inbox, now + timedelta(minutes=minutes)) == []

    # Half open is still not closed: nothing new.
    execute(
        db,
        "UPDATE tidings.endpoint_health SET state = 'half_open' WHERE endpoint_id = %s",
        endpoint,
    )
    assert monitor(db, inbox, now + timedelta(minutes=15)) == []

    execute(
        db,
        "UPDATE tidings.endpoint_health SET state = 'closed', opened_at = NULL"
        " WHERE endpoint_id = %s",
        endpoint,
    )
    assert monitor(db, inbox, now + timedelta(minutes=20)) == [
        f"[Tidings] RESOLVED circuit_open:{endpoint}"
    ]
    assert monitor(db, inbox, now + timedelta(minutes=25)) == []

    # It can fire again after it was resolved.
    execute(
        db,
        "UPDATE tidings.endpoint_health SET state = 'open', opened_at = %s WHERE endpoint_id = %s",
        now,
        endpoint,
    )
    assert monitor(db, inbox, now + timedelta(minutes=30)) == [
        f"[Tidings] ALERT circuit open for endpoint {endpoint}"
    ]


def test_alert_message_carries_readable_text_and_json(db: Database, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    execute(
        db,
        "UPDATE tidings.endpoint_health SET p95_ms = 2600, sample_count = 20"
        " WHERE endpoint_id = %s",
        endpoint,
    )
    run_monitor(db, SnsNotifier(inbox.topic_arn), SETTINGS, now)
    (notification,) = inbox.read()
    assert notification["Subject"] == f"[Tidings] ALERT endpoint {endpoint} slow: p95 2600 ms"
    text, _, structured = notification["Message"].partition("\n\n")
    assert "p95 2600 ms over 20 attempts" in text
    assert json.loads(structured) == {
        "alert_key": f"slow_endpoint:{endpoint}",
        "kind": "slow_endpoint",
        "status": "firing",
        "details": {
            "endpoint_id": endpoint,
            "application": "default",
            "p95_ms": 2600.0,
            "sample_count": 20,
        },
    }
    assert notification["MessageAttributes"]["status"]["Value"] == "firing"


def test_slow_endpoint_needs_enough_samples(db: Database, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    execute(
        db,
        "UPDATE tidings.endpoint_health SET p95_ms = 9000, sample_count = 19"
        " WHERE endpoint_id = %s",
        endpoint,
    )
    assert monitor(db, inbox, now) == []
    execute(
        db,
        "UPDATE tidings.endpoint_health SET p95_ms = 2000, sample_count = 500"
        " WHERE endpoint_id = %s",
        endpoint,
    )
    assert monitor(db, inbox, now) == []


def test_oldest_undelivered_alert(db: Database, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        make_messages(cur, endpoint, 1, created_at=now - timedelta(minutes=29))
    assert monitor(db, inbox, now) == []
    assert monitor(db, inbox, now + timedelta(minutes=2)) == [
        "[Tidings] ALERT oldest undelivered message is 31 minutes old"
    ]
    assert monitor(db, inbox, now + timedelta(minutes=7)) == []
    execute(db, "UPDATE tidings.messages SET status = 'delivered', delivered_at = %s", now)
    assert monitor(db, inbox, now + timedelta(minutes=12)) == [
        "[Tidings] RESOLVED oldest_undelivered"
    ]


def test_dead_letters_growing(db: Database, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        make_messages(
            cur, endpoint, 3, status="dead_letter", dead_lettered_at=now - timedelta(hours=1)
        )
    # The first run has nothing to compare with.
    assert monitor(db, inbox, now) == []
    assert monitor(db, inbox, now + timedelta(minutes=5)) == []

    with db.cursor() as cur:
        make_messages(
            cur, endpoint, 2, status="dead_letter", dead_lettered_at=now + timedelta(minutes=7)
        )
    assert monitor(db, inbox, now + timedelta(minutes=10)) == [
        "[Tidings] ALERT dead letters growing: 2 new, 5 in all"
    ]
    assert monitor(db, inbox, now + timedelta(minutes=15)) == [
        "[Tidings] RESOLVED dead_letters_growing"
    ]
    assert monitor(db, inbox, now + timedelta(minutes=20)) == []


def test_endpoints_failing_for_five_days_are_disabled(db: Database, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        dead = make_endpoint(cur, "https://dead.example/hook")
        recent = make_endpoint(cur, "https://recent.example/hook")
        healthy = make_endpoint(cur, "https://healthy.example/hook")
        # dead: last success 6 days ago, failing since 5 days and 1 hour ago.
        insert_attempts(cur, dead, [now - timedelta(days=6)], [40])
        insert_attempts(
            cur,
            dead,
            [now - timedelta(days=5, hours=1), now - timedelta(minutes=3)],
            [50, 60],
            status_code=500,
        )
        # recent: failing for 4 days only.
        insert_attempts(
            cur,
            recent,
            [now - timedelta(days=4), now - timedelta(minutes=3)],
            [5, 5],
            status_code=500,
        )
        # healthy: failed long ago, succeeded since.
        insert_attempts(cur, healthy, [now - timedelta(days=6)], [5], status_code=500)
        cur.execute(
            """
            UPDATE tidings.endpoint_health h
            SET last_success_at = v.s, last_failure_at = v.f
            FROM (VALUES (%(dead)s::bigint, %(now)s::timestamptz - interval '6 days',
                          %(now)s::timestamptz - interval '3 minutes'),
                         (%(recent)s, NULL, %(now)s::timestamptz - interval '3 minutes'),
                         (%(healthy)s, %(now)s::timestamptz - interval '1 hour',
                          %(now)s::timestamptz - interval '6 days')) AS v(id, s, f)
            WHERE h.endpoint_id = v.id
            """,
            {"dead": dead, "recent": recent, "healthy": healthy, "now": now},
        )

    result = run_monitor(db, SnsNotifier(inbox.topic_arn), SETTINGS, now)

    assert result.disabled_endpoint_ids == (dead,)
    (notification,) = inbox.read()
    assert notification["Subject"] == f"[Tidings] ALERT endpoint {dead} disabled"
    assert "failing without a single success for 5 days" in notification["Message"]
    with db.cursor() as cur:
        cur.execute("SELECT id, enabled FROM tidings.endpoints ORDER BY id")
        assert cur.fetchall() == [(dead, False), (recent, True), (healthy, True)]
        cur.execute(
            "SELECT endpoint_id, failing_since FROM tidings.endpoint_health ORDER BY endpoint_id"
        )
        streaks = dict(cur.fetchall())
    assert streaks[dead] == now - timedelta(days=5, hours=1)
    assert streaks[recent] == now - timedelta(days=4)
    assert streaks[healthy] is None
    assert monitor(db, inbox, now + timedelta(minutes=5)) == []

    # A success ends the streak.
    execute(
        db,
        "UPDATE tidings.endpoint_health SET last_success_at = %s WHERE endpoint_id = %s",
        now,
        recent,
    )
    monitor(db, inbox, now + timedelta(minutes=10))
    with db.cursor() as cur:
        cur.execute(
            "SELECT failing_since FROM tidings.endpoint_health WHERE endpoint_id = %s", (recent,)
        )
        assert cur.fetchone() == (None,)


def test_overlapping_runs_send_each_alert_once(database_url: str, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    setup = Database(database_url)
    with setup.cursor() as cur:
        endpoints = [make_endpoint(cur, f"https://r{i}.example/") for i in range(5)]
        cur.execute("UPDATE tidings.endpoint_health SET state = 'open', opened_at = %s", (now,))
    setup.close()
    notifier = SnsNotifier(inbox.topic_arn)
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def run() -> None:
        db = Database(database_url)
        try:
            barrier.wait()
            run_monitor(db, notifier, SETTINGS, now)
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(subjects(inbox)) == sorted(
        f"[Tidings] ALERT circuit open for endpoint {e}" for e in endpoints
    )


class FlakyNotifier:
    def __init__(self, inner: SnsNotifier) -> None:
        self.inner = inner
        self.failing = True

    def publish(self, subject: str, message: str, attributes: Any = None) -> str:
        if self.failing:
            raise ConnectionError("SNS unreachable")
        return self.inner.publish(subject, message, attributes)


def test_an_alert_that_could_not_be_sent_is_sent_next_time(db: Database, inbox: SnsInbox) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        cur.execute("UPDATE tidings.endpoint_health SET state = 'open', opened_at = %s", (now,))
    notifier = FlakyNotifier(SnsNotifier(inbox.topic_arn))
    with pytest.raises(ConnectionError, match="SNS unreachable"):
        run_monitor(db, notifier, SETTINGS, now)
    # Claimed, and its notification waits in the outbox for the next run.
    with db.cursor() as cur:
        assert [a.alert_key for a in reports.firing_alerts(cur)] == [f"circuit_open:{endpoint}"]
        cur.execute("SELECT alert_key FROM tidings.alert_outbox")
        assert cur.fetchall() == [(f"circuit_open:{endpoint}",)]
    notifier.failing = False
    result = run_monitor(db, notifier, SETTINGS, now + timedelta(minutes=5))
    assert result.caught_up == (f"circuit_open:{endpoint}",)
    assert subjects(inbox) == [f"[Tidings] ALERT circuit open for endpoint {endpoint}"]
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.alert_outbox")
        assert cur.fetchone() == (0,)


def test_claims_are_exclusive_and_queue_their_notification(db: Database) -> None:
    now = datetime.now(UTC)
    note = reports.Notification("subject", "body", {"alert_key": "k"})
    fire = {"alert_key": "k", "kind": "x", "details": {}, "now": now, "notification": note}
    with db.cursor() as cur:
        first = reports.claim_alert_firing(cur, **fire, claim_s=60)
        second = reports.claim_alert_firing(cur, **fire, claim_s=60)
        resolved = reports.claim_alert_resolved(
            cur, alert_key="k", now=now, notification=note, claim_s=60
        )
        resolved_again = reports.claim_alert_resolved(
            cur, alert_key="k", now=now, notification=note, claim_s=60
        )
        # Both are held by the run that claimed them: none is due for another run yet.
        assert reports.take_waiting_notifications(cur, now=now, claim_s=60, max_rows=10) == []
        waiting = reports.take_waiting_notifications(
            cur, now=now + timedelta(seconds=61), claim_s=60, max_rows=10
        )
    assert first is not None and resolved is not None
    assert (second, resolved_again) == (None, None)
    assert [w.outbox_id for w in waiting] == [first, resolved]
    assert waiting[0].notification == note


def test_handler_emits_metrics_and_alerts(
    database_url: str, inbox: SnsInbox, capsys: pytest.CaptureFixture[str]
) -> None:
    setup = Database(database_url)
    with setup.cursor() as cur:
        endpoint = make_endpoint(cur)
        make_messages(cur, endpoint, 2)
        cur.execute("UPDATE tidings.endpoint_health SET state = 'open', opened_at = now()")
    setup.close()
    app = load_handler("health_monitor")
    with wiring.overridden(
        settings=SETTINGS.replace(database_url=database_url),
        notifier=SnsNotifier(inbox.topic_arn),
        database_factory=lambda: Database(database_url),
    ):
        result = app.handler({}, LambdaContext())
    assert result["summary"]["pending"] == 2
    assert result["fired"] == [f"circuit_open:{endpoint}"]
    assert subjects(inbox) == [f"[Tidings] ALERT circuit open for endpoint {endpoint}"]
    emitted = [
        json.loads(line)
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("{") and "_aws" in line
    ]
    (document,) = emitted
    assert document["Pending"] == [2.0]
    assert document["OpenCircuits"] == [1.0]
    names = {m["Name"] for m in document["_aws"]["CloudWatchMetrics"][0]["Metrics"]}
    assert {"Pending", "AwaitingRetry", "InFlight", "DeadLetters", "OldestUndeliveredAge"} <= names


def test_queued_messages_of_deleted_and_disabled_endpoints_become_dead_letters(
    db: Database, database_url: str
) -> None:
    import psycopg2

    from tidings.local.notifier import MemoryNotifier
    from tidings.logic.endpoints import delete_endpoint

    with db.cursor() as cur:
        deleted = make_endpoint(cur, event_types=["order.paid"])
        gone = make_endpoint(cur, event_types=["user.new"])
        kept = make_endpoint(cur, event_types=["user.new"])
        cur.execute("SELECT * FROM tidings.enqueue('user.new', '{}'::jsonb, 'before-410')")
        cur.execute(
            "UPDATE tidings.endpoints SET enabled = false, disabled_reason = '410 Gone'"
            " WHERE id = %s",
            (gone,),
        )
    # A producer's transaction enqueues, and stays open while the endpoint is deleted: the
    # deletion cannot see that message, so it would be left pending for good.
    producer = psycopg2.connect(database_url)
    with producer.cursor() as cur:
        cur.execute("SELECT * FROM tidings.enqueue('order.paid', '{}'::jsonb, 'late-1')")
    delete_endpoint(db, deleted)
    producer.commit()
    producer.close()

    result = run_monitor(db, MemoryNotifier(), SETTINGS, datetime.now(UTC))

    assert result.unreachable_dead_lettered == 2
    with db.cursor() as cur:
        cur.execute("SELECT endpoint_id, status::text, last_error FROM tidings.messages ORDER BY 1")
        assert cur.fetchall() == [
            (deleted, "dead_letter", "endpoint deleted"),
            (gone, "dead_letter", "endpoint disabled: 410 Gone"),
            (kept, "pending", None),
        ]
    again = run_monitor(db, MemoryNotifier(), SETTINGS, datetime.now(UTC))
    assert again.unreachable_dead_lettered == 0


def test_dead_letters_recorded_by_a_statement_that_began_before_the_last_run_count(
    db: Database, inbox: SnsInbox
) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    assert monitor(db, inbox, now) == []
    # Committed after that run, but stamped when its statement began, just before it.
    with db.cursor() as cur:
        make_messages(
            cur, endpoint, 1, status="dead_letter", dead_lettered_at=now - timedelta(seconds=5)
        )
    assert monitor(db, inbox, now + timedelta(minutes=5)) == [
        "[Tidings] ALERT dead letters growing: 1 new, 1 in all"
    ]
