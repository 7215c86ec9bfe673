"""Latency percentiles per endpoint over a rolling window, from log-scale histograms.

Sorting a day of raw attempts for every endpoint gets slower as traffic grows, so attempts are
rolled up into histograms instead: bucket ``b`` counts the latencies in ``[G**b, G**(b+1))`` ms,
``G = BUCKET_GROWTH``, and bucket -1 counts 0 ms. A percentile is the bucket holding the sample of
that rank, reported as the point of the bucket with the smallest worst-case relative error,
``2 * G**(b+1) / (1 + G)``. So each reported percentile is within ``MAX_RELATIVE_ERROR``
(``(G - 1) / (G + 1)``, just under 1 %) of the exact sample of the same rank: the q-th percentile
of N samples is the sample of rank ceil(q * N), as ``percentile_disc`` defines it.

The window is whole minutes: a refresh at ``now`` covers the attempts recorded from
``floor_minute(floor_minute(now) - window)`` until ``now``, as the record statements' tallies
(``tidings.attempt_tallies``: each attempt's endpoint and latency, by the time it was recorded)
give them. Each run re-reads the tallies of the last ``percentiles_rollup_margin_s`` before the
previous run, because records made earlier may commit later; counts are stored idempotently, so
re-reading never double counts. The same roll-up counts each endpoint's successes and failures
per minute (``tidings.attempt_minutes``, the last day), which the endpoints' hourly charts read.

Each endpoint keeps, per percentile, the bucket holding it and the counts before and in that
bucket. A run applies the window's changes to those counts and steps to a neighbouring bucket only
where the percentile left its bucket, so its cost follows the few buckets that changed, not the
size of the histograms.

Building the histograms from a whole window of attempts (the first run, or after the window's
length or the histograms' layout changed) is done a slice of ``percentiles_build_slice_s`` at a
time, for at most ``percentiles_build_budget_s`` per run: a large deployment's first runs each
take a bounded time, and the endpoints' figures are written once the histograms are complete.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from aws_lambda_powertools.metrics import MetricUnit

from tidings.dal import percentiles as dal
from tidings.dal.connection import Cursor, Database
from tidings.dal.percentiles import EndpointPercentiles, PercentilesState, WindowChanges
from tidings.delivery.circuit_breaker import threshold_for
from tidings.observability import logger, metrics

BUCKET_GROWTH = 1.02
MAX_RELATIVE_ERROR = (BUCKET_GROWTH - 1) / (BUCKET_GROWTH + 1)
# The percentiles the update query places (its p50/p95/p99), whose positions in the window
# histogram each endpoint keeps between runs, in the order they are stored.
PERCENTILES = (50, 95, 99)
# Stored with the histograms: histograms and positions built otherwise are rebuilt, not mixed.
# (The source: the tallies of recorded attempts, migration 0150; the attempt log before.)
LAYOUT = {"growth": BUCKET_GROWTH, "percentiles": list(PERCENTILES), "source": "tallies"}
# The endpoints' hourly charts show the last day: the minutes counted are kept that long.
CHART_S = 25 * 3600
# Marks, beside the layout, histograms still being built.
BUILDING = "building"


def bucket_of(latency_ms: int) -> int:
    """The histogram bucket of a latency (the same rule as the roll-up SQL)."""
    if latency_ms < 0:
        raise ValueError(f"a latency cannot be negative, got {latency_ms} ms")
    if latency_ms == 0:
        return -1
    return math.floor(math.log(latency_ms) / math.log(BUCKET_GROWTH))


def bucket_value(bucket: int) -> float:
    """The latency reported for a bucket: the point of least worst-case relative error."""
    if bucket < 0:
        return 0.0
    return 2 * BUCKET_GROWTH ** (bucket + 1) / (1 + BUCKET_GROWTH)


def floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


class PercentileSettings(Protocol):
    """What the percentiles job reads of the settings."""

    @property
    def circuit_failure_threshold(self) -> int: ...
    @property
    def circuit_slow_failure_threshold(self) -> int: ...
    @property
    def circuit_slow_p95_ms(self) -> int: ...
    @property
    def latency_window_s(self) -> float: ...
    @property
    def percentiles_rollup_margin_s(self) -> float: ...
    @property
    def percentiles_build_slice_s(self) -> float: ...
    @property
    def percentiles_build_budget_s(self) -> float: ...
    @property
    def slow_endpoint_min_samples(self) -> int: ...
    @property
    def slow_endpoint_p95_ms(self) -> int: ...


@dataclass(frozen=True, slots=True)
class RollupPlan:
    """What one percentiles run reads and where its window starts.

    ``rebuild``: the histograms are forgotten and built anew from the attempts (first run, the
    window's length or the histograms' layout changed, or time went backwards). ``building``:
    the histograms are being built, a slice at a time, from ``reroll_from`` on (after a rebuild
    began, until they reach the present). ``reroll_from``: the attempts read start here.
    ``window_from``: the window's new first minute.
    """

    rebuild: bool
    reroll_from: datetime
    window_from: datetime
    building: bool = False


def plan_rollup(
    state: PercentilesState, now: datetime, *, window_s: float, margin_s: float
) -> RollupPlan:
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if window_s <= 0 or margin_s < 0:
        raise ValueError(f"window ({window_s} s) must be positive and margin ({margin_s} s) >= 0")
    window_from = floor_minute(floor_minute(now) - timedelta(seconds=window_s))
    layout = {k: v for k, v in state.layout.items() if k != BUILDING}
    if (
        state.rolled_to is None
        or state.window_from is None
        or state.window_s != window_s
        or layout != LAYOUT
        or state.window_from > window_from
    ):
        return RollupPlan(True, window_from, window_from, building=True)
    if state.layout.get(BUILDING):
        return RollupPlan(False, max(state.rolled_to, window_from), window_from, building=True)
    reroll_from = floor_minute(min(state.rolled_to, now) - timedelta(seconds=margin_s))
    return RollupPlan(
        rebuild=False,
        reroll_from=max(reroll_from, window_from),
        window_from=window_from,
    )


@dataclass(frozen=True, slots=True)
class PercentileRefresh:
    """Every endpoint's new figures, with the threshold changes and the slow endpoints."""

    endpoints: tuple[EndpointPercentiles, ...]
    rebuilt: bool
    # The histograms are still being built; no endpoint's figures were written this run.
    building: bool = False
    # How far the histograms reach.
    rolled_to: datetime | None = None

    def threshold_changes(self) -> tuple[EndpointPercentiles, ...]:
        return tuple(e for e in self.endpoints if e.failure_threshold != e.previous_threshold)

    def slow(self, *, p95_ms: float, min_samples: int) -> tuple[EndpointPercentiles, ...]:
        return tuple(
            e
            for e in self.endpoints
            if e.p95_ms is not None and e.p95_ms > p95_ms and e.sample_count >= min_samples
        )


