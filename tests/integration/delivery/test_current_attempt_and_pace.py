"""Every write of an outcome belongs to the row's current attempt, and every request to a
rate-limited endpoint spends a token, whatever path its row took."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.delivery.delivery_harness import make_pipeline, message_row
from tests.support.receivers import Receiver, running_receiver
from tests.support.seed import COOLDOWNS, make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import AttemptOutcome, AttemptRequest, MessageStatus


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


def test_a_stale_copy_of_a_queue_message_cannot_overwrite_a_newer_outcome(db: Database) -> None:
    """Two copies of attempt 1 (a queue delivers at least once): copy A answers 503 and is
    retried, attempt 2 answers 200; copy B's 400 must neither be sent nor written."""
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 1)
        (claimed,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
        request = AttemptRequest(claimed.lease, 1)
        (copy_a,) = delivery.begin_attempts(cur, [request], lease_s=60)
        assert copy_a.permitted
        # Copy B holds the same queue message: the row is no longer its own.
        assert delivery.begin_attempts(cur, [request], lease_s=60) == []
        retry = AttemptOutcome(
            copy_a.lease,
            endpoint_id,
            MessageStatus.FAILED,
            1,
            now,
            503,
            5,
            "http_503",
            retry_at=now + timedelta(seconds=90),
            keep_lease=True,
        )
        delivery.record_outcomes(cur, [retry], **COOLDOWNS)
        (second,) = delivery.begin_attempts(cur, [AttemptRequest(copy_a.lease, 2)], lease_s=60)
        stale = AttemptOutcome(
            claimed.lease,
            endpoint_id,
            MessageStatus.DEAD_LETTER,
            1,
            now + timedelta(milliseconds=300),
            400,
            5,
            "http_400",
        )
        assert delivery.record_outcomes(cur, [stale], **COOLDOWNS).written_ids == frozenset()
        done = AttemptOutcome(
            second.lease, endpoint_id, MessageStatus.DELIVERED, 2, now + timedelta(1), 200, 5
        )
        assert delivery.record_outcomes(cur, [done], **COOLDOWNS).written_ids == {
            claimed.message_id
        }
    row = message_row(db, claimed.message_id)
    assert (row["status"], row["attempts"], row["last_status_code"]) == ("delivered", 2, 200)


def test_two_copies_of_a_queue_message_in_one_batch_begin_the_row_once(db: Database) -> None:
    """A queue may hand one message to a sender twice in the same batch: the row is begun
    once, with one new lease, and answered once."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 2)
        first, second = delivery.claim_due(cur, batch_size=2, lease_s=60)
        requests = [
            AttemptRequest(first.lease, 1),
            AttemptRequest(second.lease, 1),
            AttemptRequest(first.lease, 1),
        ]
        started = delivery.begin_attempts(cur, requests, lease_s=60)
    assert sorted(row.message_id for row in started) == [first.message_id, second.message_id]
    assert all(row.permitted for row in started)
    assert {row.lease_token for row in started}.isdisjoint({first.lease_token, second.lease_token})


def test_an_outcome_for_another_attempt_than_the_current_one_is_refused(db: Database) -> None:
    """Even under the lease that holds the row, only the attempt that is due may be written."""
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 1)
        (claimed,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
        (started,) = delivery.begin_attempts(cur, [AttemptRequest(claimed.lease, 1)], lease_s=60)
        for wrong in (2, 3):
            outcome = AttemptOutcome(
                started.lease, endpoint_id, MessageStatus.DELIVERED, wrong, now, 200, 5
            )
            result = delivery.record_outcomes(cur, [outcome], **COOLDOWNS)
            assert claimed.message_id not in result.written_ids
        right = AttemptOutcome(started.lease, endpoint_id, MessageStatus.DELIVERED, 1, now, 200, 5)
        assert delivery.record_outcomes(cur, [right], **COOLDOWNS).written_ids == {
            claimed.message_id
        }


def test_retries_of_a_rate_limited_endpoint_are_paced_by_its_bucket(
    db: Database, receiver: Receiver
) -> None:
    """An endpoint limited to 1 request a second, whose 20 messages all fail with 503 and are
    retried within a fraction of a second, still receives no more than 1 a second."""
    pipeline = make_pipeline(db, lease_s=30, backoff_base_s=0.05, backoff_max_s=0.2)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, receiver.url("status/503"), rate_limit_per_s=1.0)
        seed_messages(cur, endpoint_id, 20)
    started = time.monotonic()
    while time.monotonic() - started < 5.0:
        pipeline.claimer.claim_once()
        pipeline.deliver_queued()
        time.sleep(0.02)
    elapsed = time.monotonic() - started
    sent = len(receiver.requests)
    # A full bucket (1) to begin with, then 1 a second.
    assert 2 <= sent <= 1 + elapsed * 1.0 + 1, f"{sent} requests in {elapsed:.1f} s"
