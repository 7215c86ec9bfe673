"""Exponential backoff with full jitter (DESIGN §4)."""

from __future__ import annotations

import math
import random

# Jitter spreads retries apart; it protects nothing secret, so a seeded PRNG is right here.
_default_rng = random.Random()  # noqa: S311


def cap_s(failed_attempts: int, *, base_s: float, max_s: float) -> float:
    """The longest delay after ``failed_attempts`` attempts: min(max_s, base_s * 2**(n - 1))."""
    _check(failed_attempts, base_s=base_s, max_s=max_s)
    if base_s == 0 or max_s == 0:
        return 0.0
    exponent = failed_attempts - 1
    # Past this exponent the doubling has passed max_s; stopping here avoids float overflow.
    if exponent >= math.log2(max_s) - math.log2(base_s):
        return max_s
    return min(max_s, math.ldexp(base_s, exponent))


def retry_delay_s(
    failed_attempts: int,
    *,
    base_s: float,
    max_s: float,
    rng: random.Random | None = None,
) -> float:
    """A delay drawn uniformly from [0, cap_s(...)] ("full jitter")."""
    upper = cap_s(failed_attempts, base_s=base_s, max_s=max_s)
    return (rng or _default_rng).uniform(0.0, upper)


def _check(failed_attempts: int, *, base_s: float, max_s: float) -> None:
    if isinstance(failed_attempts, bool) or not isinstance(failed_attempts, int):
        raise TypeError(f"failed_attempts must be an int, got {type(failed_attempts).__name__}")
    if failed_attempts < 1:
        raise ValueError(f"failed_attempts must be at least 1, got {failed_attempts}")
    for name, value in (("base_s", base_s), ("max_s", max_s)):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value}")
