"""The claimer against real PostgreSQL: envelopes, released leases, the polling loop, overlap."""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from tests.integration.delivery.delivery_harness import (
    RecordingQueue,
    envelopes,
    make_pipeline,
    message_row,
    pipeline_settings,
)
from tests.support.seed import make_endpoint, mark_answered, seed_messages
from tidings.dal.connection import Database
from tidings.delivery.claimer import Claimer
from tidings.delivery.envelope import INLINE_PAYLOAD_BYTES, DeliveryEnvelope
from tidings.queue import MAX_BODY_BYTES


def test_a_claimed_row_travels_as_an_envelope_with_its_lease_and_payload(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        # Answered before: its rows travel the fast lane, several to a message.
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, 3)
    queue = RecordingQueue()

    result = Claimer(db, queue, pipeline_settings()).claim_once()

    assert (result.claimed, result.sent, result.released) == (3, 3, 0)
    # One queue message carries the three (deliveries_per_message), named after its first row.
    [message] = queue.sent
    assert message.delay_s == 0
    assert message.id == str(envelopes(queue.sent)[0].message_id)
    for envelope in envelopes(queue.sent):
        row = message_row(db, envelope.message_id)
        assert row["status"] == "in_flight"
        assert row["lease_token"] == envelope.lease_token
        assert envelope.attempt == 1
        with db.cursor() as cur:
            cur.execute(
                "SELECT ev.payload::text FROM tidings.events ev"
                " JOIN tidings.messages m ON m.event_ref = ev.id WHERE m.id = %s",
                (envelope.message_id,),
            )
            assert envelope.payload == cur.fetchone()[0]  # type: ignore[index]


def test_a_payload_too_large_for_the_queue_stays_in_the_database(db: Database) -> None:
    big = "y" * (INLINE_PAYLOAD_BYTES + 10)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        cur.execute(
            "WITH ev AS (INSERT INTO tidings.events (event_type, event_id, payload)"
            " VALUES ('big', 'big-1', jsonb_build_object('data', %s::text)) RETURNING id)"
            " INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)"
            " SELECT id, %s, 'big' FROM ev",
            (big, endpoint_id),
        )
    queue = RecordingQueue()

    Claimer(db, queue, pipeline_settings()).claim_once()

    [message] = queue.sent
    assert len(message.body.encode()) < 200
    assert DeliveryEnvelope.from_body(message.body).payload is None


