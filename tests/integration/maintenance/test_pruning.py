"""Pruning removes exactly what is due and leaves the rest."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta

import psycopg2
import pytest

from tests.integration.maintenance.scheduled_support import (
    LambdaContext,
    insert_attempts,
    load_handler,
    make_messages,
)
from tests.support.seed import make_endpoint
from tidings import wiring
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.notifier import MemoryNotifier
from tidings.maintenance.dead_letter_report import run_report
from tidings.maintenance.pruning import prune

SETTINGS = Settings()
# Attempt partitions kept one day, as in earlier releases, so that partition days are quick to make.
ONE_DAY = Settings(attempts_retention_s=86400)


def partitions(db: Database) -> list[str]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = 'tidings.attempt_log'::regclass ORDER BY c.relname"
        )
        return [row[0] for row in cur.fetchall()]


def day_name(day: date) -> str:
    return "attempts_" + day.strftime("%Y%m%d")


def create_partitions(db: Database, first: date, days: int) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT tidings.ensure_attempt_partitions(%s, %s, 1000)", (first, days))


def test_old_attempt_partitions_go_whole_and_coming_ones_are_made(db: Database) -> None:
    now = datetime.now(UTC).replace(hour=10, minute=0, second=0, microsecond=0)
    today = now.date()
    create_partitions(db, today - timedelta(days=4), 4)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        # Kept: made less than a day ago (in yesterday's partition), and today.
        insert_attempts(
            cur, endpoint, [now - timedelta(hours=23), now - timedelta(hours=1)], [5, 5]
        )
        # Old: in partitions of days that ended more than a day ago.
        insert_attempts(cur, endpoint, [now - timedelta(days=d) for d in (2, 3, 4)], [5, 5, 5])
        # Old rows in the default partition (a day without a partition), and a recent one.
        insert_attempts(cur, endpoint, [now - timedelta(days=9), now - timedelta(days=8)], [5, 5])
    before = partitions(db)
    assert day_name(today - timedelta(days=2)) in before

    result = prune(db, ONE_DAY.replace(prune_batch_size=1), now)

    # Yesterday's partition ends today at 00:00, less than 24 h before 10:00: it stays.
    assert result.partitions_dropped == tuple(
        day_name(today - timedelta(days=d)) for d in (4, 3, 2)
    )
    after = partitions(db)
    expected_days = [
        today + timedelta(days=d) for d in range(-1, SETTINGS.attempt_partitions_ahead_days + 1)
    ]
    assert after == sorted(["attempts_default", *(day_name(d) for d in expected_days)])
    assert result.default_attempts_deleted == 2
    assert not result.partitions_deferred and result.complete
    with db.cursor() as cur:
        cur.execute("SELECT attempted_at FROM tidings.attempts ORDER BY attempted_at")
        assert [row[0] for row in cur.fetchall()] == [
            now - timedelta(hours=23),
            now - timedelta(hours=1),
        ]

    again = prune(db, ONE_DAY, now)
    assert (again.partitions_created, again.partitions_dropped, again.default_attempts_deleted) == (
        0,
        (),
        0,
    )


def test_a_day_whose_rows_sit_in_the_default_partition_gets_no_partition(db: Database) -> None:
    now = datetime.now(UTC)
    tomorrow = now.date() + timedelta(days=1)
    with db.cursor() as cur:
        cur.execute(f"DROP TABLE tidings.{day_name(tomorrow)}")
        insert_attempts(cur, make_endpoint(cur), [now + timedelta(days=1)], [5])
    prune(db, SETTINGS, now)
    names = partitions(db)
    assert day_name(tomorrow) not in names
    assert day_name(tomorrow + timedelta(days=1)) in names


def test_a_busy_attempts_table_defers_the_drop(database_url: str) -> None:
    db = Database(database_url)
    now = datetime.now(UTC)
    # Whatever the database's own partitions left due (they were made by the clock when it was
    # created, which may be the day before `now`) goes first, so that only the old day is left.
    prune(db, ONE_DAY, now)
    create_partitions(db, now.date() - timedelta(days=3), 1)
    blocker = psycopg2.connect(database_url)
    try:
        with blocker.cursor() as cur:
            # A long transaction holding a lock that conflicts with dropping a partition.
            cur.execute("LOCK TABLE tidings.attempts IN ACCESS SHARE MODE")
            result = prune(db, ONE_DAY.replace(prune_lock_timeout_ms=100), now)
        assert result.partitions_deferred
        assert day_name(now.date() - timedelta(days=3)) in partitions(db)
    finally:
        blocker.rollback()
        blocker.close()
    assert prune(db, ONE_DAY, now).partitions_dropped == (day_name(now.date() - timedelta(days=3)),)
    db.close()


def test_messages_past_their_retention_go_in_batches_with_their_events(db: Database) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        a = make_endpoint(cur, "https://a.example/")
        b = make_endpoint(cur, "https://b.example/")
        old_delivered = make_messages(
            cur,
            a,
            7,
            status="delivered",
            created_at=now - timedelta(days=7, minutes=2),
            delivered_at=now - timedelta(days=7, minutes=1),
        )
        new_delivered = make_messages(
            cur, a, 2, status="delivered", delivered_at=now - timedelta(days=6, hours=23)
        )
        make_messages(
            cur,
            a,
            3,
            status="dead_letter",
            created_at=now - timedelta(days=31),
            dead_lettered_at=now - timedelta(days=30, minutes=1),
            dead_letter_reported_at=now - timedelta(days=30),
        )
        # Past its retention, but its event is still inside the idempotency window: the message
        # goes, the event (and so its key) stays until the window is over.
        (recent_event,) = make_messages(
            cur,
            a,
            1,
            status="delivered",
            created_at=now - timedelta(days=6),
            delivered_at=now - timedelta(days=8),
        )
        new_dead = make_messages(
            cur,
            a,
            2,
            status="dead_letter",
            dead_lettered_at=now - timedelta(days=29),
            dead_letter_reported_at=now - timedelta(days=29),
        )
        # No report has named this one yet: it stays until one has, however old.
        unreported_dead = make_messages(
            cur, a, 1, status="dead_letter", dead_lettered_at=now - timedelta(days=40)
        )
        # Undelivered rows are never pruned, however old.
        waiting = make_messages(cur, a, 2, status="failed", created_at=now - timedelta(days=60))
        # An event delivered long ago to a but still dead-letter-fresh at b keeps its payload.
        cur.execute(
            "INSERT INTO tidings.messages (event_ref, endpoint_id, event_type, status,"
            " dead_lettered_at) SELECT event_ref, %s, event_type, 'dead_letter', %s"
            " FROM tidings.messages WHERE id = %s RETURNING id",
            (b, now - timedelta(days=1), old_delivered[0]),
        )
        row = cur.fetchone()
        assert row is not None
        shared = int(row[0])

    result = prune(db, SETTINGS.replace(prune_batch_size=2), now)

    assert (result.delivered_deleted, result.dead_letters_deleted) == (8, 3)
    assert result.events_deleted == 7 - 1 + 3
    assert result.complete
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages ORDER BY id")
        left = [row[0] for row in cur.fetchall()]
        cur.execute(
            "SELECT count(*) FROM tidings.events ev WHERE NOT EXISTS"
            " (SELECT 1 FROM tidings.messages m WHERE m.event_ref = ev.id)"
        )
        orphans = cur.fetchone()
    assert left == sorted(new_delivered + new_dead + unreported_dead + waiting + [shared])
    assert recent_event not in left
    assert orphans == (1,)


def test_a_dead_letter_goes_only_after_a_report_named_it(db: Database) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        (old,) = make_messages(
            cur, endpoint, 1, status="dead_letter", dead_lettered_at=now - timedelta(days=31)
        )
    assert prune(db, SETTINGS, now).dead_letters_deleted == 0

    run = run_report(db, MemoryNotifier(), SETTINGS)
    assert run.report.total == 1

    assert prune(db, SETTINGS, now).dead_letters_deleted == 1
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.messages WHERE id = %s", (old,))
        assert cur.fetchone() == (0,)


def test_batches_are_bounded_per_run(db: Database) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        make_messages(cur, endpoint, 10, status="delivered", delivered_at=now - timedelta(days=8))
    first = prune(db, SETTINGS.replace(prune_batch_size=3, prune_max_batches=2), now)
    assert (first.delivered_deleted, first.complete) == (6, False)
    second = prune(db, SETTINGS.replace(prune_batch_size=3, prune_max_batches=2), now)
    assert (second.delivered_deleted, second.complete) == (4, True)


def test_tallies_naming_many_messages_are_read_by_the_messages_they_name(db: Database) -> None:
    now = datetime.now(UTC)
    day = now.date() - timedelta(days=9)
    at = datetime.combine(day, datetime.min.time(), UTC) + timedelta(hours=6)
    with db.cursor() as cur:
        cur.execute("SELECT tidings.ensure_attempt_partitions(%s, 1, 1000)", (day,))
        endpoint = make_endpoint(cur)
        ids = make_messages(cur, endpoint, 8, status="delivered", delivered_at=at)
        # As record calls write them: five deliveries in one, three in the next.
        cur.execute("TRUNCATE tidings.attempt_tallies")
        for part in (ids[:5], ids[5:]):
            cur.execute(
                "INSERT INTO tidings.attempt_tallies (recorded_at, endpoint_ids, message_ids,"
                " response_ms, delivered) VALUES (%s, %s, %s, %s, %s)",
                (at, [endpoint] * len(part), part, [5] * len(part), [True] * len(part)),
            )
    # Batches of two messages: each tally is read whole, one to a batch, and the day goes after.
    first = prune(db, SETTINGS.replace(prune_batch_size=2, prune_max_batches=2), now)
    assert (first.delivered_deleted, first.complete) == (8, False)
    assert first.tally_partitions_dropped == ()
    second = prune(db, SETTINGS.replace(prune_batch_size=2, prune_max_batches=2), now)
    assert (second.delivered_deleted, second.complete) == (0, True), second
    assert second.tally_partitions_dropped == ("attempt_tallies_" + day.strftime("%Y%m%d"),)


def test_rows_held_by_another_session_are_skipped(database_url: str) -> None:
    db = Database(database_url)
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        ids = make_messages(
            cur, endpoint, 3, status="delivered", delivered_at=now - timedelta(days=8)
        )
    holder = psycopg2.connect(database_url)
    try:
        with holder.cursor() as cur:
            cur.execute("SELECT id FROM tidings.messages WHERE id = %s FOR UPDATE", (ids[0],))
            done = threading.Event()
            outcome: list[int] = []

            def run() -> None:
                outcome.append(prune(db, SETTINGS, now).delivered_deleted)
                done.set()

            worker = threading.Thread(target=run)
            worker.start()
            assert done.wait(10), "pruning waited for a locked row"
            worker.join()
        assert outcome == [2]
    finally:
        holder.rollback()
        holder.close()
    db.close()


def test_handler_prunes(database_url: str) -> None:
    app = load_handler("pruner")
    with wiring.overridden(
        settings=SETTINGS.replace(database_url=database_url),
        database_factory=lambda: Database(database_url),
    ):
        result = app.handler({}, LambdaContext())
    assert result["complete"] is True
    assert result["partitions_created"] >= 1


@pytest.mark.parametrize("value", [0, -5])
def test_bad_settings_are_refused(value: int) -> None:
    with pytest.raises(ValueError, match="TIDINGS_PRUNE_MAX_BATCHES"):
        SETTINGS.replace(prune_max_batches=value)
