from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tidings.delivery.circuit_breaker import (
    BatchSummary,
    Breaker,
    BreakerConfig,
    CircuitState,
    apply_batch,
    apply_summary,
    begin_probe,
    closed_breaker,
    may_probe,
    on_outcome,
    summarize,
    threshold_for,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
EARLIER = NOW - timedelta(minutes=7)
CFG = BreakerConfig()
CLOSED = closed_breaker(CFG)


def _open(failures: int = 10, cooldown_s: float = 300, opened_at: datetime = EARLIER) -> Breaker:
    return Breaker(CircuitState.OPEN, failures, cooldown_s, opened_at)


def _half_open(failures: int = 10, cooldown_s: float = 300) -> Breaker:
    return Breaker(CircuitState.HALF_OPEN, failures, cooldown_s, EARLIER)


def test_defaults_match_the_design() -> None:
    assert BreakerConfig(failure_threshold=10, base_cooldown_s=300, max_cooldown_s=3600) == CFG
    assert Breaker(CircuitState.CLOSED, 0, 300, None) == CLOSED


def test_states_are_the_strings_the_database_stores() -> None:
    assert [s.value for s in CircuitState] == ["closed", "open", "half_open"]
    assert CircuitState("half_open") is CircuitState.HALF_OPEN
    assert str(CircuitState.OPEN) == "open"


# --- on_outcome ---------------------------------------------------------------------------------


def test_failures_below_threshold_keep_it_closed() -> None:
    b = apply_batch(CLOSED, [False] * 9, NOW, CFG)
    assert b == Breaker(CircuitState.CLOSED, 9, 300, None)


def test_threshold_th_failure_opens() -> None:
    b = apply_batch(CLOSED, [False] * 10, NOW, CFG)
    assert b == Breaker(CircuitState.OPEN, 10, 300, NOW)


def test_success_resets_the_count_while_closed() -> None:
    b = apply_batch(CLOSED, [False] * 9 + [True] + [False] * 9, NOW, CFG)
    assert b == Breaker(CircuitState.CLOSED, 9, 300, None)


def test_failure_while_open_keeps_opened_at() -> None:
    b = on_outcome(_open(failures=12, cooldown_s=600), False, NOW, CFG)
    assert b == Breaker(CircuitState.OPEN, 13, 600, EARLIER)


def test_probe_failure_reopens_with_doubled_cooldown() -> None:
    b = on_outcome(_half_open(cooldown_s=300), False, NOW, CFG)
    assert b == Breaker(CircuitState.OPEN, 11, 600, NOW)


def test_doubled_cooldown_is_capped() -> None:
    b = on_outcome(_half_open(cooldown_s=2400), False, NOW, CFG)
    assert b.cooldown_s == 3600
    b = on_outcome(_half_open(cooldown_s=3600), False, NOW, CFG)
    assert b.cooldown_s == 3600


@pytest.mark.parametrize("before", [CLOSED, _open(cooldown_s=1200), _half_open(cooldown_s=2400)])
def test_success_closes_from_any_state_and_resets_cooldown(before: Breaker) -> None:
    assert on_outcome(before, True, NOW, CFG) == Breaker(CircuitState.CLOSED, 0, 300, None)


def test_repeated_probe_failures_double_up_to_the_cap() -> None:
    b = apply_batch(CLOSED, [False] * 10, NOW, CFG)
    cooldowns = []
    for _ in range(6):
        assert b.opened_at is not None
        b = begin_probe(b, b.opened_at + timedelta(seconds=b.cooldown_s))
        b = on_outcome(b, False, NOW, CFG)
        cooldowns.append(b.cooldown_s)
    assert cooldowns == [600, 1200, 2400, 3600, 3600, 3600]


def test_lowered_threshold_opens_on_the_next_failure() -> None:
    # An endpoint that turned slow gets a lower threshold than its current count.
    b = Breaker(CircuitState.CLOSED, 7, 300, None)
    assert on_outcome(b, False, NOW, BreakerConfig(failure_threshold=5)).state is CircuitState.OPEN


# --- probing ------------------------------------------------------------------------------------


def test_may_probe_only_after_cooldown() -> None:
    b = _open(cooldown_s=300, opened_at=NOW)
    assert not may_probe(b, NOW)
    assert not may_probe(b, NOW + timedelta(seconds=299.999))
    assert may_probe(b, NOW + timedelta(seconds=300))
    assert may_probe(b, NOW + timedelta(hours=5))


def test_only_open_circuits_may_probe() -> None:
    later = NOW + timedelta(days=1)
    assert not may_probe(CLOSED, later)
    assert not may_probe(_half_open(), later)


def test_begin_probe_moves_to_half_open() -> None:
    b = _open(opened_at=EARLIER)
    assert begin_probe(b, NOW) == Breaker(CircuitState.HALF_OPEN, 10, 300, EARLIER)


def test_begin_probe_refuses_during_cooldown() -> None:
    with pytest.raises(ValueError, match="cannot begin a probe"):
        begin_probe(_open(opened_at=NOW), NOW)
    with pytest.raises(ValueError, match="cannot begin a probe"):
        begin_probe(_half_open(), NOW)


# --- summaries ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcomes", "summary"),
    [
        ([], BatchSummary(False, 0)),
        ([True], BatchSummary(True, 0)),
        ([False, False], BatchSummary(False, 2)),
        ([False, True, False, False], BatchSummary(True, 2)),
        ([True, False, True], BatchSummary(True, 0)),
    ],
)
def test_summarize(outcomes: list[bool], summary: BatchSummary) -> None:
    assert summarize(outcomes) == summary


