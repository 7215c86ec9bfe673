"""The speed lanes' pure rules: which attempts are slow, and the lane an envelope carries."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config import MAX_SLOW_LANE_RELEASE_ANSWERS, ConfigError, Settings
from tidings.delivery.envelope import DeliveryEnvelope, MalformedEnvelope
from tidings.delivery.lanes import (
    Lane,
    Timing,
    in_flight_cap,
    lane_of,
    quick_endpoints,
    slow_endpoints,
)
from tidings.delivery.retry_policy import AttemptError


def test_an_attempt_at_the_threshold_or_a_timeout_is_slow_and_a_quick_failure_is_not() -> None:
    timings = [
        Timing(1, 999, None),
        Timing(2, 1000, None),
        Timing(3, 20, AttemptError.TIMEOUT),
        Timing(4, 5, AttemptError.CONNECTION_REFUSED),
        Timing(2, 3000, None),
    ]
    assert slow_endpoints(timings, 1000) == [2, 3]


@given(
    st.lists(
        st.tuples(
            st.integers(1, 5),
            st.integers(0, 20_000),
            st.sampled_from([None, *AttemptError]),
        )
    ),
    st.integers(1, 20_000),
)
def test_slow_endpoints_are_exactly_those_with_a_slow_or_timed_out_attempt(
    raw: list[tuple[int, int, AttemptError | None]], threshold_ms: int
) -> None:
    timings = [Timing(*t) for t in raw]
    found = slow_endpoints(timings, threshold_ms)
    assert found == sorted(set(found))
    for endpoint in {t.endpoint_id for t in timings}:
        own = [t for t in timings if t.endpoint_id == endpoint]
        expected = any(t.elapsed_ms >= threshold_ms or t.error is AttemptError.TIMEOUT for t in own)
        assert (endpoint in found) == expected


def test_a_quick_answer_is_accepted_in_under_half_the_threshold_and_nothing_else_is() -> None:
    timings = [
        Timing(1, 499, None, 200),
        Timing(2, 500, None, 204),  # not quick: half the threshold exactly
        Timing(3, 10, None, 200),
        Timing(3, 20, AttemptError.CONNECTION_RESET),  # no answer: says nothing of speed
        Timing(4, 5, AttemptError.INTERNAL),  # not sent at all
        Timing(5, 0, None, 200),
        Timing(5, 30, None, 299),
        Timing(6, 3, None, 503),  # shedding load at once is no sign of speed
        Timing(7, 3, None, 429),
        Timing(8, 3, None, 302),
    ]
    assert quick_endpoints(timings, 1000) == [1, 5]


@given(
    st.lists(
        st.tuples(
            st.integers(1, 5),
            st.integers(0, 20_000),
            st.sampled_from([None, *AttemptError]),
            st.sampled_from([None, 200, 201, 299, 301, 404, 429, 500, 503]),
        )
    ),
    st.integers(1, 20_000),
)
def test_quick_endpoints_had_every_attempt_accepted_in_under_half_the_threshold_and_none_slow(
    raw: list[tuple[int, int, AttemptError | None, int | None]], threshold_ms: int
) -> None:
    timings = [Timing(*t) for t in raw]
    found = quick_endpoints(timings, threshold_ms)
    assert found == sorted(set(found))
    assert not set(found) & set(slow_endpoints(timings, threshold_ms))
    for endpoint in {t.endpoint_id for t in timings}:
        own = [t for t in timings if t.endpoint_id == endpoint]
        expected = all(
            t.error is None
            and t.status_code is not None
            and 200 <= t.status_code < 300
            and t.elapsed_ms < threshold_ms / 2
            for t in own
        )
        assert (endpoint in found) == expected


@pytest.mark.parametrize("value", [0, -1, MAX_SLOW_LANE_RELEASE_ANSWERS + 1, 2**31])
def test_slow_lane_release_answers_outside_its_bounds_is_a_configuration_error(value: int) -> None:
    refusal = r"TIDINGS_SLOW_LANE_RELEASE_ANSWERS must be within 1\.\.1000"
    with pytest.raises(ConfigError, match=refusal):
        Settings(slow_lane_release_answers=value).validate()


def test_the_lane_travels_in_the_envelope_only_when_slow() -> None:
    token = uuid.uuid4()
    fast = DeliveryEnvelope(7, token, 1, "{}")
    slow = DeliveryEnvelope(7, token, 1, "{}", slow=True)
    assert "slow" not in json.loads(fast.to_body())
    assert DeliveryEnvelope.from_body(slow.to_body()) == slow
    assert DeliveryEnvelope.from_body(fast.to_body()) == fast


@pytest.mark.parametrize(
    ("slow", "untried", "lane"),
    [(False, False, Lane.FAST), (True, False, Lane.SLOW), (False, True, Lane.SLOW)],
)
def test_a_slow_or_untried_endpoints_rows_travel_the_slow_lane(
    slow: bool, untried: bool, lane: Lane
) -> None:
    assert lane_of(slow=slow, untried=untried) is lane


@pytest.mark.parametrize("value", ["yes", 1, None, []])
def test_a_lane_flag_that_is_not_a_boolean_is_malformed(value: object) -> None:
    body = json.dumps(
        {"message_id": 1, "lease_token": str(uuid.uuid4()), "attempt": 1, "slow": value}
    )
    with pytest.raises(MalformedEnvelope, match="slow must be true or false"):
        DeliveryEnvelope.from_body(body)


@pytest.mark.parametrize("own", [None, 1, 5, 50])
@pytest.mark.parametrize(("slow", "untried"), [(False, False), (True, False), (False, True)])
def test_the_cap_in_force_is_the_lanes_lowered_by_the_endpoints_own(
    own: int | None, slow: bool, untried: bool
) -> None:
    cap = in_flight_cap(own, slow=slow, untried=untried, slow_cap=10, untried_cap=1)
    lane_cap = 10 if slow else 1 if untried else None
    if lane_cap is None:
        assert cap == own
    else:
        assert cap == (lane_cap if own is None else min(own, lane_cap))
        assert cap <= lane_cap