def test_a_payload_that_escapes_past_the_limit_is_left_out_of_the_envelope() -> None:
    # Quotes double in size once escaped inside the JSON body.
    payload = json.dumps('"' * (INLINE_PAYLOAD_BYTES // 2))
    envelope = DeliveryEnvelope(1, DeliveryEnvelope.from_body(_body()).lease_token, 1, payload)
    body = envelope.to_body()
    assert len(body.encode()) <= MAX_BODY_BYTES
    assert DeliveryEnvelope.from_body(body).payload is None


def _body() -> str:
    return json.dumps(
        {"message_id": 1, "lease_token": "6f1c1f9e-7d39-4a55-9d67-3c8c2f1c0b11", "attempt": 1}
    )


def test_rows_the_queue_refused_are_released_at_once(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 4)
        cur.execute("SELECT id FROM tidings.messages ORDER BY id")
        ids = [row[0] for row in cur.fetchall()]
    queue = RecordingQueue()
    queue.refuse = {str(ids[0]), str(ids[2])}

    # One row to a message, so that the queue refuses some rows and takes others.
    result = Claimer(db, queue, pipeline_settings(deliveries_per_message=1)).claim_once()

    assert (result.claimed, result.sent, result.released) == (4, 2, 2)
    for message_id in (ids[0], ids[2]):
        row = message_row(db, message_id)
        assert (row["status"], row["lease_token"]) == ("pending", None)
        assert row["next_attempt_at"] <= row["db_now"]
    assert message_row(db, ids[1])["status"] == "in_flight"


def test_a_queue_that_raises_gets_every_lease_back(db: Database) -> None:
    class Broken(RecordingQueue):
        def send_batch(self, messages):  # type: ignore[no-untyped-def]
            raise RuntimeError("queue endpoint unreachable")

    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 3)

    with pytest.raises(RuntimeError, match="unreachable"):
        Claimer(db, Broken(), pipeline_settings()).claim_once()

    with db.cursor() as cur:
        cur.execute("SELECT status::text, count(*) FROM tidings.messages GROUP BY 1")
        assert cur.fetchall() == [("pending", 3)]


class FakeTime:
    """A Lambda time budget that only sleeping (and each claim) spends."""

    def __init__(self, budget_ms: int) -> None:
        self.remaining = budget_ms
        self.sleeps: list[float] = []

    def remaining_ms(self) -> int:
        return self.remaining

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.remaining -= round(seconds * 1000)


def test_the_loop_claims_again_at_once_after_work_and_pauses_when_idle(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 25)
    settings = pipeline_settings(
        claim_batch_size=10, claim_idle_poll_s=1.0, claim_stop_before_timeout_s=10.0
    )
    clock = FakeTime(budget_ms=13_500)
    queue = RecordingQueue()

    summary = Claimer(db, queue, settings, sleep=clock.sleep).run(clock.remaining_ms)

    assert summary.claimed == 25
    assert len(envelopes(queue.sent)) == 25
    # Three full-or-partial rounds with no pause between, then idle polls of a second each until
    # 10 s remain; the last pause is cut short so the loop ends on time.
    assert clock.sleeps == [1.0, 1.0, 1.0, 0.5]
    assert summary.rounds == 3 + 4
    assert clock.remaining == 10_000


def test_the_loop_does_not_start_when_the_budget_is_already_spent(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 5)
    clock = FakeTime(budget_ms=9_000)
    summary = Claimer(
        db, RecordingQueue(), pipeline_settings(claim_stop_before_timeout_s=10.0), sleep=clock.sleep
    ).run(clock.remaining_ms)
    assert summary.rounds == 0


def test_overlapping_claimers_send_every_row_exactly_once(database_url: str) -> None:
    setup = Database(database_url)
    with setup.cursor() as cur:
        for _ in range(4):
            seed_messages(cur, make_endpoint(cur), 300)
    setup.close()
    queue = RecordingQueue()
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def claim_all() -> None:
        db = Database(database_url)
        try:
            claimer = Claimer(db, queue, pipeline_settings(claim_batch_size=50))
            barrier.wait()
            while claimer.claim_once().claimed:
                pass
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=claim_all) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    sent = Counter(envelope.message_id for envelope in envelopes(queue.sent))
    assert len(sent) == 1200
    assert set(sent.values()) == {1}


def test_an_expired_lease_is_claimed_again_with_a_new_token(db: Database) -> None:
    pipeline = make_pipeline(db)
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
    pipeline.claimer.claim_once()
    assert pipeline.claimer.claim_once().claimed == 0
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.messages SET next_attempt_at = now() - interval '1 second'")

    assert pipeline.claimer.claim_once().claimed == 1
    first, second = envelopes(pipeline.queue.sent)
    assert first.message_id == second.message_id
    assert first.lease_token != second.lease_token


def test_a_payload_with_characters_sqs_refuses_is_still_queued_intact(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        cur.execute(
            "WITH ev AS (INSERT INTO tidings.events (event_type, event_id, payload)"
            " VALUES ('odd', 'odd-1', jsonb_build_object('s', chr(65534))) RETURNING id)"
            " INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)"
            " SELECT id, %s, 'odd' FROM ev",
            (endpoint_id,),
        )
        cur.execute("SELECT payload::text FROM tidings.events")
        stored = cur.fetchone()[0]  # type: ignore[index]
    queue = RecordingQueue()

    result = Claimer(db, queue, pipeline_settings()).claim_once()

    assert (result.claimed, result.sent) == (1, 1)
    assert "\ufffe" in stored
    assert envelopes(queue.sent)[0].payload == stored


def test_a_refused_packed_message_releases_every_row_it_carried(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, 13)
    queue = RecordingQueue()
    settings = pipeline_settings(deliveries_per_message=5)
    # Three messages of 5, 5 and 3 rows, named after their first rows; the second is refused.
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages ORDER BY id")
        ids = [row[0] for row in cur.fetchall()]
    queue.refuse = {str(ids[5])}

    result = Claimer(db, queue, settings).claim_once()

    assert [len(envelopes([m])) for m in queue.sent] == [5, 5, 3]
    assert (result.claimed, result.sent, result.released) == (13, 8, 5)
    statuses = [message_row(db, message_id)["status"] for message_id in ids]
    assert statuses == ["in_flight"] * 5 + ["pending"] * 5 + ["in_flight"] * 3
