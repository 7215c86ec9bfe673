"""Retry schedules and their full jitter: the rules that hold for every schedule and message."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config import DEFAULT_RETRY_SCHEDULE, ConfigError, Settings
from tidings.delivery.retry_schedule import (
    attempts_allowed,
    deployment_default,
    effective,
    exponential,
    fitted,
    jitter_fraction,
    parse_endpoint_schedule,
    retry_offset_s,
    span_s,
    wait_s,
)

schedules = st.lists(st.floats(min_value=0.001, max_value=86_400), min_size=1, max_size=50).map(
    tuple
)
message_ids = st.integers(min_value=1, max_value=2**63 - 1)


@given(schedule=schedules, message_id=message_ids)
def test_the_waits_add_up_to_the_whole_schedule_whatever_the_draws(
    schedule: tuple[float, ...], message_id: int
) -> None:
    waits = [wait_s(schedule, k, message_id) for k in range(1, len(schedule) + 1)]
    assert all(w >= 0 for w in waits)
    # The last attempt comes exactly the schedule's span after the first: jitter moves retries
    # within their slots but never shortens (nor lengthens) the whole.
    assert math.fsum(waits) == pytest.approx(span_s(schedule), rel=1e-9, abs=1e-9)


@given(schedule=schedules, message_id=message_ids)
def test_each_retry_falls_in_its_own_slot_and_the_last_at_the_end(
    schedule: tuple[float, ...], message_id: int
) -> None:
    for retry in range(1, len(schedule) + 1):
        start = math.fsum(schedule[: retry - 1])
        end = start + schedule[retry - 1]
        offset = retry_offset_s(schedule, retry, message_id)
        assert start - 1e-6 <= offset <= end + 1e-6
    assert retry_offset_s(schedule, len(schedule), message_id) == pytest.approx(
        span_s(schedule), rel=1e-9
    )


@given(schedule=schedules, message_id=message_ids, extra=st.lists(st.floats(0, 3600)))
def test_delays_on_the_way_only_push_the_last_attempt_later(
    schedule: tuple[float, ...], message_id: int, extra: list[float]
) -> None:
    # Claim latency, an open circuit holding a row back, a longer Retry-After: each wait is at
    # least what the schedule says, so an outage shorter than the span is always outlasted.
    waits = [wait_s(schedule, k, message_id) for k in range(1, len(schedule) + 1)]
    late = [w + (extra[i] if i < len(extra) else 0.0) for i, w in enumerate(waits)]
    assert math.fsum(late) >= span_s(schedule) * (1 - 1e-9)


def test_full_jitter_spreads_messages_evenly_over_each_slot() -> None:
    # A batch that failed together retries spread over the slot, not at one moment.
    for retry in (1, 2, 5):
        tenths = [0] * 10
        for message_id in range(1, 5001):
            tenths[int(jitter_fraction(message_id, retry) * 10)] += 1
        assert all(420 <= n <= 580 for n in tenths), tenths


def test_the_draw_is_the_same_each_time_it_is_computed() -> None:
    assert jitter_fraction(42, 3) == jitter_fraction(42, 3)
    assert jitter_fraction(42, 3) != jitter_fraction(43, 3)
    assert 0 <= jitter_fraction(2**63 - 1, 50) < 1


def test_a_one_delay_schedule_retries_once_after_exactly_that_delay() -> None:
    assert wait_s((300.0,), 1, 7) == 300.0
    assert attempts_allowed((300.0,)) == 2
    assert attempts_allowed(()) == 1


def test_the_default_schedule_spans_more_than_a_day() -> None:
    assert DEFAULT_RETRY_SCHEDULE == (5, 300, 1800, 7200, 18000, 36000, 36000)
    assert span_s(DEFAULT_RETRY_SCHEDULE) == 99_305
    assert span_s(DEFAULT_RETRY_SCHEDULE) >= 24 * 3600
    assert attempts_allowed(DEFAULT_RETRY_SCHEDULE) == 8


def test_the_exponential_formula_generates_a_schedule() -> None:
    assert exponential(base_s=30, max_s=3600, attempts=5) == (30, 60, 120, 240)
    assert exponential(base_s=30, max_s=100, attempts=5) == (30, 60, 100, 100)
    assert exponential(base_s=30, max_s=3600, attempts=1) == ()
    with pytest.raises(ValueError, match="attempts"):
        exponential(base_s=30, max_s=3600, attempts=0)


def test_the_deployment_schedule_is_the_setting_the_formula_or_the_default() -> None:
    assert deployment_default(Settings()) == DEFAULT_RETRY_SCHEDULE
    assert deployment_default(Settings(retry_schedule=(1.0, 2.0))) == (1.0, 2.0)
    # The formula's settings of earlier releases keep meaning what they meant.
    assert deployment_default(Settings(max_attempts=3)) == (30.0, 60.0)
    assert deployment_default(Settings(backoff_base_s=0.5, backoff_max_s=1, max_attempts=4)) == (
        0.5,
        1.0,
        1.0,
    )


def test_settings_read_the_schedule_from_the_environment() -> None:
    settings = Settings.from_env({"TIDINGS_RETRY_SCHEDULE": "0.5, 1,2"})
    assert settings.retry_schedule == (0.5, 1.0, 2.0)
    legacy = Settings.from_env({"TIDINGS_MAX_ATTEMPTS": "4", "TIDINGS_BACKOFF_BASE_S": "1"})
    assert deployment_default(legacy) == (1.0, 2.0, 4.0)


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({"TIDINGS_RETRY_SCHEDULE": "5,x"}, "TIDINGS_RETRY_SCHEDULE='5,x' is not a valid"),
        ({"TIDINGS_RETRY_SCHEDULE": "5,0"}, "each delay must be above 0"),
        ({"TIDINGS_RETRY_SCHEDULE": "5,86401"}, "at most 86400"),
        ({"TIDINGS_RETRY_SCHEDULE": ",".join(["1"] * 51)}, "at most 50"),
        ({"TIDINGS_RETRY_SCHEDULE": "5", "TIDINGS_MAX_ATTEMPTS": "3"}, "keep one"),
        ({"TIDINGS_MAX_ATTEMPTS": "0"}, "TIDINGS_MAX_ATTEMPTS must be positive"),
        ({"TIDINGS_BACKOFF_MAX_S": "10"}, "is below TIDINGS_BACKOFF_BASE_S"),
    ],
)
def test_settings_refuse_a_schedule_they_cannot_follow(
    environ: dict[str, str], problem: str
) -> None:
    with pytest.raises(ConfigError, match=problem):
        Settings.from_env(environ)


def test_a_legacy_attempt_limit_cuts_or_extends_the_schedule() -> None:
    assert fitted((5.0, 300.0, 1800.0), None) == (5.0, 300.0, 1800.0)
    assert fitted((5.0, 300.0, 1800.0), 2) == (5.0,)
    assert fitted((5.0, 300.0, 1800.0), 1) == ()
    assert fitted((5.0, 300.0), 5) == (5.0, 300.0, 300.0, 300.0)
    assert effective(None, (5.0, 300.0), None) == (5.0, 300.0)
    assert effective((60.0,), (5.0, 300.0), None) == (60.0,)
    assert effective((60.0,), (5.0, 300.0), 3) == (60.0, 60.0)


@given(schedule=schedules, limit=st.integers(min_value=1, max_value=100))
def test_a_fitted_schedule_allows_exactly_the_limit(
    schedule: tuple[float, ...], limit: int
) -> None:
    assert attempts_allowed(fitted(schedule, limit)) == limit


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([], "1 to 50 delays"),
        ([1] * 51, "1 to 50 delays"),
        ([5, 0], "delay 2 \\(0\\) must be 1 to 86400"),
        ([86_401], "must be 1 to 86400"),
        ([1.5], "not a whole number"),
        ([True], "not a whole number"),
        (["5"], "not a whole number"),
        ("5,300", "list of delays"),
        (5, "list of delays"),
    ],
)
def test_an_endpoint_schedule_is_whole_seconds_within_bounds(value: object, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        parse_endpoint_schedule(value)


def test_an_endpoint_schedule_keeps_its_order_and_values() -> None:
    assert parse_endpoint_schedule([5, 300, 86_400, 1, 2.0]) == (5.0, 300.0, 86_400.0, 1.0, 2.0)
