"""Why a message waits: one reason for every state a message and its endpoint can be in."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta

import pytest

from tidings.delivery.waiting import WaitFacts, WaitReason, explain

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(seconds=90)
EARLIER = NOW - timedelta(seconds=40)

PENDING = WaitFacts(
    status="pending",
    attempts=0,
    next_attempt_at=EARLIER,
    leased=False,
    last_error=None,
    endpoint_enabled=True,
    endpoint_deleted=False,
    disabled_reason=None,
    circuit_state="closed",
    circuit_opened_at=None,
    circuit_cooldown_s=300,
    rate_limit_per_s=None,
    now=NOW,
)


def facts(**changes: object) -> WaitFacts:
    return dataclasses.replace(PENDING, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("given", "reason", "until"),
    [
        (facts(status="delivered"), WaitReason.DELIVERED, None),
        (facts(status="dead_letter", endpoint_enabled=False), WaitReason.DEAD_LETTER, None),
        (facts(endpoint_deleted=True, endpoint_enabled=False), WaitReason.ENDPOINT_DELETED, None),
        (
            facts(endpoint_enabled=False, disabled_reason="410 Gone"),
            WaitReason.ENDPOINT_DISABLED,
            None,
        ),
        (
            facts(status="in_flight", leased=True, next_attempt_at=LATER),
            WaitReason.BEING_DELIVERED,
            LATER,
        ),
        (facts(status="in_flight", leased=True), WaitReason.LEASE_EXPIRED, None),
        (
            facts(status="failed", leased=True, attempts=2, next_attempt_at=LATER),
            WaitReason.RETRY_QUEUED,
            LATER,
        ),
        (facts(status="failed", attempts=3, next_attempt_at=LATER), WaitReason.BACKOFF, LATER),
        (facts(next_attempt_at=LATER), WaitReason.SCHEDULED, LATER),
        (facts(), WaitReason.DUE, None),
        (facts(circuit_state="half_open"), WaitReason.CIRCUIT_PROBING, None),
    ],
)
def test_each_state_has_its_reason(given: WaitFacts, reason: WaitReason, until: datetime) -> None:
    wait = explain(given)
    assert (wait.reason, wait.until) == (reason, until)
    assert wait.explanation


def test_an_open_circuit_names_when_the_next_probe_may_go() -> None:
    opened = NOW - timedelta(seconds=100)
    wait = explain(facts(circuit_state="open", circuit_opened_at=opened, circuit_cooldown_s=300))
    assert wait.reason is WaitReason.CIRCUIT_OPEN
    assert wait.until == opened + timedelta(seconds=300)
    assert "2026-11-30 11:58:20" in wait.explanation


def test_an_open_circuit_never_promises_a_time_before_the_message_is_due() -> None:
    opened = NOW - timedelta(seconds=400)
    wait = explain(facts(circuit_state="open", circuit_opened_at=opened, next_attempt_at=LATER))
    assert wait.until == LATER


def test_the_endpoint_comes_before_the_circuit_and_the_backoff() -> None:
    wait = explain(
        facts(
            endpoint_enabled=False,
            disabled_reason="disabled by hand",
            circuit_state="open",
            circuit_opened_at=NOW,
            attempts=2,
            next_attempt_at=LATER,
        )
    )
    assert wait.reason is WaitReason.ENDPOINT_DISABLED
    assert "disabled by hand" in wait.explanation


def test_explanations_say_the_error_and_the_pace() -> None:
    assert (
        "http_503"
        in explain(
            facts(status="failed", attempts=1, last_error="http_503", next_attempt_at=LATER)
        ).explanation
    )
    due = explain(facts(rate_limit_per_s=2.5)).explanation
    assert "due for 40 s" in due
    assert "2.5 a second" in due
