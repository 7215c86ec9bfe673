"""Deciding one attempt's fate can never fail its batch (issue 11, defect 1).

Whatever a receiver answers (any status, any Retry-After, any body), the sender's decision step
gives a decision whose outcome the record statement accepts: the answer's own, or, should
deciding fail, a counted ``internal_error`` failure of that record alone.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tidings.config import Settings
from tidings.dal.delivery import OUTCOME_STATUSES, MessageStatus, PayloadFormat, StartedAttempt
from tidings.delivery import attempt as attempt_module
from tidings.delivery import retry_schedule
from tidings.delivery import sender as sender_module
from tidings.delivery.attempt import (
    INTERNAL_ERROR,
    Attempt,
    Decision,
    Job,
    circuit_summaries,
    internal_failure,
    storable_text,
)
from tidings.delivery.envelope import DeliveryEnvelope
from tidings.delivery.http_transport import HttpResult
from tidings.delivery.retry_policy import AttemptError, NextAction, VerdictKind
from tidings.delivery.sender import decide_or_fail

NOW = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)
SETTINGS = Settings(backoff_base_s=30, backoff_max_s=3600, max_attempts=5, lease_s=120)
# The schedule those settings make: four delays, five attempts.
SCHEDULE = retry_schedule.deployment_default(SETTINGS)
PAYLOAD = '{"card": "4111 1111 1111 1111"}'
INT4 = 2**31 - 1


def _attempt(result: HttpResult, *, attempts: int = 0, max_attempts: int | None = None) -> Attempt:
    row = StartedAttempt(
        message_id=42,
        endpoint_id=7,
        permitted=True,
        lease_token=uuid.UUID(int=1042),
        event_type="order.created",
        event_id="e42",
        attempts=attempts,
        max_attempts=max_attempts,
        url="https://example.com/hook",
        timeout_ms=None,
        rate_limit_per_s=None,
        max_in_flight=None,
        retry_schedule=None,
        secrets=("whsec_x",),
        payload=PAYLOAD,
        payload_format=PayloadFormat.RAW,
        event_created_at=NOW,
    )
    envelope = DeliveryEnvelope(42, uuid.UUID(int=42), attempts + 1)
    return Attempt(Job("r42", envelope, row, PAYLOAD), NOW, result)


def _assert_recordable(decision: Decision, attempt: Attempt) -> None:
    """What the record statement needs of an outcome, and the rules of a failed attempt."""
    outcome = decision.outcome
    assert outcome.status in OUTCOME_STATUSES
    assert outcome.attempt_number == attempt.job.row.attempts + 1
    # Under the lease the attempt began with, not the one its queue message carried.
    assert outcome.lease == attempt.job.row.lease
    if outcome.status is MessageStatus.FAILED:
        assert outcome.retry_at is not None and outcome.retry_at >= NOW
    else:
        assert outcome.retry_at is None and not outcome.keep_lease
    assert outcome.status_code is None or 100 <= outcome.status_code <= 999
    assert outcome.response_ms is None or 0 <= outcome.response_ms <= INT4
    for text in (outcome.response_excerpt, outcome.error_class):
        if text is not None:
            assert "\x00" not in text
            text.encode("utf-8")  # no lone surrogate: PostgreSQL could not take it
    if outcome.error_class == INTERNAL_ERROR:
        assert decision.verdict.kind is VerdictKind.RETRY
        assert not outcome.keep_lease
        assert decision.step.action in (NextAction.RETRY_VIA_DATABASE, NextAction.DEAD_LETTER)


statuses = (
    st.integers(min_value=100, max_value=999)
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.sampled_from([0, 99, 1000, 2**31, 2**63])
)
retry_after_headers = (
    st.none()
    | st.text()
    | st.from_regex(r"\A-?[0-9]{1,30}(\.[0-9]+)?\Z")
    | st.builds(
        "{}, {:02d} {} {} {}:{:02d}:{:02d} {}".format,
        st.sampled_from(["Mon", "Sun", "Xyz"]),
        st.integers(min_value=0, max_value=99),
        st.sampled_from(["Jan", "Feb", "Dec", "Foo"]),
        st.integers(min_value=0, max_value=10**25),
        st.integers(min_value=0, max_value=10**25),
        st.integers(min_value=0, max_value=99),
        st.integers(min_value=0, max_value=99),
        st.sampled_from(["GMT", "+0100", "-99999999999999", "PST"]),
    )
)
# Any excerpt, NUL and lone surrogates included (the transport never makes those, but a
# decision must not depend on that).
excerpts = (
    st.none()
    | st.text(st.characters(codec=None, categories=None))
    | st.sampled_from(["\x00", "\udfff tail", "\ud83d\ude00 paired by hand", "x" * 70_000])
)


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
@given(
    status=st.none() | statuses,
    error=st.none() | st.sampled_from(list(AttemptError)),
    retry_after=retry_after_headers,
    excerpt=excerpts,
    elapsed_ms=st.integers(min_value=-(2**40), max_value=2**40),
    attempts=st.integers(min_value=0, max_value=200),
    max_attempts=st.none() | st.integers(min_value=1, max_value=100),
    seed=st.integers(),
)
def test_any_answer_gives_a_recordable_decision(
    *,
    status: int | None,
    error: AttemptError | None,
    retry_after: str | None,
    excerpt: str | None,
    elapsed_ms: int,
    attempts: int,
    max_attempts: int | None,
    seed: int,
) -> None:
    result = HttpResult(status, error, elapsed_ms, retry_after=retry_after, excerpt=excerpt)
    attempt = _attempt(result, attempts=attempts, max_attempts=max_attempts)

    decision = decide_or_fail(attempt, SETTINGS, now=NOW, default=SCHEDULE)

    _assert_recordable(decision, attempt)
    answered = status is not None and error is None and 100 <= status <= 999
    no_answer = status is None and error is not None and error is not AttemptError.INTERNAL
    if answered:
        assert decision.verdict.reason == f"http_{status}"
        assert decision.outcome.status_code == status
    elif no_answer:
        assert error is not None and decision.verdict.reason == error.value
    else:
        # An impossible result (no status and no error, both, a status out of range) or the
        # sender's own failure: a counted failure of this record.
        assert decision.outcome.error_class == INTERNAL_ERROR
        assert decision.outcome.status_code is None


@given(header=st.text() | st.from_regex(r"\A[0-9, -]{0,40}\Z"), status=st.sampled_from([429, 503]))
def test_any_retry_after_on_a_retryable_answer_waits_within_the_maximum_delay(
    header: str, status: int
) -> None:
    attempt = _attempt(HttpResult(status, None, 30, retry_after=header))
    decision = decide_or_fail(attempt, SETTINGS, now=NOW, default=SCHEDULE)
    assert decision.verdict.reason == f"http_{status}"
    assert decision.step.action in (NextAction.RETRY_VIA_QUEUE, NextAction.RETRY_VIA_DATABASE)
    assert 0 <= decision.step.delay_s <= max(SCHEDULE)


def test_the_overflowing_retry_after_of_the_issue_is_a_plain_retry() -> None:
    for status, header in (
        (503, "Mon, 01 Jan 2024 99999999999999999999:00:00 GMT"),
        (429, "99999999999999999999"),
    ):
        attempt = _attempt(HttpResult(status, None, 30, retry_after=header))
        decision = attempt_module.decide(attempt, SETTINGS, now=NOW, schedule=SCHEDULE)
        assert decision.verdict.reason == f"http_{status}"
        assert decision.verdict.retry_after_s is None
        assert decision.outcome.status is MessageStatus.FAILED


def test_a_failure_while_deciding_is_a_counted_internal_error_logged_without_the_payload(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError(f"Python int too large to convert to C long {PAYLOAD}")

    logged: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(attempt_module.retry_policy, "classify", broken)
    monkeypatch.setattr(
        sender_module.logger, "error", lambda msg, extra: logged.append((msg, extra))
    )
    attempt = _attempt(HttpResult(503, None, 30, retry_after="5", excerpt="busy"), attempts=1)

    decision = decide_or_fail(attempt, SETTINGS, now=NOW, default=SCHEDULE)

    outcome = decision.outcome
    assert (outcome.status, outcome.error_class) == (MessageStatus.FAILED, INTERNAL_ERROR)
    assert outcome.attempt_number == 2
    assert outcome.retry_at is not None
    assert NOW < outcome.retry_at <= NOW + timedelta(seconds=max(SCHEDULE))
    assert decision.step.action is NextAction.RETRY_VIA_DATABASE
    [(message, extra)] = logged
    assert "internal_error" in message
    assert extra["message_id"] == 42 and extra["error_type"] == "OverflowError"
    assert extra["raised_at"].startswith("test_decision_isolation.py:")
    assert PAYLOAD not in repr(logged) and "4111" not in repr(logged)


def test_an_internal_error_on_the_last_attempt_dead_letters() -> None:
    attempt = _attempt(HttpResult(503, None, 30), attempts=4)
    decision = internal_failure(attempt, SETTINGS, now=NOW, schedule=SCHEDULE)
    assert decision.outcome.status is MessageStatus.DEAD_LETTER
    assert decision.outcome.error_class == INTERNAL_ERROR
    assert decision.outcome.retry_at is None
    capped = decide_or_fail(
        _attempt(HttpResult(None, AttemptError.INTERNAL, 0), max_attempts=1),
        SETTINGS,
        now=NOW,
        default=SCHEDULE,
    )
    assert capped.outcome.status is MessageStatus.DEAD_LETTER


def test_a_sending_failure_is_decided_as_an_internal_error_through_the_database() -> None:
    result = HttpResult(None, AttemptError.INTERNAL, 0, detail="internal error in the sender")
    decision = attempt_module.decide(_attempt(result), SETTINGS, now=NOW, schedule=SCHEDULE)
    assert decision.outcome.error_class == INTERNAL_ERROR
    assert decision.step.action is NextAction.RETRY_VIA_DATABASE
    assert not decision.outcome.keep_lease


def test_internal_errors_leave_the_circuit_alone() -> None:
    failed = internal_failure(
        _attempt(HttpResult(503, None, 30)), SETTINGS, now=NOW, schedule=SCHEDULE
    )
    assert circuit_summaries([failed]) == []


@pytest.mark.parametrize(
    ("text", "stored"),
    [
        (None, None),
        ("plain", "plain"),
        ("nul\x00here", "nul\ufffdhere"),
        ("lone \ud800 surrogate", "lone \ufffd surrogate"),
        ("pair \U0001f600 kept", "pair \U0001f600 kept"),
    ],
)
def test_storable_text(text: str | None, stored: str | None) -> None:
    assert storable_text(text) == stored
