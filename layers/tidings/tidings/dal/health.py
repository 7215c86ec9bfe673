"""The health monitor's data access: the queue's figures, endpoints that need attention,
failing streaks and the endpoints they disable, and the messages disabled endpoints leave behind
(see ``queries/health.sql``). Each function is one statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class QueueFigures:
    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letters: int
    delivered_recently: int
    failed_attempts_recently: int
    dead_lettered_recently: int
    oldest_undelivered_age_s: float | None
    delivery_mean_ms: float | None
    delivery_p95_ms: float | None
    open_circuits: int
    disabled_endpoints: int


@dataclass(frozen=True, slots=True)
class EndpointAttention:
    """An endpoint that is disabled, not closed, or slow."""

    endpoint_id: int
    url: str
    enabled: bool
    disabled_reason: str | None
    state: str
    opened_at: datetime | None
    p95_ms: float | None
    sample_count: int


@dataclass(frozen=True, slots=True)
class DisabledEndpoint:
    endpoint_id: int
    url: str
    failing_since: datetime


def queue_figures(cur: Cursor, *, now: datetime, since: datetime) -> QueueFigures:
    cur.execute(sql("health_summary"), {"now": now, "since": since})
    (row,) = fetch_dicts(cur)
    return QueueFigures(**row)


def endpoints_needing_attention(
    cur: Cursor, *, slow_p95_ms: float, min_samples: int
) -> list[EndpointAttention]:
    cur.execute(
        sql("endpoints_needing_attention"),
        {"slow_p95_ms": slow_p95_ms, "min_samples": min_samples},
    )
    return [EndpointAttention(**row) for row in fetch_dicts(cur)]


def count_dead_lettered_between(cur: Cursor, *, since: datetime, now: datetime) -> int:
    cur.execute(sql("count_dead_lettered_between"), {"since": since, "now": now})
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def track_failing_streaks(cur: Cursor) -> int:
    """Mark the start of new failing streaks and clear ended ones; returns the rows changed."""
    cur.execute(sql("track_failing_streaks"))
    return int(cur.rowcount)


def disable_failing_endpoints(
    cur: Cursor, *, now: datetime, failing_before: datetime, reason: str
) -> list[DisabledEndpoint]:
    cur.execute(
        sql("disable_failing_endpoints"),
        {"now": now, "failing_before": failing_before, "reason": reason},
    )
    return [
        DisabledEndpoint(row["id"], row["url"], row["failing_since"])
        for row in sorted(fetch_dicts(cur), key=lambda row: int(row["id"]))
    ]


def dead_letter_unreachable_messages(cur: Cursor, *, batch_size: int) -> int:
    """Dead-letter a batch of undelivered messages of deleted or disabled endpoints; returns
    how many."""
    cur.execute(sql("dead_letter_unreachable_messages"), {"batch_size": batch_size})
    return len(cur.fetchall())
