"""The percentiles job's data access: latency histograms and every endpoint's percentiles
(see ``queries/percentiles.sql``).

Each function is one statement, and all of them are meant to run together in one transaction,
``lock_percentiles_state`` first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class PercentilesState:
    """What the last percentiles run left behind; all None before the first run."""

    rolled_to: datetime | None
    window_from: datetime | None
    window_s: float | None
    # The histograms' layout ({"growth": ..., "percentiles": ...}); empty before the first run.
    layout: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class EndpointPercentiles:
    endpoint_id: int
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    sample_count: int
    failure_threshold: int
    previous_threshold: int


@dataclass(frozen=True, slots=True)
class WindowChanges:
    """How much buckets of the endpoints' window histograms changed in a roll-up: bucket
    ``buckets[i]`` of endpoint ``endpoint_ids[i]`` by ``counts[i]`` (columns, since a roll-up
    changes thousands of buckets)."""

    endpoint_ids: tuple[int, ...] = ()
    buckets: tuple[int, ...] = ()
    counts: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not len(self.endpoint_ids) == len(self.buckets) == len(self.counts):
            raise ValueError("window changes need as many buckets and counts as endpoints")


def lock_percentiles_state(cur: Cursor) -> PercentilesState:
    cur.execute(sql("lock_percentiles_state"))
    row = cur.fetchone()
    assert row is not None
    rolled_to, window_from, window_s, layout = row
    return PercentilesState(rolled_to, window_from, window_s, layout)


def reset_latency_window(cur: Cursor) -> None:
    cur.execute(sql("reset_latency_window"))


def analyze_latency_histograms(cur: Cursor) -> None:
    """Fresh planner statistics for the histograms, after a build filled them."""
    cur.execute(sql("analyze_latency_histograms"))


def advance_latency_window(
    cur: Cursor,
    *,
    now: datetime,
    reroll_from: datetime,
    window_from: datetime,
    growth: float,
) -> WindowChanges:
    """Roll up and move the window (deleting the minutes that left it and the window buckets it
    emptied); returns every window bucket's change."""
    cur.execute(
        sql("advance_latency_window"),
        {
            "now": now,
            "reroll_from": reroll_from,
            "window_from": window_from,
            "growth": growth,
        },
    )
    rows = cur.fetchall()
    emptied = [(endpoint_id, bucket) for endpoint_id, bucket, _, gone in rows if gone]
    if emptied:
        cur.execute(
            sql("delete_emptied_latency_window"),
            {
                "endpoint_ids": [endpoint_id for endpoint_id, _ in emptied],
                "buckets": [bucket for _, bucket in emptied],
            },
        )
    if not rows:
        return WindowChanges()
    endpoint_ids, buckets, counts, _ = zip(*rows, strict=True)
    return WindowChanges(endpoint_ids, buckets, counts)


def roll_up_attempt_minutes(
    cur: Cursor, *, now: datetime, reroll_from: datetime, keep_from: datetime
) -> None:
    """Count each endpoint's attempts per minute (successes and the others) recorded in
    ``[reroll_from, now)``, and forget the minutes before ``keep_from``."""
    cur.execute(
        sql("roll_up_attempt_minutes"),
        {"now": now, "reroll_from": reroll_from, "keep_from": keep_from},
    )


def allow_large_rollup(
    cur: Cursor, *, work_mem: str = "128MB", statement_timeout_ms: int = 600_000
) -> None:
    cur.execute(
        sql("allow_large_rollup"),
        {"work_mem": work_mem, "statement_timeout_ms": str(statement_timeout_ms)},
    )


def save_percentiles_state(
    cur: Cursor,
    *,
    rolled_to: datetime,
    window_from: datetime,
    window_s: float,
    layout: Mapping[str, Any],
) -> None:
    cur.execute(
        sql("save_percentiles_state"),
        {
            "rolled_to": rolled_to,
            "window_from": window_from,
            "window_s": window_s,
            "layout": json.dumps(dict(layout)),
        },
    )


def update_endpoint_percentiles(
    cur: Cursor,
    *,
    now: datetime,
    changes: WindowChanges,
    rebuilt: bool,
    growth: float,
    slow_p95_ms: float,
    slow_threshold: int,
    normal_threshold: int,
) -> list[EndpointPercentiles]:
    """Write every endpoint's percentiles and failure threshold (health rows locked first).

    ``changes`` are the window's changes since the last run placed the percentiles (none after a
    rebuild, which places them all afresh: ``rebuilt``)."""
    cur.execute(sql("lock_endpoint_health"))
    cur.execute(
        sql("update_endpoint_percentiles"),
        {
            "now": now,
            "change_endpoint_ids": _array_literal(changes.endpoint_ids),
            "change_buckets": _array_literal(changes.buckets),
            "change_counts": _array_literal(changes.counts),
            "rebuilt": rebuilt,
            "growth": growth,
            "slow_p95_ms": slow_p95_ms,
            "slow_threshold": slow_threshold,
            "normal_threshold": normal_threshold,
        },
    )
    rows = sorted(fetch_dicts(cur), key=lambda row: int(row["endpoint_id"]))
    return [
        EndpointPercentiles(
            endpoint_id=row["endpoint_id"],
            p50_ms=row["p50_ms"],
            p95_ms=row["p95_ms"],
            p99_ms=row["p99_ms"],
            sample_count=row["sample_count"],
            failure_threshold=row["failure_threshold"],
            previous_threshold=row["previous_threshold"],
        )
        for row in rows
    ]


def _array_literal(values: Iterable[int]) -> str:
    # One text literal, not an ARRAY[...] constructor with an element per value: planning a
    # constructor of thousands of constants takes longer than running the whole statement.
    return "{" + ",".join(map(str, values)) + "}"
