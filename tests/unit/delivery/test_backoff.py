from __future__ import annotations

import math
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.delivery.backoff import cap_s, retry_delay_s

finite_non_negative = st.floats(min_value=0, max_value=1e12, allow_nan=False)
attempts = st.integers(min_value=1, max_value=10_000)


def test_cap_doubles_from_base_until_max() -> None:
    caps = [cap_s(n, base_s=30, max_s=3600) for n in range(1, 9)]
    assert caps == [30, 60, 120, 240, 480, 960, 1920, 3600]


def test_first_retry_waits_at_most_base() -> None:
    assert cap_s(1, base_s=30, max_s=3600) == 30


def test_cap_survives_huge_attempt_counts() -> None:
    assert cap_s(10**9, base_s=30, max_s=3600) == 3600
    # The smallest float doubled 1999 times is 2**925: finite, computed without overflow.
    assert cap_s(2000, base_s=5e-324, max_s=1.7e308) == 2.0**925
    assert cap_s(2200, base_s=5e-324, max_s=1.7e308) == 1.7e308


def test_zero_base_or_max_means_no_delay() -> None:
    assert cap_s(5, base_s=0, max_s=3600) == 0
    assert cap_s(5, base_s=30, max_s=0) == 0
    assert retry_delay_s(3, base_s=0, max_s=10, rng=random.Random(1)) == 0


@pytest.mark.parametrize("bad", [0, -1])
def test_attempts_below_one_are_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="failed_attempts must be at least 1"):
        retry_delay_s(bad, base_s=30, max_s=3600)
    with pytest.raises(ValueError, match="failed_attempts must be at least 1"):
        cap_s(bad, base_s=30, max_s=3600)


@pytest.mark.parametrize(
    ("base_s", "max_s", "name"),
    [(-1, 10, "base_s"), (1, -1, "max_s"), (math.inf, 10, "base_s"), (1, math.nan, "max_s")],
)
def test_bad_bounds_are_refused(base_s: float, max_s: float, name: str) -> None:
    with pytest.raises(ValueError, match=name):
        cap_s(1, base_s=base_s, max_s=max_s)


def test_bool_is_not_an_attempt_count() -> None:
    with pytest.raises(TypeError, match="failed_attempts"):
        cap_s(True, base_s=1, max_s=2)


def test_seeded_rng_gives_reproducible_delays() -> None:
    first = [retry_delay_s(n, base_s=30, max_s=3600, rng=random.Random(7)) for n in range(1, 6)]
    again = [retry_delay_s(n, base_s=30, max_s=3600, rng=random.Random(7)) for n in range(1, 6)]
    assert first == again


def test_delays_are_spread_over_the_whole_range() -> None:
    rng = random.Random(42)
    delays = [retry_delay_s(3, base_s=30, max_s=3600, rng=rng) for _ in range(2000)]
    cap = cap_s(3, base_s=30, max_s=3600)
    assert min(delays) < cap * 0.05
    assert max(delays) > cap * 0.95
    assert abs(sum(delays) / len(delays) - cap / 2) < cap * 0.05


def test_default_rng_is_used_without_one() -> None:
    delays = {retry_delay_s(4, base_s=30, max_s=3600) for _ in range(50)}
    assert all(0 <= d <= 240 for d in delays)
    assert len(delays) > 1


@given(n=attempts, base_s=finite_non_negative, max_s=finite_non_negative, seed=st.integers())
def test_delay_is_always_within_zero_and_cap(
    n: int, base_s: float, max_s: float, seed: int
) -> None:
    delay = retry_delay_s(n, base_s=base_s, max_s=max_s, rng=random.Random(seed))
    assert 0 <= delay <= cap_s(n, base_s=base_s, max_s=max_s)


@given(n=attempts, base_s=finite_non_negative, max_s=finite_non_negative)
def test_cap_is_monotone_and_never_above_max(n: int, base_s: float, max_s: float) -> None:
    here = cap_s(n, base_s=base_s, max_s=max_s)
    following = cap_s(n + 1, base_s=base_s, max_s=max_s)
    assert 0 <= here <= following <= max_s
    assert math.isfinite(following)


@given(
    n=st.integers(min_value=1, max_value=40),
    base_s=st.floats(0.001, 1e4),
    max_s=st.floats(0.001, 1e6),
)
def test_cap_matches_the_formula_where_it_cannot_overflow(
    n: int, base_s: float, max_s: float
) -> None:
    assert cap_s(n, base_s=base_s, max_s=max_s) == pytest.approx(min(max_s, base_s * 2 ** (n - 1)))
