"""The histogram buckets and the roll-up plan of the percentiles job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.dal.percentiles import PercentilesState
from tidings.maintenance.percentiles import (
    BUCKET_GROWTH,
    BUILDING,
    LAYOUT,
    MAX_RELATIVE_ERROR,
    bucket_of,
    bucket_value,
    floor_minute,
    plan_rollup,
)

NOW = datetime(2026, 11, 29, 12, 7, 31, tzinfo=UTC)
DAY = 86400.0


def test_the_stated_error_is_just_under_one_percent() -> None:
    assert pytest.approx(0.0099, abs=0.0001) == MAX_RELATIVE_ERROR
    assert MAX_RELATIVE_ERROR == (BUCKET_GROWTH - 1) / (BUCKET_GROWTH + 1)


@given(st.integers(min_value=1, max_value=2**31 - 1))
def test_every_latency_is_reported_within_the_stated_error(latency_ms: int) -> None:
    reported = bucket_value(bucket_of(latency_ms))
    assert abs(reported - latency_ms) / latency_ms <= MAX_RELATIVE_ERROR + 1e-12


@given(st.integers(min_value=0, max_value=10**7), st.integers(min_value=0, max_value=10**7))
def test_buckets_keep_the_order_of_latencies(a: int, b: int) -> None:
    if a <= b:
        assert bucket_of(a) <= bucket_of(b)


def test_zero_has_its_own_bucket_and_negatives_are_refused() -> None:
    assert bucket_of(0) == -1
    assert bucket_value(-1) == 0
    assert bucket_of(1) == 0
    with pytest.raises(ValueError, match="negative"):
        bucket_of(-1)


def test_the_first_run_rebuilds_the_window() -> None:
    plan = plan_rollup(PercentilesState(None, None, None), NOW, window_s=DAY, margin_s=900)
    start = datetime(2026, 11, 28, 12, 7, tzinfo=UTC)
    assert (plan.rebuild, plan.reroll_from, plan.window_from) == (True, start, start)


def test_a_later_run_rereads_the_margin_before_the_previous_one() -> None:
    previous = NOW - timedelta(minutes=5)
    state = PercentilesState(previous, previous.replace(second=0) - timedelta(days=1), DAY, LAYOUT)
    plan = plan_rollup(state, NOW, window_s=DAY, margin_s=900)
    assert not plan.rebuild
    assert plan.reroll_from == datetime(2026, 11, 29, 11, 47, tzinfo=UTC)
    assert plan.window_from == datetime(2026, 11, 28, 12, 7, tzinfo=UTC)


def test_the_reread_never_starts_before_the_window() -> None:
    long_ago = NOW - timedelta(days=3)
    state = PercentilesState(long_ago, long_ago - timedelta(days=1), DAY, LAYOUT)
    plan = plan_rollup(state, NOW, window_s=DAY, margin_s=900)
    assert not plan.rebuild
    assert plan.reroll_from == plan.window_from


@pytest.mark.parametrize(
    "state",
    [
        PercentilesState(NOW, NOW - timedelta(hours=6), 6 * 3600.0, LAYOUT),  # another window
        PercentilesState(NOW, NOW + timedelta(hours=1), DAY, LAYOUT),  # time went backwards
        PercentilesState(NOW, NOW - timedelta(days=1), DAY, {**LAYOUT, "growth": 1.05}),
        # Histograms from before the kept percentile positions: the positions must be placed.
        PercentilesState(NOW, NOW - timedelta(days=1), DAY, {"growth": 1.02, "group_size": 16}),
    ],
)
def test_a_changed_window_or_clock_rebuilds(state: PercentilesState) -> None:
    assert plan_rollup(state, NOW, window_s=DAY, margin_s=900).rebuild


def test_bad_arguments_are_refused() -> None:
    empty = PercentilesState(None, None, None)
    with pytest.raises(ValueError, match="timezone-aware"):
        plan_rollup(empty, NOW.replace(tzinfo=None), window_s=DAY, margin_s=0)
    with pytest.raises(ValueError, match="window"):
        plan_rollup(empty, NOW, window_s=0, margin_s=0)


def test_a_build_under_way_continues_where_the_last_run_stopped() -> None:
    start = floor_minute(floor_minute(NOW) - timedelta(seconds=DAY))
    halfway = start + timedelta(hours=9)
    state = PercentilesState(halfway, start, DAY, {**LAYOUT, BUILDING: True})
    plan = plan_rollup(state, NOW, window_s=DAY, margin_s=900)
    assert (plan.rebuild, plan.building, plan.reroll_from) == (False, True, halfway)
    # A complete build is no longer building.
    done = PercentilesState(NOW, start, DAY, LAYOUT)
    assert not plan_rollup(done, NOW, window_s=DAY, margin_s=900).building
