"""The dead-letter report: per endpoint, what was dead-lettered in a window, the pattern it
matches and what to do about it.

Patterns, checked in this order (``share`` of an endpoint's dead letters, default one half):
- credentials changed: that share or more were refused with 401/403;
- rate limited: that share or more were refused with 429;
- outage cluster: at least ``outage_min_count`` dead letters within ``outage_span_s``;
- slow accumulation: anything else, a few spread over the window.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from tidings.config import Settings
from tidings.dal import reports
from tidings.dal.connection import Cursor
from tidings.dal.reports import DeadLetterStats
from tidings.notify import Notifier
from tidings.ssrf import display_origin


class Pattern(enum.StrEnum):
    ENDPOINT_DISABLED = "endpoint_disabled"
    CREDENTIALS_CHANGED = "credentials_changed"
    RATE_LIMITED = "rate_limited"
    OUTAGE_CLUSTER = "outage_cluster"
    SLOW_ACCUMULATION = "slow_accumulation"


# The reasons the health monitor writes when it dead-letters what a disabled or deleted
# endpoint still had queued (dal/queries/maintenance.sql, dead_letter_unreachable_messages).
UNREACHABLE_REASONS = ("endpoint disabled", "endpoint deleted")

ACTIONS = {
    Pattern.ENDPOINT_DISABLED: (
        "The endpoint was disabled or deleted (the reason is in the top error) and its queued "
        "messages became dead letters. If the receiver is back, enable the endpoint again and "
        "replay them; if it is gone for good, there is nothing to do."
    ),
    Pattern.CREDENTIALS_CHANGED: (
        "The receiver refuses our requests (401/403): its credentials or signature verification "
        "changed. Check the endpoint's signing secret with its owner, then replay the dead letters."
    ),
    Pattern.RATE_LIMITED: (
        "The receiver rate-limits us (429): lower the endpoint's rate limit (rate_limit_per_s) "
        "below what it accepts, then replay the dead letters."
    ),
    Pattern.OUTAGE_CLUSTER: (
        "Many failed within a short span: the receiver was down. Once it answers again, replay "
        "the dead letters of that span."
    ),
    Pattern.SLOW_ACCUMULATION: (
        "A few failures spread over time: look at the most common error with the receiver's "
        "owner (a bug on their side or payloads they reject), then replay selectively."
    ),
}


@dataclass(frozen=True, slots=True)
class PatternRules:
    outage_min_count: int = 5
    outage_span_s: float = 900.0
    share: float = 0.5

    def __post_init__(self) -> None:
        if self.outage_min_count < 1:
            raise ValueError(f"outage_min_count must be at least 1, got {self.outage_min_count}")
        if self.outage_span_s < 0:
            raise ValueError(f"outage_span_s must be >= 0, got {self.outage_span_s}")
        if not 0 < self.share <= 1:
            raise ValueError(f"share must be within (0, 1], got {self.share}")

    @classmethod
    def from_settings(cls, settings: Settings) -> PatternRules:
        return cls(
            outage_min_count=settings.dead_letter_outage_min_count,
            outage_span_s=settings.dead_letter_outage_span_s,
            share=settings.dead_letter_pattern_share,
        )


def classify(stats: DeadLetterStats, rules: PatternRules) -> Pattern:
    """The pattern an endpoint's dead letters match."""
    if (stats.top_error or "").startswith(UNREACHABLE_REASONS):
        return Pattern.ENDPOINT_DISABLED
    if stats.auth_refusals >= rules.share * stats.dead_letters:
        return Pattern.CREDENTIALS_CHANGED
    if stats.rate_limited >= rules.share * stats.dead_letters:
        return Pattern.RATE_LIMITED
    span_s = (stats.last_at - stats.first_at).total_seconds()
    if stats.dead_letters >= rules.outage_min_count and span_s <= rules.outage_span_s:
        return Pattern.OUTAGE_CLUSTER
    return Pattern.SLOW_ACCUMULATION


