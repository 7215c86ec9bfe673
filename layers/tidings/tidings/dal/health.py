"""The health monitor's data access: the queue's figures, endpoints that need attention,
failing streaks and the endpoints they disable, and the messages disabled endpoints leave behind
(see ``queries/health.sql``). Each function is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    # The uid of the application of the oldest undelivered message.
    oldest_undelivered_application: str | None
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
    # The uid of the endpoint's application.
    app_uid: str = "default"
    # When its TLS client certificate expires, when that is within a week (or past).
    client_certificate_not_after: datetime | None = None


@dataclass(frozen=True, slots=True)
class ApplicationFigures:
    """One application's part of the queue."""

    app_uid: str
    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letters: int
    oldest_undelivered_age_s: float | None


@dataclass(frozen=True, slots=True)
class DisabledEndpoint:
    endpoint_id: int
    url: str
    failing_since: datetime


def queue_figures(
    cur: Cursor, *, now: datetime, since: datetime, app_id: int | None = None
) -> QueueFigures:
    """The queue's figures, of one application or (None) of all."""
    cur.execute(sql("health_summary"), {"now": now, "since": since, "app_id": app_id})
    (row,) = fetch_dicts(cur)
    return QueueFigures(**row)


def application_figures(
    cur: Cursor, *, now: datetime, uids: Sequence[str] | None = None
) -> list[ApplicationFigures]:
    """Per application with work or dead letters (those of ``uids``, or all), by uid."""
    cur.execute(
        sql("application_figures"),
        {"now": now, "uids": None if uids is None else list(uids)},
    )
    return [ApplicationFigures(**row) for row in fetch_dicts(cur)]


def endpoints_needing_attention(
    cur: Cursor, *, slow_p95_ms: float, min_samples: int
) -> list[EndpointAttention]:
    cur.execute(
        sql("endpoints_needing_attention"),
        {"slow_p95_ms": slow_p95_ms, "min_samples": min_samples},
    )
    return [EndpointAttention(**row) for row in fetch_dicts(cur)]


def count_dead_lettered_between(cur: Cursor, *, since: datetime, now: datetime) -> dict[str, int]:
    """Per application uid, the messages dead-lettered in (since, now] (largest first)."""
    cur.execute(sql("count_dead_lettered_between"), {"since": since, "now": now})
    return {str(row[0]): int(row[1]) for row in cur.fetchall()}


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


def retire_endpoints_of_deleted_applications(cur: Cursor) -> list[int]:
    """Disable the endpoints left enabled in applications marked deleted; returns their ids."""
    cur.execute(sql("retire_endpoints_of_deleted_applications"))
    return [int(row[0]) for row in cur.fetchall()]


def dead_letter_unreachable_messages(cur: Cursor, *, batch_size: int) -> int:
    """Dead-letter a batch of undelivered messages of deleted or disabled endpoints; returns
    how many."""
    cur.execute(sql("dead_letter_unreachable_messages"), {"batch_size": batch_size})
    return len(cur.fetchall())


def report_expiring_certificates(cur: Cursor, *, now: datetime, notice_days: Sequence[int]) -> int:
    """Record endpoint.certificate.expiring, once per certificate and notice period, for the
    client certificates expiring within one of ``notice_days``; how many were handed on (those
    recorded by an earlier run included)."""
    cur.execute(sql("report_expiring_certificates"), {"now": now, "notice_days": list(notice_days)})
    row = cur.fetchone()
    return int(row[0]) if row and row[0] is not None else 0