def refresh_percentiles(
    cur: Cursor, settings: PercentileSettings, now: datetime
) -> PercentileRefresh:
    """Roll new attempts into the histograms and rewrite every endpoint's percentiles and
    failure threshold. Run it inside one transaction."""
    # The same thresholds the circuit breaker's reference model accepts.
    threshold_for(
        None,
        normal=settings.circuit_failure_threshold,
        slow=settings.circuit_slow_failure_threshold,
        slow_p95_ms=settings.circuit_slow_p95_ms,
    )
    state = dal.lock_percentiles_state(cur)
    plan = plan_rollup(
        state,
        now,
        window_s=settings.latency_window_s,
        margin_s=settings.percentiles_rollup_margin_s,
    )
    if plan.building:
        return _build(cur, settings, now, plan)
    changes = dal.advance_latency_window(
        cur,
        now=now,
        reroll_from=plan.reroll_from,
        window_from=plan.window_from,
        growth=BUCKET_GROWTH,
    )
    _count_minutes(cur, now, plan.reroll_from)
    assert state.rolled_to is not None  # a plan that is not building follows a complete build
    dal.save_percentiles_state(
        cur,
        rolled_to=max(now, state.rolled_to),
        window_from=plan.window_from,
        window_s=settings.latency_window_s,
        layout=LAYOUT,
    )
    return PercentileRefresh(_place(cur, settings, now, changes, rebuilt=False), rebuilt=False)


