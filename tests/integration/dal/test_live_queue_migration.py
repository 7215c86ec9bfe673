"""Upgrading a deployment with messages in every state to the live queue (migrations 0150-0151):
the messages still to be settled move to tidings.queue with their leases, nothing is lost or
changes state, and what was recorded before is tallied once for the pruning and the figures."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
import psycopg2.extensions

from tidings import migrations
from tidings.config import Settings
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import AttemptOutcome, Lease, MessageStatus
from tidings.maintenance.pruning import prune

BEFORE_LIVE_QUEUE = 144
VIEW_COLUMNS = (
    "id, status::text, attempts, next_attempt_at, lease_token, delivered_at, dead_lettered_at"
)


def _connect(dsn: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def _message(cur: Any, endpoint: int, key: str, **columns: Any) -> int:
    cur.execute(
        "INSERT INTO tidings.events (event_type, event_id, payload) VALUES ('order.paid', %s, '{}')"
        " RETURNING id",
        (key,),
    )
    (event,) = cur.fetchone()
    names = ["event_ref", "endpoint_id", "event_type", *columns]
    cur.execute(
        f"INSERT INTO tidings.messages ({', '.join(names)})"
        f" VALUES ({', '.join(['%s'] * len(names))}) RETURNING id",
        (event, endpoint, "order.paid", *columns.values()),
    )
    return int(cur.fetchone()[0])


def _attempt(cur: Any, message: int, endpoint: int, at: datetime, status_code: int) -> None:
    cur.execute(
        "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, attempted_at,"
        " status_code, response_ms) VALUES (%s, %s, 1, %s, %s, 42)",
        (message, endpoint, at, status_code),
    )


def test_an_upgrade_keeps_every_message_and_its_lease(empty_database: str) -> None:
    now = datetime.now(UTC)
    conn = _connect(empty_database)
    migrations.migrate(conn, until=BEFORE_LIVE_QUEUE)
    token = uuid.uuid4()
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url) VALUES ('https://r.example/h') RETURNING id"
        )
        (endpoint,) = cur.fetchone()
        pending = _message(cur, endpoint, "pending")
        leased = _message(
            cur,
            endpoint,
            "leased",
            status="in_flight",
            lease_token=str(token),
            next_attempt_at=now + timedelta(minutes=3),
        )
        failed = _message(
            cur,
            endpoint,
            "failed",
            status="failed",
            attempts=2,
            next_attempt_at=now + timedelta(hours=1),
        )
        recent = _message(
            cur,
            endpoint,
            "recent",
            status="delivered",
            attempts=1,
            delivered_at=now - timedelta(hours=2),
        )
        old = _message(
            cur,
            endpoint,
            "old",
            status="delivered",
            attempts=1,
            delivered_at=now - timedelta(days=9),
        )
        dead = _message(
            cur,
            endpoint,
            "dead",
            status="dead_letter",
            attempts=5,
            dead_lettered_at=now - timedelta(days=1),
        )
        # Written by hand once: delivered, yet with a dead-lettering time (no path of Tidings
        # leaves one so).
        stray = _message(
            cur,
            endpoint,
            "stray",
            status="delivered",
            attempts=1,
            delivered_at=now - timedelta(hours=3),
            dead_lettered_at=now - timedelta(hours=4),
        )
        _attempt(cur, recent, endpoint, now - timedelta(hours=2), 200)
        _attempt(cur, failed, endpoint, now - timedelta(minutes=30), 503)
        cur.execute(
            "INSERT INTO tidings.job_state (job, details) VALUES ('percentiles', '{\"growth\": 1}')"
        )
        cur.execute(f"SELECT {VIEW_COLUMNS} FROM tidings.messages ORDER BY id")
        before = cur.fetchall()

    applied = migrations.migrate(conn)
    assert applied[:2] == ["0150_live_queue", "0151_message_row_indexes"]
    with conn.cursor() as cur:
        cur.execute(f"SELECT {VIEW_COLUMNS} FROM tidings.messages ORDER BY id")
        after = {row[0]: row for row in cur.fetchall()}
        # The stray's dead-lettering time went (a message is a dead letter exactly when it has one).
        assert after.pop(stray)[6] is None
        assert list(after.values()) == [row for row in before if row[0] != stray]
        cur.execute("SELECT message_id, status::text, lease_token FROM tidings.queue ORDER BY 1")
        assert cur.fetchall() == [
            (pending, "pending", None),
            (leased, "in_flight", str(token)),
            (failed, "failed", None),
        ]
        cur.execute(
            "SELECT convalidated FROM pg_constraint WHERE conname = 'message_rows_dead_letter_time'"
        )
        assert cur.fetchone() == (True,)
        # Every message delivered before is named for its pruning (with no attempt to count);
        # the attempts of the last 25 hours are tallied as recorded.
        cur.execute(
            "SELECT u.message_id, u.delivered, u.response_ms FROM tidings.attempt_tallies t,"
            " unnest(t.message_ids, t.delivered, t.response_ms) AS u (message_id, delivered,"
            " response_ms) ORDER BY 1, 2 NULLS FIRST"
        )
        assert cur.fetchall() == [
            (failed, False, 42),
            (recent, None, None),
            (recent, True, 42),
            (old, None, None),
            (stray, None, None),
        ]
        cur.execute("SELECT job, details FROM tidings.job_state ORDER BY job")
        # The backfill ran once; the percentiles are built again from the tallies.
        assert cur.fetchall() == [("percentiles", {})]
    # Running the migrations again changes nothing.
    assert migrations.migrate(conn) == []
    conn.close()

    db = Database(empty_database)
    try:
        # The lease taken before the upgrade still holds the row: its sender records it.
        with db.cursor() as cur:
            recorded = delivery.record_outcomes(
                cur,
                [
                    AttemptOutcome(
                        Lease(leased, token), endpoint, MessageStatus.DELIVERED, 1, now, 200, 9
                    )
                ],
                base_cooldown_s=300,
                max_cooldown_s=3600,
            )
            assert recorded.written_ids == {leased}
        # The message delivered nine days ago goes with the pruner's next run; the others stay.
        result = prune(db, Settings(), now)
        assert result.delivered_deleted == 1
        with db.cursor() as cur:
            cur.execute("SELECT id FROM tidings.messages ORDER BY id")
            assert [row[0] for row in cur.fetchall()] == [
                pending,
                leased,
                failed,
                recent,
                dead,
                stray,
            ]
    finally:
        db.close()
