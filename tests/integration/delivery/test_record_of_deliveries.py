"""A record whose outcomes all delivered their messages takes record_outcomes_v1's lean statement.

The lean statement leaves out the steps of retries, FIFO batches and operational events; these
tests hold it to the same writes and guards as the full statement, which a call with any other
outcome takes.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.seed import COOLDOWNS, make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import AttemptOutcome, ClaimedMessage, Lease, MessageStatus

# What a delivery writes to its message row, compared between the two statements.
MESSAGE_COLUMNS = (
    "status::text, attempts, delivered_at IS NOT NULL, dead_lettered_at, dead_letter_reported_at,"
    " last_error, last_status_code, last_response_ms, last_attempted_at, last_excerpt"
)


def delivered(claimed: ClaimedMessage, at: datetime, **changes: Any) -> AttemptOutcome:
    fields: dict[str, Any] = {
        "lease": claimed.lease,
        "endpoint_id": claimed.endpoint_id,
        "status": MessageStatus.DELIVERED,
        "attempt_number": claimed.attempts + 1,
        "attempted_at": at,
        "status_code": 200,
        "response_ms": 7,
        "response_excerpt": "ok",
    } | changes
    return AttemptOutcome(**fields)


def record(db: Database, outcomes: list[AttemptOutcome]) -> delivery.RecordResult:
    with db.cursor() as cur:
        return delivery.record_outcomes(cur, outcomes, **COOLDOWNS)


def message_rows(db: Database, ids: list[int]) -> list[tuple[Any, ...]]:
    with db.cursor() as cur:
        cur.execute(
            f"SELECT {MESSAGE_COLUMNS} FROM tidings.message_rows WHERE id = ANY(%s) ORDER BY id",
            (ids,),
        )
        return cur.fetchall()


def tallied(db: Database) -> list[tuple[int, int, bool]]:
    """Every (message, latency, success) the attempt tallies hold."""
    with db.cursor() as cur:
        cur.execute(
            "SELECT m, r, d FROM tidings.attempt_tallies t,"
            " unnest(t.message_ids, t.response_ms, t.delivered) AS u(m, r, d) ORDER BY m"
        )
        return cur.fetchall()


def logged(db: Database) -> list[tuple[int, int]]:
    with db.cursor() as cur:
        cur.execute("SELECT message_id, attempt_number FROM tidings.attempt_log ORDER BY 1, 2")
        return cur.fetchall()


def in_queue(db: Database, ids: list[int]) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.queue WHERE message_id = ANY(%s)", (ids,))
        (count,) = cur.fetchone()
        return int(count)


def claim(db: Database, count: int) -> list[ClaimedMessage]:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), count)
        return delivery.claim_due(cur, batch_size=count, lease_s=60)


def test_deliveries_write_what_the_full_statement_writes_for_them(db: Database) -> None:
    at = datetime.now(UTC).replace(microsecond=0)
    lean_rows = claim(db, 2)
    full_rows = claim(db, 3)

    lean = record(db, [delivered(c, at) for c in lean_rows])
    # One failed outcome in the call sends the whole call through the full statement.
    failing = full_rows[2]
    full = record(
        db,
        [delivered(c, at) for c in full_rows[:2]]
        + [
            delivered(
                failing,
                at,
                status=MessageStatus.FAILED,
                status_code=503,
                retry_at=at + timedelta(minutes=5),
            )
        ],
    )

    lean_ids = [c.message_id for c in lean_rows]
    full_ids = [c.message_id for c in full_rows[:2]]
    assert lean.written_ids == set(lean_ids)
    assert full.written_ids == {c.message_id for c in full_rows}
    assert message_rows(db, lean_ids) == message_rows(db, full_ids)
    assert message_rows(db, lean_ids)[0][:3] == ("delivered", 1, True)
    assert in_queue(db, lean_ids) == in_queue(db, full_ids) == 0
    tallies = {m: (r, d) for m, r, d in tallied(db)}
    assert [tallies[i] for i in lean_ids] == [tallies[i] for i in full_ids] == [(7, True)] * 2
    # Only the failed attempt is in the attempt log: a delivered one is on its message's row.
    assert logged(db) == [(failing.message_id, 1)]


def test_deliveries_recorded_twice_are_written_and_counted_once(db: Database) -> None:
    at = datetime.now(UTC)
    rows = claim(db, 3)
    outcomes = [delivered(c, at) for c in rows]
    first = record(db, outcomes)
    # As after a connection lost once the first call had committed: the caller never saw its
    # answer, calls again, and must hear that the rows are written.
    again = record(db, outcomes)
    ids = [c.message_id for c in rows]
    assert first.written_ids == again.written_ids == set(ids)
    assert [row[:2] for row in message_rows(db, ids)] == [("delivered", 1)] * 3
    assert [m for m, _, _ in tallied(db)] == ids
    assert logged(db) == []


def test_a_delivery_under_a_lease_that_has_gone_is_logged_and_leaves_the_message_alone(
    db: Database,
) -> None:
    at = datetime.now(UTC)
    (row,) = claim(db, 1)
    stale = delivered(row, at, lease=Lease(row.message_id, uuid.uuid4()))
    result = record(db, [stale])
    assert result.written_ids == frozenset()
    # The attempt happened all the same: it is logged and tallied, the message stays in flight
    # under its own lease.
    assert logged(db) == [(row.message_id, 1)]
    assert [m for m, _, _ in tallied(db)] == [row.message_id]
    assert message_rows(db, [row.message_id])[0][1] == 0
    assert in_queue(db, [row.message_id]) == 1
    # And the holder of the lease still records its own delivery.
    assert record(db, [delivered(row, at + timedelta(seconds=1))]).written_ids == {row.message_id}


def test_a_delivery_of_an_attempt_already_counted_is_not_written(db: Database) -> None:
    at = datetime.now(UTC)
    (row,) = claim(db, 1)
    wrong_attempt = delivered(row, at, attempt_number=row.attempts + 2)
    assert record(db, [wrong_attempt]).written_ids == frozenset()
    assert message_rows(db, [row.message_id])[0][1] == 0
    assert in_queue(db, [row.message_id]) == 1
