"""One record can never fail its batch (issue 11): whatever one receiver answers, whatever one
queue message holds, and whatever goes wrong inside the sender on one record, its neighbours in
the batch are sent and recorded as usual."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest

from tests.integration.delivery.delivery_harness import (
    Pipeline,
    attempt_rows,
    health_row,
    make_pipeline,
    message_row,
    seconds_until,
)
from tests.support.receivers import Receiver, running_receiver
from tests.support.seed import make_endpoint, mark_answered, seed_messages
from tidings.dal.connection import Database
from tidings.delivery import attempt as attempt_module
from tidings.delivery import retry_policy
from tidings.delivery import sender as sender_module
from tidings.delivery import sending as sending_module
from tidings.delivery.envelope import envelopes_of
from tidings.delivery.sender import BatchReport, QueueRecord

LEASE_S = 120.0
# The longest first backoff with the default base of 30 s.
FIRST_BACKOFF_CAP_S = 30.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


@pytest.fixture
def pipeline(db: Database) -> Pipeline:
    return make_pipeline(db, lease_s=LEASE_S)


def _endpoint(db: Database, url: str, messages: int) -> tuple[int, list[int]]:
    """An endpoint that has answered before (no cap: a batch may carry several of its rows) with
    ``messages`` due rows."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, url)
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, messages)
        cur.execute(
            "SELECT id FROM tidings.messages WHERE endpoint_id = %s ORDER BY id", (endpoint_id,)
        )
        ids = [int(row[0]) for row in cur.fetchall()]
    return endpoint_id, ids


def _one_batch(pipeline: Pipeline, extra: list[QueueRecord] | None = None) -> BatchReport:
    """Claim everything due and hand it to the sender as one batch (at most ten records)."""
    claimed = pipeline.claimer.claim_once().claimed
    received = pipeline.queue.receive(max_messages=10)
    carried = sum(len(envelopes_of(m.body)) for m in received)
    assert carried == claimed, "the test's rows must fit in one batch"
    records = [QueueRecord(m.message_id, m.body) for m in received] + (extra or [])
    return pipeline.sender.process(records)


def _carried_ids(body: str) -> set[int]:
    return {envelope.message_id for envelope in envelopes_of(body)}


def _statuses(db: Database, ids: list[int]) -> list[tuple[str, int, str | None]]:
    return [
        (row["status"], row["attempts"], row["last_error"])
        for row in (message_row(db, message_id) for message_id in ids)
    ]


def _healthy_neighbours(db: Database, receiver: Receiver, count: int = 5) -> list[int]:
    _, ids = _endpoint(db, receiver.url("ok"), count)
    return ids


def _assert_delivered_once(db: Database, receiver: Receiver, ids: list[int]) -> None:
    assert _statuses(db, ids) == [("delivered", 1, None)] * len(ids)
    assert len(receiver.requests_to("ok")) == len(ids)


# --- defect 1: the receiver's Retry-After ------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "header"),
    [
        (503, "Mon, 01 Jan 2024 99999999999999999999:00:00 GMT"),
        (429, "99999999999999999999"),
        (503, "Sun, 06 Nov 1994 08:49:37 GMT"),
        (429, "-30"),
        (503, "1.5"),
        (429, "5, 7"),
        # A digit to str.isdigit(), not to HTTP (and a header can carry it: it is Latin-1).
        (503, "\u00b2"),
        (429, ""),
    ],
)
def test_an_unusable_retry_after_is_a_plain_retry_and_fails_nobody_else(
    db: Database, pipeline: Pipeline, receiver: Receiver, status: int, header: str
) -> None:
    healthy = _healthy_neighbours(db, receiver)
    _, hostile = _endpoint(db, receiver.url(f"retry-after/{status}/{quote(header, safe='')}"), 3)

    report = _one_batch(pipeline)

    assert (report.delivered, report.retried, report.failed_record_ids) == (5, 3, frozenset())
    _assert_delivered_once(db, receiver, healthy)
    assert _statuses(db, hostile) == [("failed", 1, f"http_{status}")] * 3
    for message_id in hostile:
        # The header is ignored, not honoured as "forever": the backoff decides.
        assert seconds_until(message_row(db, message_id)) <= FIRST_BACKOFF_CAP_S + LEASE_S + 2


