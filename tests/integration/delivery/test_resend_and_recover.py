"""Resend and recover against the delivery pipeline: a new delivery is never written to by the
old one, and they race senders and replays on several connections without losing or doubling
anything."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.delivery.delivery_harness import (
    Pipeline,
    attempt_rows,
    make_pipeline,
    message_row,
    only_message_id,
)
from tests.integration.maintenance.scheduled_support import make_messages
from tests.support.receivers import Receiver, running_receiver
from tests.support.seed import make_endpoint, mark_answered, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database, fetch_dicts
from tidings.dal.delivery import AttemptOutcome, Lease, MessageStatus
from tidings.local.queue import LocalQueue
from tidings.logic.errors import Conflict
from tidings.logic.replay import replay_dead_letters
from tidings.logic.resend import recover_endpoint, resend_message


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


def repeat_of_the_first_outcome(db: Database, message_id: int, row: dict[str, Any]) -> Any:
    """The record call of the message's first attempt, as a sender whose answer was lost sends
    it again (the same attempt, under the lease it was made under)."""
    [first] = [a for a in attempt_rows(db, message_id) if a["attempt_number"] == 1]
    with db.cursor() as cur:
        cur.execute(
            "SELECT attempted_at FROM tidings.attempts"
            " WHERE message_id = %s AND attempt_number = 1",
            (message_id,),
        )
        (attempted_at,) = cur.fetchone() or (None,)
    outcome = AttemptOutcome(
        lease=Lease(message_id, row["lease_token"]),
        endpoint_id=row["endpoint_id"],
        status=MessageStatus.FAILED,
        attempt_number=1,
        attempted_at=attempted_at,
        status_code=first["status_code"],
        error_class=first["error_class"],
        retry_at=datetime.now(UTC) + timedelta(seconds=5),
        keep_lease=True,
    )
    return db.run(
        lambda cur: delivery.record_outcomes(
            cur, [outcome], base_cooldown_s=300, max_cooldown_s=3600
        )
    )


def test_a_recovered_message_is_never_written_by_its_old_delivery(
    db: Database, receiver: Receiver
) -> None:
    pipeline = make_pipeline(db, lease_s=120, retry_schedule=(2.0, 60.0))
    clock = [0.0]
    pipeline.queue.inner = LocalQueue(visibility_timeout_s=30, clock=lambda: clock[0])
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, receiver.url("status/500"))
        mark_answered(cur, endpoint)
        seed_messages(cur, endpoint, 1)
        cur.execute("UPDATE tidings.messages SET created_at = now() - interval '1 minute'")
    pipeline.claim_and_deliver()
    message = only_message_id(db)
    failed = {**message_row(db, message), "endpoint_id": endpoint}
    # Its retry travels through the queue, under the lease of its first attempt.
    assert (failed["status"], failed["attempts"]) == ("failed", 1)
    assert failed["lease_token"] is not None

    result = recover_endpoint(db, endpoint, since=datetime.now(UTC) - timedelta(hours=1))
    assert (result.matched, result.requeued) == (1, 1)
    row = message_row(db, message)
    assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)

    # The old delivery's outcome, sent again late: with attempts reset and the same lease it
    # would have counted for the new delivery's first attempt. It finds no row to write.
    repeat_of_the_first_outcome(db, message, failed)
    row = message_row(db, message)
    assert (row["status"], row["attempts"]) == ("pending", 0)
    # The old delivery's retry message arrives: it no longer holds the row, nothing is sent.
    clock[0] += 10
    sent_before = len(receiver.requests)
    report = pipeline.deliver_queued()
    assert (report.skipped, len(receiver.requests)) == (1, sent_before)

    # The new delivery goes its own way.
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoints SET url = %s", (receiver.url("ok"),))
    pipeline.claim_and_deliver()
    row = message_row(db, message)
    assert (row["status"], row["attempts"]) == ("delivered", 1)
    assert [a["attempt_number"] for a in attempt_rows(db, message)] == [1, 1]


def test_a_resent_dead_letter_is_never_written_by_its_old_delivery(
    db: Database, receiver: Receiver
) -> None:
    # One attempt allowed: the 500 makes it a dead letter at once.
    pipeline: Pipeline = make_pipeline(db, lease_s=120, max_attempts=1)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, receiver.url("status/500"))
        seed_messages(cur, endpoint, 1)
    pipeline.claim_and_deliver()
    message = only_message_id(db)
    assert message_row(db, message)["status"] == "dead_letter"
    # The lease its last outcome was written under (a settled message is out of the queue, and its
    # lease with it: any token stands for the old one).
    dead = {**message_row(db, message), "endpoint_id": endpoint, "lease_token": uuid.uuid4()}

    resent = resend_message(db, message)

    assert (resent.status, resent.attempts) == ("pending", 0)
    assert message_row(db, message)["lease_token"] is None
    repeat_of_the_first_outcome(db, message, dead)
    row = message_row(db, message)
    assert (row["status"], row["attempts"]) == ("pending", 0)
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoints SET url = %s", (receiver.url("ok"),))
    pipeline.claim_and_deliver()
    assert message_row(db, message)["status"] == "delivered"
    # The same webhook-id both times: the receiver can tell it is the same message.
    ok = receiver.requests_to("ok")[0].headers["webhook-id"]
    assert ok == receiver.requests_to("status/500")[0].headers["webhook-id"] == f"msg_{message}"


def test_resend_racing_a_sender_either_waits_for_it_or_starts_after_it(
    database_url: str, db: Database
) -> None:
    messages = 30
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        seed_messages(cur, endpoint, messages)
    claimed = db.run(lambda cur: delivery.claim_due(cur, batch_size=messages, lease_s=60))
    started = db.run(
        lambda cur: delivery.begin_attempts(
            cur,
            [delivery.AttemptRequest(c.lease, c.attempts + 1) for c in claimed],
            lease_s=60,
        )
    )
    assert len(started) == messages
    outcomes: dict[int, str] = {}
    errors: list[BaseException] = []

    def sender(row: delivery.StartedAttempt, go: threading.Barrier, own: Database) -> None:
        outcome = AttemptOutcome(
            lease=row.lease,
            endpoint_id=row.endpoint_id,
            status=MessageStatus.DELIVERED,
            attempt_number=1,
            attempted_at=datetime.now(UTC),
            status_code=200,
        )
        go.wait()
        own.run(
            lambda cur: delivery.record_outcomes(
                cur, [outcome], base_cooldown_s=300, max_cooldown_s=3600
            )
        )

    def operator(message_id: int, go: threading.Barrier, own: Database) -> None:
        go.wait()
        try:
            resend_message(own, message_id)
            outcomes[message_id] = "resent"
        except Conflict as exc:
            outcomes[message_id] = exc.code

    sender_db, operator_db = Database(database_url), Database(database_url)
    try:
        for row in started:
            go = threading.Barrier(2)
            threads = [
                threading.Thread(target=sender, args=(row, go, sender_db)),
                threading.Thread(target=operator, args=(row.message_id, go, operator_db)),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(30)
    except BaseException as exc:
        errors.append(exc)
    finally:
        sender_db.close()
        operator_db.close()
    assert not errors

    with db.cursor() as cur:
        cur.execute(
            "SELECT id, status::text AS status, attempts, lease_token,"
            " (SELECT count(*) FROM tidings.attempts a WHERE a.message_id = m.id) AS logged"
            " FROM tidings.messages m ORDER BY id"
        )
        final = {r["id"]: r for r in fetch_dicts(cur)}
    assert set(outcomes) == set(final)
    for message_id, verdict in outcomes.items():
        row = final[message_id]
        # The sender's outcome is written exactly once either way.
        assert row["logged"] == 1
        if verdict == "resent":
            # It came after the delivery was recorded: a new delivery, not yet attempted.
            assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)
        else:
            # It came while the message was in flight: refused, the delivery stands.
            assert verdict == "message_not_finished"
            assert (row["status"], row["attempts"]) == ("delivered", 1)


def test_recover_racing_a_replay_sends_each_dead_letter_again_once(
    database_url: str, db: Database
) -> None:
    dead_letters = 300
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        make_messages(
            cur,
            endpoint,
            dead_letters,
            status="dead_letter",
            created_at=datetime.now(UTC) - timedelta(minutes=30),
            dead_lettered_at=datetime.now(UTC),
            attempts=8,
        )
    counts: dict[str, int] = {}
    errors: list[BaseException] = []
    go = threading.Barrier(2)

    def recover() -> None:
        own = Database(database_url)
        try:
            go.wait()
            result = recover_endpoint(
                own, endpoint, since=datetime.now(UTC) - timedelta(hours=1), batch_size=7
            )
            counts["recover"] = result.requeued
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    def replay() -> None:
        own = Database(database_url)
        try:
            go.wait()
            counts["replay"] = replay_dead_letters(own, endpoint_id=endpoint, batch_size=5).requeued
        except BaseException as exc:
            errors.append(exc)
        finally:
            own.close()

    threads = [threading.Thread(target=recover), threading.Thread(target=replay)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    assert counts["recover"] + counts["replay"] == dead_letters
    with db.cursor() as cur:
        cur.execute("SELECT status::text, attempts, count(*) FROM tidings.messages GROUP BY 1, 2")
        assert cur.fetchall() == [("pending", 0, dead_letters)]