def _build(
    cur: Cursor, settings: PercentileSettings, now: datetime, plan: RollupPlan
) -> PercentileRefresh:
    """Roll the window's attempts into the histograms a slice at a time, for at most the build
    budget; once they reach ``now``, place every endpoint's percentiles afresh."""
    dal.allow_large_rollup(cur)
    if plan.rebuild:
        dal.reset_latency_window(cur)
    slice_ = timedelta(seconds=settings.percentiles_build_slice_s)
    deadline = time.monotonic() + settings.percentiles_build_budget_s
    rolled_to = plan.reroll_from
    # At least one slice a run, so that a build always moves on.
    while rolled_to < now:
        until = min(rolled_to + slice_, now)
        dal.advance_latency_window(
            cur,
            now=until,
            reroll_from=rolled_to,
            window_from=plan.window_from,
            growth=BUCKET_GROWTH,
        )
        _count_minutes(cur, until, rolled_to)
        rolled_to = until
        if time.monotonic() >= deadline:
            break
    done = rolled_to >= now
    dal.save_percentiles_state(
        cur,
        rolled_to=rolled_to,
        window_from=plan.window_from,
        window_s=settings.latency_window_s,
        layout=LAYOUT if done else {**LAYOUT, BUILDING: True},
    )
    if not done:
        return PercentileRefresh((), rebuilt=False, building=True, rolled_to=rolled_to)
    # The roll-ups that follow find their rows by minute; without fresh statistics the planner
    # would take a day of rows for a few minutes and scan them all.
    dal.analyze_latency_histograms(cur)
    endpoints = _place(cur, settings, now, WindowChanges(), rebuilt=True)
    return PercentileRefresh(endpoints, rebuilt=True, rolled_to=rolled_to)


def _count_minutes(cur: Cursor, now: datetime, reroll_from: datetime) -> None:
    """The per-minute counts of the endpoints' hourly charts, rolled up with the histograms."""
    dal.roll_up_attempt_minutes(
        cur, now=now, reroll_from=reroll_from, keep_from=now - timedelta(seconds=CHART_S)
    )


def _place(
    cur: Cursor,
    settings: PercentileSettings,
    now: datetime,
    changes: WindowChanges,
    *,
    rebuilt: bool,
) -> tuple[EndpointPercentiles, ...]:
    return tuple(
        dal.update_endpoint_percentiles(
            cur,
            now=now,
            changes=changes,
            rebuilt=rebuilt,
            growth=BUCKET_GROWTH,
            slow_p95_ms=settings.circuit_slow_p95_ms,
            slow_threshold=settings.circuit_slow_failure_threshold,
            normal_threshold=settings.circuit_failure_threshold,
        )
    )


def run_scheduled_refresh(
    db: Database, settings: PercentileSettings, now: datetime
) -> dict[str, Any]:
    """The scheduled job: refresh in one transaction, log threshold changes and slow endpoints,
    count the slow ones as a metric, and describe the run."""
    refresh = db.run(lambda cur: refresh_percentiles(cur, settings, now), transaction=True)
    if refresh.building:
        logger.info(
            "building the latency histograms; figures follow once they are complete",
            extra={"rolled_to": refresh.rolled_to.isoformat() if refresh.rolled_to else None},
        )
    slow = refresh.slow(
        p95_ms=settings.slow_endpoint_p95_ms, min_samples=settings.slow_endpoint_min_samples
    )
    for change in refresh.threshold_changes():
        logger.info(
            "failure threshold changed",
            extra={
                "endpoint_id": change.endpoint_id,
                "p95_ms": change.p95_ms,
                "from": change.previous_threshold,
                "to": change.failure_threshold,
            },
        )
    for endpoint in slow:
        logger.warning(
            "slow endpoint",
            extra={
                "endpoint_id": endpoint.endpoint_id,
                "p95_ms": endpoint.p95_ms,
                "sample_count": endpoint.sample_count,
            },
        )
    metrics.add_metric(name="SlowEndpoints", unit=MetricUnit.Count, value=len(slow))
    return {
        "endpoints": len(refresh.endpoints),
        "rebuilt": refresh.rebuilt,
        "building": refresh.building,
        "threshold_changes": [c.endpoint_id for c in refresh.threshold_changes()],
        "slow_endpoints": [
            {"endpoint_id": e.endpoint_id, "p95_ms": e.p95_ms, "sample_count": e.sample_count}
            for e in slow
        ],
    }
