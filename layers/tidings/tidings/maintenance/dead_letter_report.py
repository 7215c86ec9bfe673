"""The dead-letter report: per endpoint, the dead letters, the pattern they match and what to
do about it.

Two ways to build it:
- ``run_report`` (the scheduled job) reports every dead letter once: in one transaction it claims
  the dead letters no report has named yet (marking them reported), publishes the report, and
  commits only after the publish succeeded. What is reported does not depend on when the runs
  happen or when the transactions that made the dead letters committed: a late or failed run
  leaves the dead letters for the next one. A failed publish rolls the claim back (at least once);
  a publish whose commit then fails is reported again by the next run (a duplicate, never a gap).
- ``build_report`` (the operator's view, ``tidings dead-letters``) reads the dead letters of a
  time window and marks nothing.

Patterns, checked in this order (``share`` of an endpoint's dead letters, default one half):
- endpoint disabled: the most common error says the endpoint was disabled or deleted, or the
  most common status is 410 Gone (which disables it);
- endpoint misconfigured: the most common error is a request that could not be made at all
  (invalid URL, blocked address, a secret that cannot sign);
- credentials changed: that share or more were refused with 401/403;
- rate limited: that share or more were refused with 429;
- outage cluster: at least ``outage_min_count`` dead letters within ``outage_span_s``;
- slow accumulation: anything else, a few spread over time.
They look only at an endpoint's own dead letters in the report (counts and the span from its
first to its last), never at the window's or the run's length, so they mean the same in a view
of any window and in a scheduled report that catches up on a backlog.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from tidings.dal import dead_letters as dal
from tidings.dal.applications import DEFAULT_APP_UID
from tidings.dal.connection import Cursor, Database
from tidings.dal.dead_letters import DeadLetterStats
from tidings.delivery.ssrf import display_origin
from tidings.notify import Notifier
from tidings.observability import logger


class DeadLetterReportSettings(Protocol):
    """What the dead-letter report reads of the settings."""

    @property
    def dead_letter_outage_min_count(self) -> int: ...
    @property
    def dead_letter_outage_span_s(self) -> float: ...
    @property
    def dead_letter_pattern_share(self) -> float: ...
    @property
    def dead_letter_report_max_rows(self) -> int: ...


class Pattern(enum.StrEnum):
    ENDPOINT_DISABLED = "endpoint_disabled"
    ENDPOINT_MISCONFIGURED = "endpoint_misconfigured"
    CREDENTIALS_CHANGED = "credentials_changed"
    RATE_LIMITED = "rate_limited"
    REDIRECTED = "redirected"
    OUTAGE_CLUSTER = "outage_cluster"
    SLOW_ACCUMULATION = "slow_accumulation"


# The reasons the health monitor writes when it dead-letters what a disabled or deleted
# endpoint still had queued (dal/queries/health.sql, dead_letter_unreachable_messages).
UNREACHABLE_REASONS = ("endpoint disabled", "endpoint deleted")
# Requests that could not be made at all (tidings.delivery.retry_policy.AttemptError values): the
# endpoint's own settings must change before any delivery can succeed.
MISCONFIGURED_ERRORS = ("invalid_url", "blocked_address", "signing_failed")

ACTIONS = {
    Pattern.ENDPOINT_DISABLED: (
        "The endpoint was disabled or deleted (the reason is in the top error) and its queued "
        "messages became dead letters. If the receiver is back, enable the endpoint again and "
        "replay them; if it is gone for good, there is nothing to do."
    ),
    Pattern.ENDPOINT_MISCONFIGURED: (
        "Nothing could be sent: the endpoint's URL is invalid or resolves to an address that is "
        "not allowed (invalid_url, blocked_address), or its stored signing secret cannot sign "
        "(signing_failed: rotate the secret and give the new one to the receiver's owner). Fix "
        "the endpoint, then replay the dead letters."
    ),
    Pattern.CREDENTIALS_CHANGED: (
        "The receiver refuses our requests (401/403): its credentials or signature verification "
        "changed. Check the endpoint's signing secret with its owner, then replay the dead letters."
    ),
    Pattern.RATE_LIMITED: (
        "The receiver rate-limits us (429): lower the endpoint's rate limit (rate_limit_per_s) "
        "below what it accepts, then replay the dead letters."
    ),
    Pattern.REDIRECTED: (
        "The receiver answers with a redirect (3xx), which is never followed: its URL moved, or "
        "something in front of it redirects (to HTTPS, to a login page). Update the endpoint's "
        "URL to where the receiver really is, then replay the dead letters."
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
    def from_settings(cls, settings: DeadLetterReportSettings) -> PatternRules:
        return cls(
            outage_min_count=settings.dead_letter_outage_min_count,
            outage_span_s=settings.dead_letter_outage_span_s,
            share=settings.dead_letter_pattern_share,
        )


def classify(stats: DeadLetterStats, rules: PatternRules) -> Pattern:
    """The pattern an endpoint's dead letters match."""
    named = _named_by_top_answer(stats)
    if named is not None:
        return named
    if stats.auth_refusals >= rules.share * stats.dead_letters:
        return Pattern.CREDENTIALS_CHANGED
    if stats.rate_limited >= rules.share * stats.dead_letters:
        return Pattern.RATE_LIMITED
    span_s = (stats.last_at - stats.first_at).total_seconds()
    if stats.dead_letters >= rules.outage_min_count and span_s <= rules.outage_span_s:
        return Pattern.OUTAGE_CLUSTER
    return Pattern.SLOW_ACCUMULATION


