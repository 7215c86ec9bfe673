"""An attempt's fate and the circuit accounting of a batch, decided without I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from tidings.config import Settings
from tidings.dal.delivery import MessageStatus, PayloadFormat, StartedAttempt
from tidings.delivery.attempt import (
    Attempt,
    Job,
    circuit_summaries,
    decide,
    endpoints_to_disable,
)
from tidings.delivery.envelope import DeliveryEnvelope
from tidings.delivery.http_transport import HttpResult
from tidings.delivery.retry_policy import AttemptError, NextAction
from tidings.delivery.retry_schedule import wait_s

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SETTINGS = Settings(lease_s=120)
SCHEDULE = (30.0, 60.0, 120.0, 240.0)


def _attempt(
    result: HttpResult,
    *,
    message_id: int = 1,
    endpoint_id: int = 7,
    attempts: int = 0,
    max_attempts: int | None = None,
    rate_limit_per_s: float | None = None,
    max_in_flight: int | None = None,
    slow: bool = False,
    at: datetime = NOW,
) -> Attempt:
    token = uuid.UUID(int=message_id)
    row = StartedAttempt(
        message_id=message_id,
        endpoint_id=endpoint_id,
        permitted=True,
        lease_token=uuid.UUID(int=1000 + message_id),
        event_type="order.created",
        event_id=f"e{message_id}",
        attempts=attempts,
        max_attempts=max_attempts,
        url="https://example.com/hook",
        timeout_ms=None,
        rate_limit_per_s=rate_limit_per_s,
        max_in_flight=max_in_flight,
        retry_schedule=None,
        secrets=("whsec_x",),
        payload="{}",
        payload_format=PayloadFormat.RAW,
        event_created_at=NOW,
    )
    envelope = DeliveryEnvelope(message_id, token, attempts + 1, slow=slow)
    return Attempt(Job(f"r{message_id}", envelope, row, "{}"), at, result)


def _answer(status: int, retry_after: str | None = None, ms: int = 40) -> HttpResult:
    return HttpResult(status, None, ms, retry_after=retry_after, excerpt="ok")


def _failure(error: AttemptError, ms: int = 15000) -> HttpResult:
    return HttpResult(None, error, ms, detail="x")


def test_a_2xx_delivers_the_message() -> None:
    decision = decide(_attempt(_answer(204)), SETTINGS, now=NOW, schedule=SCHEDULE)
    outcome = decision.outcome
    assert decision.step.action is NextAction.FINISH_DELIVERED
    assert outcome.status is MessageStatus.DELIVERED
    assert (outcome.attempt_number, outcome.status_code, outcome.response_ms) == (1, 204, 40)
    assert outcome.error_class is None
    assert outcome.retry_at is None
    assert not outcome.keep_lease


def test_a_short_retry_travels_through_the_queue_and_keeps_its_lease() -> None:
    decision = decide(_attempt(_answer(503)), SETTINGS, now=NOW, schedule=SCHEDULE)
    outcome = decision.outcome
    assert decision.step.action is NextAction.RETRY_VIA_QUEUE
    assert outcome.status is MessageStatus.FAILED
    assert outcome.error_class == "http_503"
    assert outcome.keep_lease
    # Due again only if the queue message is lost: after the delay and a whole lease.
    assert outcome.retry_at == NOW + timedelta(seconds=decision.step.delay_s + 120)


def test_the_outcome_is_recorded_under_the_lease_the_attempt_began_with() -> None:
    # Beginning gave the row a new token; the queue message's one no longer holds it.
    outcome = decide(
        _attempt(_answer(200), message_id=3), SETTINGS, now=NOW, schedule=SCHEDULE
    ).outcome
    assert outcome.lease.token == uuid.UUID(int=1003)


def test_a_rate_limited_endpoints_retry_waits_for_the_claimer_and_its_token_bucket() -> None:
    attempt = _attempt(_answer(503), rate_limit_per_s=2.0)
    decision = decide(attempt, SETTINGS, now=NOW, schedule=SCHEDULE)
    assert decision.step.action is NextAction.RETRY_VIA_DATABASE
    assert not decision.outcome.keep_lease
    assert decision.outcome.retry_at == NOW + timedelta(seconds=decision.step.delay_s)


@pytest.mark.parametrize(
    ("limit", "attempt"),
    [
        ("its own max_in_flight", _attempt(_answer(503), max_in_flight=4)),
        # An untried endpoint's rows travel the slow lane too.
        ("the slow lane's cap", _attempt(_answer(503), slow=True)),
    ],
)
def test_a_capped_endpoints_retry_passes_the_claim_which_counts_its_rows_in_flight(
    limit: str, attempt: Attempt
) -> None:
    # A row waiting for its queue message is not in flight: the claim could not count it.
    decision = decide(attempt, SETTINGS, now=NOW, schedule=SCHEDULE)
    assert decision.step.action is NextAction.RETRY_VIA_DATABASE, limit
    assert not decision.outcome.keep_lease
    assert decision.outcome.retry_at == NOW + timedelta(seconds=decision.step.delay_s)


def test_an_attempt_that_turned_its_endpoint_slow_retries_through_the_claim() -> None:
    attempt = _attempt(_failure(AttemptError.TIMEOUT, ms=15000))
    assert (
        decide(attempt, SETTINGS, now=NOW, schedule=SCHEDULE).step.action
        is NextAction.RETRY_VIA_QUEUE
    )
    turned = decide(attempt, SETTINGS, now=NOW, schedule=SCHEDULE, turned_slow=True)
    assert turned.step.action is NextAction.RETRY_VIA_DATABASE
    assert not turned.outcome.keep_lease


def test_a_long_retry_waits_in_the_database_without_its_lease() -> None:
    # Retry-After beyond what SQS can delay: the row waits for the claimer.
    decision = decide(
        _attempt(_answer(429, retry_after="1800")), SETTINGS, now=NOW, schedule=(60.0, 3600.0)
    )
    assert decision.step.action is NextAction.RETRY_VIA_DATABASE
    assert decision.outcome.status is MessageStatus.FAILED
    assert not decision.outcome.keep_lease
    assert decision.outcome.retry_at == NOW + timedelta(seconds=1800)


def test_the_last_attempt_of_the_schedule_dead_letters() -> None:
    last = decide(_attempt(_answer(500), attempts=4), SETTINGS, now=NOW, schedule=SCHEDULE)
    assert last.step.action is NextAction.DEAD_LETTER
    assert last.outcome.status is MessageStatus.DEAD_LETTER
    assert last.outcome.attempt_number == 5
    shorter = decide(_attempt(_answer(500), attempts=1), SETTINGS, now=NOW, schedule=(30.0,))
    assert shorter.outcome.status is MessageStatus.DEAD_LETTER


def test_a_retry_waits_as_the_schedule_says_for_that_message() -> None:
    decision = decide(
        _attempt(_answer(500), message_id=11, attempts=2), SETTINGS, now=NOW, schedule=SCHEDULE
    )
    assert decision.step.delay_s == wait_s(SCHEDULE, 3, 11)


def test_a_network_failure_records_no_status_and_no_latency() -> None:
    decision = decide(
        _attempt(_failure(AttemptError.TIMEOUT)), SETTINGS, now=NOW, schedule=SCHEDULE
    )
    assert decision.outcome.status is MessageStatus.FAILED
    assert decision.outcome.error_class == "timeout"
    assert decision.outcome.status_code is None
    assert decision.outcome.response_ms is None


def test_gone_dead_letters_and_disables_its_endpoint_once() -> None:
    decisions = [
        decide(
            _attempt(_answer(410), message_id=1, endpoint_id=3),
            SETTINGS,
            now=NOW,
            schedule=SCHEDULE,
        ),
        decide(
            _attempt(_answer(410), message_id=2, endpoint_id=3),
            SETTINGS,
            now=NOW,
            schedule=SCHEDULE,
        ),
        decide(
            _attempt(_answer(404), message_id=3, endpoint_id=4),
            SETTINGS,
            now=NOW,
            schedule=SCHEDULE,
        ),
    ]
    assert all(d.outcome.status is MessageStatus.DEAD_LETTER for d in decisions)
    assert endpoints_to_disable(decisions) == [(3, "410 Gone")]


def _decided(*results: tuple[int, HttpResult], start: datetime = NOW) -> list:
    return [
        decide(
            _attempt(result, message_id=i + 1, endpoint_id=endpoint_id, at=start + timedelta(i)),
            SETTINGS,
            now=start,
            schedule=SCHEDULE,
        )
        for i, (endpoint_id, result) in enumerate(results)
    ]


def test_the_circuit_counts_only_the_failures_after_an_endpoints_last_success() -> None:
    decisions = _decided(
        (1, _answer(503)),
        (1, _answer(200)),
        (1, _failure(AttemptError.CONNECTION_REFUSED)),
        (1, _answer(502)),
    )
    (summary,) = circuit_summaries(decisions)
    assert summary.endpoint_id == 1
    assert summary.has_success
    assert summary.trailing_failures == 2
    assert summary.last_success_at == NOW + timedelta(1)
    assert summary.last_failure_at == NOW + timedelta(3)


def test_a_refusal_that_is_not_retried_proves_the_endpoint_is_up() -> None:
    (summary,) = circuit_summaries(_decided((1, _answer(503)), (1, _answer(404))))
    assert summary.has_success
    assert summary.trailing_failures == 0


@pytest.mark.parametrize(
    "error", [AttemptError.BLOCKED_ADDRESS, AttemptError.INVALID_URL, AttemptError.SIGNING_FAILED]
)
def test_a_request_never_sent_says_nothing_about_the_endpoint(error: AttemptError) -> None:
    decisions = _decided((1, _failure(error, ms=0)), (2, _answer(500)))
    assert [s.endpoint_id for s in circuit_summaries(decisions)] == [2]


def test_each_endpoint_gets_its_own_summary_in_endpoint_order() -> None:
    decisions = _decided((9, _answer(500)), (2, _answer(200)), (9, _answer(500)))
    summaries = circuit_summaries(decisions)
    assert [(s.endpoint_id, s.has_success, s.trailing_failures) for s in summaries] == [
        (2, True, 0),
        (9, False, 2),
    ]
    assert summaries[1].last_success_at is None
