"""The per-endpoint circuit breaker as a pure state machine.

The database applies these same rules in SQL, one update per endpoint per batch; this module is
the reference model that the SQL is tested against.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta


class CircuitState(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


@dataclass(frozen=True, slots=True)
class BreakerConfig:
    failure_threshold: int = 10
    base_cooldown_s: float = 300.0
    max_cooldown_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.failure_threshold < 1:
            raise ValueError(f"failure_threshold must be at least 1, got {self.failure_threshold}")
        if not self.base_cooldown_s > 0:
            raise ValueError(f"base_cooldown_s must be positive, got {self.base_cooldown_s}")
        if not self.max_cooldown_s >= self.base_cooldown_s:
            raise ValueError(
                f"max_cooldown_s ({self.max_cooldown_s}) is below base_cooldown_s "
                f"({self.base_cooldown_s})"
            )


@dataclass(frozen=True, slots=True)
class Breaker:
    state: CircuitState
    consecutive_failures: int
    cooldown_s: float
    opened_at: datetime | None

    def __post_init__(self) -> None:
        if self.consecutive_failures < 0:
            raise ValueError(f"consecutive_failures must be >= 0, got {self.consecutive_failures}")
        if not self.cooldown_s > 0:
            raise ValueError(f"cooldown_s must be positive, got {self.cooldown_s}")
        # An open or probing circuit needs the moment it opened to know when the cooldown ends.
        if (self.state is CircuitState.CLOSED) != (self.opened_at is None):
            raise ValueError(f"a {self.state.value} circuit must {_opened_at_rule(self.state)}")
        if self.opened_at is not None and self.opened_at.tzinfo is None:
            raise ValueError("opened_at must be timezone-aware")


@dataclass(frozen=True, slots=True)
class BatchSummary:
    has_success: bool
    trailing_failures: int


def closed_breaker(cfg: BreakerConfig) -> Breaker:
    """The breaker of a new endpoint."""
    return Breaker(CircuitState.CLOSED, 0, cfg.base_cooldown_s, None)


def on_outcome(b: Breaker, success: bool, now: datetime, cfg: BreakerConfig) -> Breaker:
    """The breaker after one attempt's outcome."""
    if success:
        return closed_breaker(cfg)
    failures = b.consecutive_failures + 1
    if b.state is CircuitState.HALF_OPEN:
        return Breaker(CircuitState.OPEN, failures, min(b.cooldown_s * 2, cfg.max_cooldown_s), now)
    if b.state is CircuitState.CLOSED and failures >= cfg.failure_threshold:
        return Breaker(CircuitState.OPEN, failures, b.cooldown_s, now)
    return replace(b, consecutive_failures=failures)


def apply_batch(b: Breaker, outcomes: Sequence[bool], now: datetime, cfg: BreakerConfig) -> Breaker:
    """The breaker after a batch of outcomes, in the order they happened."""
    for success in outcomes:
        b = on_outcome(b, success, now, cfg)
    return b


def summarize(outcomes: Sequence[bool]) -> BatchSummary:
    """What of a batch matters to the breaker: any success, and the failures after the last one."""
    trailing = 0
    for success in reversed(outcomes):
        if success:
            return BatchSummary(has_success=True, trailing_failures=trailing)
        trailing += 1
    return BatchSummary(has_success=False, trailing_failures=trailing)


def apply_summary(b: Breaker, summary: BatchSummary, now: datetime, cfg: BreakerConfig) -> Breaker:
    """Same result as ``apply_batch`` on the outcomes ``summary`` came from, in one step."""
    if summary.trailing_failures < 0:
        raise ValueError(f"trailing_failures must be >= 0, got {summary.trailing_failures}")
    if summary.has_success:
        # The last success closed the circuit; only the failures after it count.
        b = closed_breaker(cfg)
    k = summary.trailing_failures
    if k == 0:
        return b
    failures = b.consecutive_failures + k
    if b.state is CircuitState.HALF_OPEN:
        return Breaker(CircuitState.OPEN, failures, min(b.cooldown_s * 2, cfg.max_cooldown_s), now)
    if b.state is CircuitState.CLOSED and failures >= cfg.failure_threshold:
        return Breaker(CircuitState.OPEN, failures, b.cooldown_s, now)
    return replace(b, consecutive_failures=failures)


def may_probe(b: Breaker, now: datetime) -> bool:
    """Whether an open circuit's cooldown has run out, so one probe may go."""
    if b.state is not CircuitState.OPEN:
        return False
    assert b.opened_at is not None
    return now >= b.opened_at + timedelta(seconds=b.cooldown_s)


def begin_probe(b: Breaker, now: datetime) -> Breaker:
    """Move an open circuit whose cooldown is over to ``half_open`` for its single probe."""
    if not may_probe(b, now):
        raise ValueError(f"a {b.state.value} circuit cannot begin a probe at {now.isoformat()}")
    return replace(b, state=CircuitState.HALF_OPEN)


def threshold_for(p95_ms: float | None, *, normal: int, slow: int, slow_p95_ms: float) -> int:
    """An endpoint's failure threshold: slow ones (p95 above ``slow_p95_ms``) trip sooner."""
    if not 1 <= slow <= normal:
        raise ValueError(f"thresholds must satisfy 1 <= slow ({slow}) <= normal ({normal})")
    if p95_ms is not None and p95_ms > slow_p95_ms:
        return slow
    return normal


def _opened_at_rule(state: CircuitState) -> str:
    return "not have opened_at" if state is CircuitState.CLOSED else "have opened_at"