def _named_by_top_answer(stats: DeadLetterStats) -> Pattern | None:
    """The pattern the most common error or status names by itself, if it does."""
    top_error = stats.top_error or ""
    # 410 Gone disables the endpoint as it dead-letters the message.
    if top_error.startswith(UNREACHABLE_REASONS) or stats.top_status_code == 410:
        return Pattern.ENDPOINT_DISABLED
    if top_error in MISCONFIGURED_ERRORS:
        return Pattern.ENDPOINT_MISCONFIGURED
    if stats.top_status_code is not None and 300 <= stats.top_status_code <= 399:
        return Pattern.REDIRECTED
    return None


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
            "application": s.app_uid,
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
    """Dead letters per endpoint, largest first.

    In the operator's view, those of the window (``since``, ``until``]. In the scheduled report,
    those it claimed, ``since`` and ``until`` being the earliest and latest time one of them was
    dead-lettered, and ``waiting`` the dead letters left unreported for the next report (None
    in the view, which does not report anything).
    """

    since: datetime
    until: datetime
    endpoints: tuple[EndpointDeadLetters, ...]
    waiting: int | None = None

    @property
    def total(self) -> int:
        return sum(e.stats.dead_letters for e in self.endpoints)

    @property
    def is_empty(self) -> bool:
        return not self.endpoints

    def subject(self) -> str:
        count = len(self.endpoints)
        since = self.since.astimezone(UTC).strftime("%Y-%m-%d %H:%M")
        return (
            f"[Tidings] {self.total} dead letter{'s' * (self.total != 1)} on {count} "
            f"endpoint{'s' * (count != 1)} since {since} UTC"
        )

    def to_text(self) -> str:
        lines = [
            f"Dead letters from {self.since.isoformat()} to {self.until.isoformat()}: "
            f"{self.total} on {len(self.endpoints)} endpoint(s)."
        ]
        if self.waiting:
            lines.append(f"{self.waiting} more dead letter(s) wait for the next report.")
        if self.is_empty:
            lines.append("Nothing was dead-lettered.")
        for e in self.endpoints:
            s = e.stats
            lines += [
                "",
                f"Endpoint {s.endpoint_id}{_of_application(s.app_uid)} "
                f"({display_origin(s.url)}): {s.dead_letters} dead letter(s), "
                f"{e.pattern.value.replace('_', ' ')}",
                f"  most common error: {s.top_error or 'none recorded'}; "
                f"most common status: {s.top_status_code or 'none'}",
                f"  first {s.first_at.isoformat()}, last {s.last_at.isoformat()}, "
                f"mean attempts {s.mean_attempts:.1f}",
                f"  action: {e.action}",
            ]
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "since": self.since.isoformat(),
            "until": self.until.isoformat(),
            "total": self.total,
            "endpoints": [e.to_dict() for e in self.endpoints],
        }
        if self.waiting is not None:
            data["waiting"] = self.waiting
        return data