@dataclass(frozen=True, slots=True)
class EndpointDeadLetters:
    stats: DeadLetterStats
    pattern: Pattern

    @property
    def action(self) -> str:
        return ACTIONS[self.pattern]

    def to_dict(self) -> dict[str, Any]:
        s = self.stats
        return {
            "endpoint_id": s.endpoint_id,
            "url": display_origin(s.url),
            "dead_letters": s.dead_letters,
            "top_error": s.top_error,
            "top_status_code": s.top_status_code,
            "first_at": s.first_at.isoformat(),
            "last_at": s.last_at.isoformat(),
            "mean_attempts": round(s.mean_attempts, 2),
            "pattern": self.pattern.value,
            "action": self.action,
        }


@dataclass(frozen=True, slots=True)
class DeadLetterReport:
    """The dead letters of (``since``, ``until``], per endpoint, largest first."""

    since: datetime
    until: datetime
    endpoints: tuple[EndpointDeadLetters, ...]

    @property
    def total(self) -> int:
        return sum(e.stats.dead_letters for e in self.endpoints)

    @property
    def is_empty(self) -> bool:
        return not self.endpoints

    def subject(self) -> str:
        hours = (self.until - self.since).total_seconds() / 3600
        count = len(self.endpoints)
        return (
            f"[Tidings] {self.total} dead letter{'s' * (self.total != 1)} on {count} "
            f"endpoint{'s' * (count != 1)} in the last {hours:g} h"
        )

    def to_text(self) -> str:
        lines = [
            f"Dead letters from {self.since.isoformat()} to {self.until.isoformat()}: "
            f"{self.total} on {len(self.endpoints)} endpoint(s)."
        ]
        if self.is_empty:
            lines.append("Nothing was dead-lettered.")
        for e in self.endpoints:
            s = e.stats
            lines += [
                "",
                f"Endpoint {s.endpoint_id} ({display_origin(s.url)}): "
                f"{s.dead_letters} dead letter(s), "
                f"{e.pattern.value.replace('_', ' ')}",
                f"  most common error: {s.top_error or 'none recorded'}; "
                f"most common status: {s.top_status_code or 'none'}",
                f"  first {s.first_at.isoformat()}, last {s.last_at.isoformat()}, "
                f"mean attempts {s.mean_attempts:.1f}",
                f"  action: {e.action}",
            ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "total": self.total,
            "endpoints": [e.to_dict() for e in self.endpoints],
        }


def build_report(
    cur: Cursor,
    window_s: float,
    now: datetime | None = None,
    *,
    rules: PatternRules | None = None,
) -> DeadLetterReport:
    """The report of the dead letters of the ``window_s`` seconds before ``now``."""
    if window_s <= 0:
        raise ValueError(f"the report window must be positive, got {window_s} s")
    until = now or datetime.now(UTC)
    if until.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    since = until - timedelta(seconds=window_s)
    chosen = rules or PatternRules()
    stats: Sequence[DeadLetterStats] = reports.dead_letter_stats(cur, since=since, now=until)
    return DeadLetterReport(
        since=since,
        until=until,
        endpoints=tuple(EndpointDeadLetters(s, classify(s, chosen)) for s in stats),
    )


# Machines find the structured report after this line of the message.
JSON_MARKER = "--- report (JSON) ---"


# An SNS message holds 256 KiB; the largest endpoints are listed, the count of the others given.
MAX_ENDPOINTS_PER_MESSAGE = 100


def report_message(report: DeadLetterReport) -> str:
    """The SNS message: the readable report, then the marker line and the report as JSON."""
    shown = DeadLetterReport(
        report.since, report.until, report.endpoints[:MAX_ENDPOINTS_PER_MESSAGE]
    )
    omitted = report.endpoints[MAX_ENDPOINTS_PER_MESSAGE:]
    text = shown.to_text()
    structured = shown.to_dict()
    structured["total"] = report.total
    if omitted:
        others = sum(e.stats.dead_letters for e in omitted)
        text += (
            f"\n\n...and {others} dead letter(s) on {len(omitted)} more endpoint(s), not listed."
        )
        structured["omitted_endpoints"] = len(omitted)
    return f"{text}\n\n{JSON_MARKER}\n{json.dumps(structured)}"


def publish_report(notifier: Notifier, report: DeadLetterReport) -> str | None:
    """Publish the report; returns the message id, or None when there was nothing to report."""
    if report.is_empty:
        return None
    return notifier.publish(
        report.subject(),
        report_message(report),
        {"kind": "dead_letter_report", "total": str(report.total)},
    )
