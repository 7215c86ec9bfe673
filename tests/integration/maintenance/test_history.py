"""History that lasts as long as the message: attempts outlive no message's need of them, yet
never go before it; events go once nothing refers to them and their idempotency window is over."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from tests.integration.maintenance.scheduled_support import make_messages
from tests.support.seed import make_endpoint
from tidings.config import Settings
from tidings.dal import ingest
from tidings.dal.connection import Cursor, Database
from tidings.logic import events
from tidings.logic.messages import get_message
from tidings.maintenance.pruning import prune

SETTINGS = Settings()


def day_name(day: date) -> str:
    return "attempts_" + day.strftime("%Y%m%d")


def partitions(cur: Cursor) -> list[str]:
    cur.execute(
        "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
        " WHERE i.inhparent = 'tidings.attempt_log'::regclass ORDER BY c.relname"
    )
    return [row[0] for row in cur.fetchall()]


def log_attempts(cur: Cursor, message_id: int, endpoint_id: int, times: list[datetime]) -> None:
    for number, at in enumerate(times, start=1):
        cur.execute(
            "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, attempted_at,"
            " status_code, error_class) VALUES (%s, %s, %s, %s, 503, 'http_503')",
            (message_id, endpoint_id, number, at),
        )


def kept_rows(cur: Cursor) -> dict[int, int]:
    cur.execute("SELECT message_id, count(*) FROM tidings.attempts_kept GROUP BY message_id")
    return {int(m): int(n) for m, n in cur.fetchall()}


def test_a_dead_letter_keeps_its_attempts_as_long_as_it_is_kept(db: Database) -> None:
    now = datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0)
    old_day = now.date() - timedelta(days=10)
    at = datetime.combine(old_day, datetime.min.time(), UTC) + timedelta(hours=8)
    with db.cursor() as cur:
        cur.execute("SELECT tidings.ensure_attempt_partitions(%s, 1, 1000)", (old_day,))
        endpoint = make_endpoint(cur)
        (dead,) = make_messages(
            cur,
            endpoint,
            1,
            status="dead_letter",
            created_at=at,
            dead_lettered_at=now - timedelta(days=9),
            dead_letter_reported_at=now - timedelta(days=9),
            attempts=3,
        )
        (delivered,) = make_messages(
            cur,
            endpoint,
            1,
            status="delivered",
            created_at=at,
            delivered_at=now - timedelta(days=8),
            attempts=2,
        )
        # Still waiting (its endpoint's circuit held it, say): never pruned, nor its history.
        (waiting,) = make_messages(cur, endpoint, 1, status="failed", created_at=at, attempts=2)
        log_attempts(cur, dead, endpoint, [at, at + timedelta(hours=1), at + timedelta(hours=2)])
        log_attempts(cur, delivered, endpoint, [at, at + timedelta(hours=3)])
        log_attempts(cur, waiting, endpoint, [at, at + timedelta(hours=4)])
    before = get_message(db, dead).attempt_history

    result = prune(db, SETTINGS, now)

    # The day's partition went whole; the delivered message (past its 7 days) went with its
    # attempts; the dead letter and the waiting message kept theirs.
    assert day_name(old_day) in result.partitions_dropped
    assert result.attempts_kept == 3 + 2 + 2
    assert result.delivered_deleted == 1
    with db.cursor() as cur:
        assert day_name(old_day) not in partitions(cur)
        assert kept_rows(cur) == {dead: 3, waiting: 2}
    assert get_message(db, dead).attempt_history == before
    assert [a.attempt_number for a in get_message(db, waiting).attempt_history] == [1, 2]

    # Three weeks on the dead letter is past its 30 days: it goes, and its history with it.
    later = prune(db, SETTINGS, now + timedelta(days=22))
    assert later.dead_letters_deleted == 1
    with db.cursor() as cur:
        assert kept_rows(cur) == {waiting: 2}


def test_the_previous_releases_drop_never_takes_a_kept_messages_history(db: Database) -> None:
    # While a deploy replaces it, the pruner of the release before still calls the old drop:
    # it now leaves a partition that holds attempts of a kept message.
    day = datetime.now(UTC).date() - timedelta(days=5)
    at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=1)
    cutoff = datetime.now(UTC) - timedelta(days=1)
    with db.cursor() as cur:
        cur.execute("SELECT tidings.ensure_attempt_partitions(%s, 1, 1000)", (day,))
        endpoint = make_endpoint(cur)
        (kept,) = make_messages(cur, endpoint, 1, status="dead_letter", dead_lettered_at=at)
        log_attempts(cur, kept, endpoint, [at])
        cur.execute("SELECT tidings.drop_oldest_attempt_partition(%s, 1000)", (cutoff,))
        assert cur.fetchone() == (None,)
        assert day_name(day) in partitions(cur)
        cur.execute("DELETE FROM tidings.messages WHERE id = %s", (kept,))
        cur.execute("SELECT tidings.drop_oldest_attempt_partition(%s, 1000)", (cutoff,))
        assert cur.fetchone() == (day_name(day),)


def test_kept_history_is_copied_once_when_a_drop_is_tried_again(db: Database) -> None:
    now = datetime.now(UTC)
    day = now.date() - timedelta(days=9)
    at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=1)
    with db.cursor() as cur:
        cur.execute("SELECT tidings.ensure_attempt_partitions(%s, 1, 1000)", (day,))
        endpoint = make_endpoint(cur)
        (dead,) = make_messages(cur, endpoint, 1, status="dead_letter", dead_lettered_at=at)
        log_attempts(cur, dead, endpoint, [at, at + timedelta(minutes=5)])
        # A run copied the history, then could not drop the partition (its lock was busy).
        cur.execute("SELECT kept FROM tidings.keep_live_attempts(%s, 0, 100)", (day_name(day),))
        assert cur.fetchone() == (2,)
    result = prune(db, SETTINGS.replace(prune_batch_size=1), now)
    assert day_name(day) in result.partitions_dropped
    with db.cursor() as cur:
        assert kept_rows(cur) == {dead: 2}


def send(db: Database, key: str, event_type: str = "order.created") -> events.SendResult:
    return events.send_event(
        db, event_type=event_type, payload={"key": key}, event_id=key, settings=SETTINGS
    )


def events_with_key(db: Database, key: str) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.events WHERE event_id = %s", (key,))
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def test_an_event_id_is_a_repeat_within_the_window_and_new_after_it(db: Database) -> None:
    window = timedelta(seconds=SETTINGS.idempotency_window_s)
    assert send(db, "order-1").created
    assert not send(db, "order-1").created
    # A day before the window ends: the key still holds (no message refers to the event: no
    # endpoint subscribes, so the pruner may forget it, but only after the window).
    prune(db, SETTINGS, datetime.now(UTC) + window - timedelta(days=1))
    assert not send(db, "order-1").created
    assert events_with_key(db, "order-1") == 1

    prune(db, SETTINGS, datetime.now(UTC) + window + timedelta(minutes=1))
    assert events_with_key(db, "order-1") == 0
    again = send(db, "order-1")
    assert again.created
    assert events_with_key(db, "order-1") == 1


def test_an_events_key_outlives_the_window_while_a_message_of_it_is_kept(db: Database) -> None:
    with db.cursor() as cur:
        make_endpoint(cur, event_types=["order.created"])
    first = send(db, "order-2")
    assert first.created and len(first.message_ids) == 1
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " dead_letter_reported_at = now()"
        )
    # Past the 7-day window, the dead letter (30 days) still refers to the event: a repeat.
    prune(db, SETTINGS, datetime.now(UTC) + timedelta(days=8))
    assert send(db, "order-2").message_ids == first.message_ids
    # Once the dead letter is pruned, the key is free: a new event, a new message.
    prune(db, SETTINGS, datetime.now(UTC) + timedelta(days=31))
    second = send(db, "order-2")
    assert second.created and len(second.message_ids) == 1
    assert second.message_ids != first.message_ids


def test_events_nobody_subscribed_to_are_pruned_after_the_window(db: Database) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.events (event_type, event_id, payload, created_at)"
            " SELECT 'unheard.of', 'k' || g, '{}', %s FROM generate_series(1, 7) g",
            (now - timedelta(days=8),),
        )
        cur.execute(
            "INSERT INTO tidings.events (event_type, event_id, payload, created_at)"
            " VALUES ('unheard.of', 'fresh', '{}', %s)",
            (now - timedelta(days=6),),
        )
    result = prune(db, SETTINGS.replace(prune_batch_size=3), now)
    assert result.events_deleted == 7
    assert result.complete
    with db.cursor() as cur:
        cur.execute("SELECT event_id FROM tidings.events")
        assert cur.fetchall() == [("fresh",)]


def test_a_send_racing_the_end_of_its_keys_window_records_the_event_anew(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The key was found taken, then its event pruned before the send could read it: the send
    # is made again, and records the event.
    real = ingest.enqueue_event
    calls: list[int] = []

    def pruned_meanwhile(cur: Cursor, event: Any, *, application: str | None) -> ingest.Enqueued:
        calls.append(1)
        if len(calls) == 1:
            return ingest.Enqueued(None, False, ())
        return real(cur, event, application=application)

    monkeypatch.setattr(ingest, "enqueue_event", pruned_meanwhile)
    result = send(db, "order-3")
    assert result.created
    assert len(calls) == 2
    assert events_with_key(db, "order-3") == 1