# --- defect 1: a defect of the sender's own on one record --------------------------------------


def test_a_failure_while_deciding_one_record_counts_as_its_internal_error(
    db: Database, pipeline: Pipeline, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_classify = retry_policy.classify

    def classify_failing_on_418(status_code: int | None, *args: Any, **kwargs: Any) -> Any:
        if status_code == 418:
            raise OverflowError("Python int too large to convert to C long")
        return real_classify(status_code, *args, **kwargs)

    monkeypatch.setattr(attempt_module.retry_policy, "classify", classify_failing_on_418)
    healthy = _healthy_neighbours(db, receiver)
    teapot_endpoint, [teapot] = _endpoint(db, receiver.url("status/418"), 1)

    report = _one_batch(pipeline)

    assert (report.delivered, report.retried, report.failed_record_ids) == (5, 1, frozenset())
    _assert_delivered_once(db, receiver, healthy)
    row = message_row(db, teapot)
    assert (row["status"], row["attempts"], row["last_error"]) == ("failed", 1, "internal_error")
    # Retried through the database after the backoff, without a lease or a queue message.
    assert row["lease_token"] is None
    assert 0 <= seconds_until(row) <= FIRST_BACKOFF_CAP_S + 2
    carrying = [m for m in pipeline.queue.sent if teapot in _carried_ids(m.body)]
    assert len(carrying) == 1, "the claim's message only"
    [logged] = attempt_rows(db, teapot)
    assert (logged["error_class"], logged["status_code"]) == ("internal_error", None)
    assert health_row(db, teapot_endpoint)["consecutive_failures"] == 0

    # It counts attempts like any failure: on the last one it becomes a dead letter.
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET max_attempts = 2, next_attempt_at = now() WHERE id = %s",
            (teapot,),
        )
    pipeline.claim_and_deliver()
    assert _statuses(db, [teapot]) == [("dead_letter", 2, "internal_error")]