def _of_application(uid: str) -> str:
    # Named beside the endpoint unless it is the default application (the JSON always has it).
    return "" if uid == DEFAULT_APP_UID else f" of application {uid}"


def build_report(
    cur: Cursor,
    window_s: float,
    now: datetime | None = None,
    *,
    rules: PatternRules | None = None,
    app_id: int | None = None,
) -> DeadLetterReport:
    """The operator's view: the dead letters of the ``window_s`` seconds before ``now``, whether
    reported or not, of one application or (None) of all. Reads only; marks nothing reported."""
    if window_s <= 0:
        raise ValueError(f"the report window must be positive, got {window_s} s")
    until = now or datetime.now(UTC)
    if until.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    since = until - timedelta(seconds=window_s)
    chosen = rules or PatternRules()
    stats: Sequence[DeadLetterStats] = dal.dead_letter_stats(
        cur, since=since, now=until, app_id=app_id
    )
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
    shown = dataclasses.replace(report, endpoints=report.endpoints[:MAX_ENDPOINTS_PER_MESSAGE])
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


def claimed_report(
    stats: Sequence[DeadLetterStats], *, rules: PatternRules, waiting: int, now: datetime
) -> DeadLetterReport:
    """The scheduled report of the claimed dead letters: from the earliest to the latest time one
    of them was dead-lettered (``now`` to ``now`` when nothing was claimed)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if waiting < 0:
        raise ValueError(f"waiting must be >= 0, got {waiting}")
    return DeadLetterReport(
        since=min((s.first_at for s in stats), default=now),
        until=max((s.last_at for s in stats), default=now),
        endpoints=tuple(EndpointDeadLetters(s, classify(s, rules)) for s in stats),
        waiting=waiting,
    )


def claim_report(
    cur: Cursor, *, max_rows: int, rules: PatternRules, now: datetime | None = None
) -> DeadLetterReport:
    """Claim up to ``max_rows`` unreported dead letters (oldest first) and build their report.
    The claim holds only if the caller's transaction commits."""
    if max_rows < 1:
        raise ValueError(f"max_rows must be positive, got {max_rows}")
    stats = dal.claim_dead_letters_for_report(cur, max_rows=max_rows)
    # Only a full claim can have left dead letters behind. (Those a concurrent run holds, or
    # committed since the claim, are not "waiting" in that sense: they are being reported, or
    # simply belong to the next report.)
    full = sum(s.dead_letters for s in stats) >= max_rows
    waiting = dal.count_unreported_dead_letters(cur) if full else 0
    return claimed_report(stats, rules=rules, waiting=waiting, now=now or datetime.now(UTC))


@dataclass(frozen=True, slots=True)
class ReportRun:
    report: DeadLetterReport
    # None when nothing was unreported, so nothing was sent.
    message_id: str | None


def run_report(db: Database, notifier: Notifier, settings: DeadLetterReportSettings) -> ReportRun:
    """The scheduled run: claim, publish, then commit, in one transaction.

    The publish is the last step before the commit, so a claim is committed only once its report
    is out, and a failed publish rolls it back. ``Database.run`` repeats the whole transaction
    after a deadlock, a serialization failure or a connection lost before the commit; what a
    rolled-back attempt had claimed is unreported again, for the repeat or a later run, so a
    repeat can send a report twice but never drops a dead letter. A connection lost during the
    commit is not repeated: the error surfaces, and if the commit did not happen the next run
    reports the same dead letters again. Either way a dead letter is reported at least once.
    (The publish must end within the idle-in-transaction timeout, or the server ends the
    session and the commit fails: a duplicate, not a gap.)
    """
    rules = PatternRules.from_settings(settings)
    sent: list[str] = []

    def claim_and_publish(cur: Cursor) -> ReportRun:
        if sent:
            logger.warning(
                "dead-letter report: repeating a transaction whose report was published; "
                "its dead letters are reported twice",
                extra={"published": sent},
            )
        report = claim_report(cur, max_rows=settings.dead_letter_report_max_rows, rules=rules)
        message_id = publish_report(notifier, report)
        if message_id is not None:
            sent.append(message_id)
        return ReportRun(report, message_id)

    return db.run(claim_and_publish, transaction=True)