def test_empty_batch_changes_nothing() -> None:
    b = _open(failures=12)
    assert apply_batch(b, [], NOW, CFG) == b
    assert apply_summary(b, summarize([]), NOW, CFG) == b


@pytest.mark.parametrize(
    ("before", "summary", "after"),
    [
        (CLOSED, BatchSummary(False, 9), Breaker(CircuitState.CLOSED, 9, 300, None)),
        (CLOSED, BatchSummary(False, 10), Breaker(CircuitState.OPEN, 10, 300, NOW)),
        (
            Breaker(CircuitState.CLOSED, 6, 300, None),
            BatchSummary(False, 4),
            Breaker(CircuitState.OPEN, 10, 300, NOW),
        ),
        (_open(failures=12), BatchSummary(True, 9), Breaker(CircuitState.CLOSED, 9, 300, None)),
        (_open(failures=12), BatchSummary(True, 10), Breaker(CircuitState.OPEN, 10, 300, NOW)),
        (_open(failures=12, cooldown_s=600), BatchSummary(False, 3), _open(15, 600)),
        (
            _half_open(cooldown_s=600),
            BatchSummary(False, 2),
            Breaker(CircuitState.OPEN, 12, 1200, NOW),
        ),
        (_half_open(cooldown_s=600), BatchSummary(True, 0), CLOSED),
    ],
)
def test_apply_summary_cases(before: Breaker, summary: BatchSummary, after: Breaker) -> None:
    assert apply_summary(before, summary, NOW, CFG) == after


def test_negative_trailing_failures_are_refused() -> None:
    with pytest.raises(ValueError, match="trailing_failures"):
        apply_summary(CLOSED, BatchSummary(False, -1), NOW, CFG)


timestamps = st.datetimes(
    min_value=datetime(2020, 1, 1), max_value=datetime(2030, 1, 1), timezones=st.just(UTC)
)


@st.composite
def configs(draw: st.DrawFn) -> BreakerConfig:
    base = draw(st.floats(min_value=1, max_value=1000))
    return BreakerConfig(
        failure_threshold=draw(st.integers(min_value=1, max_value=15)),
        base_cooldown_s=base,
        max_cooldown_s=draw(st.floats(min_value=base, max_value=10_000)),
    )


@st.composite
def breakers(draw: st.DrawFn) -> Breaker:
    state = draw(st.sampled_from(CircuitState))
    return Breaker(
        state=state,
        consecutive_failures=draw(st.integers(min_value=0, max_value=20)),
        cooldown_s=draw(st.floats(min_value=1, max_value=10_000)),
        opened_at=None if state is CircuitState.CLOSED else draw(timestamps),
    )