def test_a_failure_while_preparing_one_record_counts_as_its_internal_error(
    db: Database, pipeline: Pipeline, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_request_of = sending_module.request_of

    def request_of(job: Any) -> Any:
        if job.row.url.endswith("/boom"):
            raise UnicodeError("a defect in the sender")
        return real_request_of(job)

    monkeypatch.setattr(sending_module, "request_of", request_of)
    healthy = _healthy_neighbours(db, receiver)
    _, [boom] = _endpoint(db, receiver.url("ok/boom"), 1)

    report = _one_batch(pipeline)

    assert (report.delivered, report.retried, report.failed_record_ids) == (5, 1, frozenset())
    _assert_delivered_once(db, receiver, healthy)
    assert _statuses(db, [boom]) == [("failed", 1, "internal_error")]
    assert receiver.requests_to("ok/boom") == []


def test_a_transport_that_fails_whole_costs_its_part_an_attempt_and_nothing_more(
    db: Database, pipeline: Pipeline, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the transport itself raise (a defect: it answers for receivers and the network),
    what it was sending is unknown: each row of the part is a failed attempt, recorded, and the
    batch's queue messages are acknowledged."""

    def post_all(posts: Any) -> Any:
        raise MemoryError("a defect in the transport")

    monkeypatch.setattr(pipeline.transport, "post_all", post_all)
    ids = _healthy_neighbours(db, receiver)

    report = _one_batch(pipeline)

    assert (report.delivered, report.retried, report.failed_record_ids) == (0, 5, frozenset())
    assert _statuses(db, ids) == [("failed", 1, "internal_error")] * len(ids)


def test_a_parts_requests_go_out_side_by_side_on_the_invoking_thread(
    db: Database, pipeline: Pipeline, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer_ms = 500
    _, ids = _endpoint(db, receiver.url(f"slow/{answer_ms}"), 5)
    threads: list[str] = []
    real_post_all = pipeline.transport.post_all

    def post_all(posts: Any) -> Any:
        threads.append(threading.current_thread().name)
        return real_post_all(posts)

    monkeypatch.setattr(pipeline.transport, "post_all", post_all)
    started = time.monotonic()

    report = _one_batch(pipeline)

    elapsed = time.monotonic() - started
    assert report.delivered == len(ids)
    assert _statuses(db, ids) == [("delivered", 1, None)] * len(ids)
    # One call for the part, on the invoking thread; five answers waited for side by side: the
    # part took about one answer's time, far less than five.
    assert threads == [threading.current_thread().name]
    assert len(receiver.requests_to(f"slow/{answer_ms}")) == len(ids)
    assert elapsed < len(ids) * answer_ms / 1000 / 2


def test_an_outcome_the_record_statement_refuses_is_recorded_alone_as_an_internal_error(
    db: Database, pipeline: Pipeline, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy = _healthy_neighbours(db, receiver)
    _, [victim] = _endpoint(db, receiver.url("status/500"), 1)
    real_decide = sender_module.decide

    def decide(attempt: Any, *args: Any, **kwargs: Any) -> Any:
        decision = real_decide(attempt, *args, **kwargs)
        if attempt.job.row.message_id != victim:
            return decision
        # A value out of the column's range: the statement fails for everything it carries.
        broken = dataclasses.replace(decision.outcome, status_code=2**40)
        return dataclasses.replace(decision, outcome=broken)

    monkeypatch.setattr(sender_module, "decide", decide)

    report = _one_batch(pipeline)

    assert (report.delivered, report.retried, report.failed_record_ids) == (5, 1, frozenset())
    _assert_delivered_once(db, receiver, healthy)
    assert _statuses(db, [victim]) == [("failed", 1, "internal_error")]
    assert [a["error_class"] for a in attempt_rows(db, victim)] == ["internal_error"]


def test_a_retry_message_that_cannot_be_built_leaves_its_row_to_the_database(
    db: Database, pipeline: Pipeline, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    healthy = _healthy_neighbours(db, receiver, 3)
    _, retried = _endpoint(db, receiver.url("status/503"), 2)
    real_build = sender_module._retry_message

    def build(key: str, decision: Any) -> Any:
        if key == str(retried[0]):
            raise ValueError("cannot build")
        return real_build(key, decision)

    monkeypatch.setattr(sender_module, "_retry_message", build)

    report = _one_batch(pipeline)

    assert (report.delivered, report.retried, report.failed_record_ids) == (3, 2, frozenset())
    _assert_delivered_once(db, receiver, healthy)
    unbuilt, built = (message_row(db, message_id) for message_id in retried)
    assert (unbuilt["status"], unbuilt["lease_token"]) == ("failed", None)
    assert built["status"] == "failed" and built["lease_token"] is not None
    # The claim's messages carry first attempts; the retry messages second ones.
    retry_ids = {m.id for m in pipeline.queue.sent if envelopes_of(m.body)[0].attempt == 2}
    assert retry_ids == {str(retried[1])}


# --- defect 5: a queue message out of the database's ranges ------------------------------------


@pytest.mark.parametrize(
    "forged",
    [
        {"message_id": 2**63, "attempt": 1},
        {"message_id": 2**64 + 7, "attempt": 1},
        {"message_id": 1, "attempt": 2**31},
        {"message_id": 1, "attempt": 10**30},
    ],
    ids=["message_id 2^63", "message_id past 2^64", "attempt 2^31", "attempt 10^30"],
)
def test_an_envelope_out_of_range_is_poison_for_itself_only(
    db: Database, pipeline: Pipeline, receiver: Receiver, forged: dict[str, int]
) -> None:
    healthy = _healthy_neighbours(db, receiver)
    body = json.dumps({**forged, "lease_token": str(uuid.uuid4()), "payload": "{}"})

    report = _one_batch(pipeline, [QueueRecord("forged", body)])

    assert report.failed_record_ids == frozenset({"forged"})
    assert report.delivered == 5
    _assert_delivered_once(db, receiver, healthy)
