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


SLOW_UNTIL = NOW + timedelta(minutes=7)


def test_a_slow_endpoint_at_its_cap_says_so() -> None:
    wait = explain(facts(slow_lane=True, slow_until=SLOW_UNTIL, in_flight=10))
    assert (wait.reason, wait.until) == (WaitReason.IN_FLIGHT_LIMIT, None)
    assert wait.explanation == (
        "due, but its endpoint is in the slow lane (answers took ≥ 1 s or timed out; until "
        "2026-11-30 12:07:00 UTC, or sooner after 50 deliveries accepted in a row under 0.5 s) "
        "and has 10 deliveries in flight, its limit: the claimer leases it when one of those "
        "ends"
    )


def test_an_endpoint_that_has_not_answered_yet_has_one_delivery_at_a_time() -> None:
    wait = explain(facts(untried=True, in_flight=1))
    assert wait.reason is WaitReason.IN_FLIGHT_LIMIT
    assert "has not answered yet" in wait.explanation
    assert "has 1 delivery in flight, its limit" in wait.explanation
    assert explain(facts(untried=True, in_flight=0)).reason is WaitReason.DUE


def test_the_threshold_is_the_deployments() -> None:
    wait = explain(
        facts(slow_lane=True, slow_until=SLOW_UNTIL, in_flight=10, slow_lane_threshold_ms=2500)
    )
    assert "answers took ≥ 2.5 s" in wait.explanation


def test_below_its_cap_a_slow_endpoints_message_is_due_and_the_lane_is_named() -> None:
    wait = explain(facts(slow_lane=True, slow_until=SLOW_UNTIL, in_flight=9))
    assert wait.reason is WaitReason.DUE
    assert "its endpoint is in the slow lane" in wait.explanation
    assert "one per sender invocation, at most 10 at once" in wait.explanation


def test_a_fast_endpoint_has_no_cap_unless_its_own() -> None:
    assert explain(facts(in_flight=500)).reason is WaitReason.DUE
    assert "slow lane" not in explain(facts(in_flight=500)).explanation
    own = explain(facts(max_in_flight=1, in_flight=1))
    assert own.reason is WaitReason.IN_FLIGHT_LIMIT
    assert own.explanation == (
        "due, but its endpoint has 1 delivery in flight, its limit (max_in_flight 1): the "
        "claimer leases it when one of those ends"
    )


def test_an_endpoints_own_cap_only_lowers_the_slow_lanes() -> None:
    above_lane = explain(
        facts(slow_lane=True, slow_until=SLOW_UNTIL, max_in_flight=20, in_flight=10)
    )
    assert above_lane.reason is WaitReason.IN_FLIGHT_LIMIT
    assert "has 10 deliveries in flight, its limit:" in above_lane.explanation
    below_lane = explain(facts(slow_lane=True, slow_until=SLOW_UNTIL, max_in_flight=2, in_flight=2))
    assert below_lane.reason is WaitReason.IN_FLIGHT_LIMIT
    assert "slow lane" in below_lane.explanation
    assert "its limit (max_in_flight 2)" in below_lane.explanation


def test_the_cap_only_matters_once_the_message_is_due() -> None:
    capped = {"slow_lane": True, "in_flight": 10}
    assert explain(facts(next_attempt_at=LATER, **capped)).reason is WaitReason.SCHEDULED
    assert explain(facts(circuit_state="half_open", **capped)).reason is WaitReason.CIRCUIT_PROBING
    leased = facts(status="in_flight", leased=True, next_attempt_at=LATER, **capped)
    assert explain(leased).reason is WaitReason.BEING_DELIVERED