@settings(max_examples=1000)
@given(b=breakers(), outcomes=st.lists(st.booleans(), max_size=25), now=timestamps, cfg=configs())
@example(b=CLOSED, outcomes=[False] * 10, now=NOW, cfg=CFG)
@example(b=Breaker(CircuitState.CLOSED, 4, 300, None), outcomes=[False] * 6, now=NOW, cfg=CFG)
@example(b=_open(), outcomes=[True] + [False] * 10, now=NOW, cfg=CFG)
@example(b=_half_open(cooldown_s=2400), outcomes=[False, False], now=NOW, cfg=CFG)
def test_apply_summary_equals_apply_batch(
    b: Breaker, outcomes: list[bool], now: datetime, cfg: BreakerConfig
) -> None:
    assert apply_summary(b, summarize(outcomes), now, cfg) == apply_batch(b, outcomes, now, cfg)


@given(outcomes=st.lists(st.booleans(), max_size=40))
def test_summary_counts_failures_after_the_last_success(outcomes: list[bool]) -> None:
    summary = summarize(outcomes)
    assert summary.has_success == any(outcomes)
    tail = outcomes[len(outcomes) - summary.trailing_failures :] if outcomes else []
    assert not any(tail)
    if summary.has_success:
        assert outcomes[-summary.trailing_failures - 1] is True


@given(b=breakers(), outcomes=st.lists(st.booleans(), max_size=40), now=timestamps, cfg=configs())
def test_batch_invariants(
    b: Breaker, outcomes: list[bool], now: datetime, cfg: BreakerConfig
) -> None:
    after = apply_batch(b, outcomes, now, cfg)
    assert after.cooldown_s <= max(b.cooldown_s, cfg.max_cooldown_s)
    if outcomes and outcomes[-1]:
        assert after == closed_breaker(cfg)
    if not any(outcomes):
        assert after.consecutive_failures == b.consecutive_failures + len(outcomes)
    if after.state is CircuitState.OPEN and after.opened_at != now:
        # Only a circuit that was open already keeps an older opening time.
        assert b.state is CircuitState.OPEN and after.opened_at == b.opened_at
    assert after.state is not CircuitState.HALF_OPEN or outcomes == []


# --- configuration and validation ---------------------------------------------------------------


def test_threshold_for_slow_endpoints() -> None:
    assert threshold_for(None, normal=10, slow=5, slow_p95_ms=5000) == 10
    assert threshold_for(200.0, normal=10, slow=5, slow_p95_ms=5000) == 10
    assert threshold_for(5000.0, normal=10, slow=5, slow_p95_ms=5000) == 10
    assert threshold_for(5000.1, normal=10, slow=5, slow_p95_ms=5000) == 5


@pytest.mark.parametrize(("normal", "slow"), [(10, 0), (5, 10), (0, 0)])
def test_threshold_for_refuses_inconsistent_thresholds(normal: int, slow: int) -> None:
    with pytest.raises(ValueError, match="thresholds"):
        threshold_for(9000.0, normal=normal, slow=slow, slow_p95_ms=5000)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"failure_threshold": 0}, "failure_threshold"),
        ({"base_cooldown_s": 0}, "base_cooldown_s"),
        ({"base_cooldown_s": 600, "max_cooldown_s": 300}, "max_cooldown_s"),
    ],
)
def test_bad_config_is_refused(kwargs: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        BreakerConfig(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("state", "failures", "cooldown", "opened_at", "message"),
    [
        (CircuitState.CLOSED, 0, 300, NOW, "must not have opened_at"),
        (CircuitState.OPEN, 10, 300, None, "must have opened_at"),
        (CircuitState.HALF_OPEN, 10, 300, None, "must have opened_at"),
        (CircuitState.CLOSED, -1, 300, None, "consecutive_failures"),
        (CircuitState.CLOSED, 0, 0, None, "cooldown_s"),
        (CircuitState.OPEN, 10, 300, datetime(2026, 1, 1), "timezone-aware"),
    ],
)
def test_inconsistent_breakers_are_refused(
    state: CircuitState, failures: int, cooldown: float, opened_at: datetime | None, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        Breaker(state, failures, cooldown, opened_at)
