"""Data access of the health summary, the alerts and the dead-letter report
(see ``queries/reports.sql``). Each function is one statement."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

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
class StoredAlert:
    alert_key: str
    kind: str
    first_fired_at: datetime
    details: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DeadLetterStats:
    endpoint_id: int
    url: str
    dead_letters: int
    top_error: str | None
    top_status_code: int | None
    auth_refusals: int
    rate_limited: int
    first_at: datetime
    last_at: datetime
    mean_attempts: float


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


def monitor_checkpoint(cur: Cursor) -> datetime | None:
    cur.execute(sql("monitor_checkpoint"))
    row = cur.fetchone()
    return None if row is None else row[0]


def save_monitor_checkpoint(cur: Cursor, checked_at: datetime) -> None:
    cur.execute(sql("save_monitor_checkpoint"), {"checked_at": checked_at})


def firing_alerts(cur: Cursor) -> list[StoredAlert]:
    cur.execute(sql("firing_alerts"))
    return [StoredAlert(**row) for row in fetch_dicts(cur)]


def claim_alert_firing(
    cur: Cursor, *, alert_key: str, kind: str, details: Mapping[str, Any], now: datetime
) -> bool:
    """True when this caller turned the alert on (and so must send it)."""
    cur.execute(
        sql("claim_alert_firing"),
        {"alert_key": alert_key, "kind": kind, "details": json.dumps(details), "now": now},
    )
    return cur.fetchone() is not None


def claim_alert_resolved(cur: Cursor, *, alert_key: str, now: datetime) -> bool:
    """True when this caller turned the alert off (and so must send the resolution)."""
    cur.execute(sql("claim_alert_resolved"), {"alert_key": alert_key, "now": now})
    return cur.fetchone() is not None


def unclaim_alert(cur: Cursor, *, alert_key: str, firing: bool) -> None:
    cur.execute(sql("unclaim_alert"), {"alert_key": alert_key, "firing": firing})


def dead_letter_stats(cur: Cursor, *, since: datetime, now: datetime) -> list[DeadLetterStats]:
    cur.execute(sql("dead_letter_stats"), {"since": since, "now": now})
    return [DeadLetterStats(**row) for row in fetch_dicts(cur)]


def claim_dead_letters_for_report(cur: Cursor, *, max_rows: int) -> list[DeadLetterStats]:
    """Mark up to ``max_rows`` unreported dead letters (oldest first) reported, and return them
    per endpoint. Only inside the transaction that publishes the report: see the query."""
    cur.execute(sql("claim_dead_letters_for_report"), {"max_rows": max_rows})
    return [DeadLetterStats(**row) for row in fetch_dicts(cur)]


def count_unreported_dead_letters(cur: Cursor) -> int:
    cur.execute(sql("count_unreported_dead_letters"))
    row = cur.fetchone()
    assert row is not None
    return int(row[0])
