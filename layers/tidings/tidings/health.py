"""The queue's health: a summary (for metrics and ``tidings status``) and the monitor run that
disables endpoints failing for too long and sends the alerts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from tidings import alerts
from tidings.config import Settings
from tidings.dal import maintenance, reports
from tidings.dal.connection import Cursor, Database
from tidings.notify import Notifier
from tidings.observability import logger, metrics


@dataclass(frozen=True, slots=True)
class HealthSummary(reports.QueueFigures):
    """The queue's figures at ``checked_at``; "recent" means the last ``recent_s`` seconds."""

    checked_at: datetime
    recent_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the moment as ISO 8601, every figure as is (None when unknown)."""
        values = asdict(self)
        values["checked_at"] = self.checked_at.isoformat()
        return values


def health_summary(cur: Cursor, settings: Settings, now: datetime | None = None) -> HealthSummary:
    """The health summary at ``now`` (default: the current time)."""
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    figures = reports.queue_figures(
        cur, now=moment, since=moment - timedelta(seconds=settings.health_recent_s)
    )
    return HealthSummary(checked_at=moment, recent_s=settings.health_recent_s, **asdict(figures))


_COUNTS = (
    ("Pending", "pending"),
    ("AwaitingRetry", "awaiting_retry"),
    ("InFlight", "in_flight"),
    ("DeadLetters", "dead_letters"),
    ("DeliveredRecently", "delivered_recently"),
    ("FailedAttemptsRecently", "failed_attempts_recently"),
    ("DeadLetteredRecently", "dead_lettered_recently"),
    ("OpenCircuits", "open_circuits"),
    ("DisabledEndpoints", "disabled_endpoints"),
)


def emit_metrics(summary: HealthSummary) -> None:
    """Add the summary to this invocation's metrics (flushed as EMF by ``log_metrics``)."""
    for name, attribute in _COUNTS:
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=getattr(summary, attribute))
    # An empty queue has no oldest message: its age is 0, which is what a dashboard should show.
    metrics.add_metric(
        name="OldestUndeliveredAge",
        unit=MetricUnit.Seconds,
        value=summary.oldest_undelivered_age_s or 0.0,
    )
    if summary.delivery_mean_ms is not None:
        metrics.add_metric(
            name="DeliveryLatencyMean", unit=MetricUnit.Milliseconds, value=summary.delivery_mean_ms
        )
    if summary.delivery_p95_ms is not None:
        metrics.add_metric(
            name="DeliveryLatencyP95", unit=MetricUnit.Milliseconds, value=summary.delivery_p95_ms
        )


@dataclass(frozen=True, slots=True)
class MonitorResult:
    summary: HealthSummary
    disabled_endpoint_ids: tuple[int, ...]
    # Undelivered messages of deleted or disabled endpoints turned into dead letters.
    unreachable_dead_lettered: int
    fired: tuple[str, ...]
    resolved: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            "disabled_endpoint_ids": list(self.disabled_endpoint_ids),
            "unreachable_dead_lettered": self.unreachable_dead_lettered,
            "fired": list(self.fired),
            "resolved": list(self.resolved),
        }


def run_monitor(
    db: Database, notifier: Notifier, settings: Settings, now: datetime | None = None
) -> MonitorResult:
    """One monitor run: disable endpoints that have failed without a success for too long,
    dead-letter what deleted and disabled endpoints still have queued, take the summary, and send
    the alerts that start and the resolutions of those that stopped."""
    moment = now or datetime.now(UTC)
    with db.cursor() as cur:
        maintenance.track_failing_streaks(cur)
        days = settings.disable_after_failing_s / 86400
        disabled = maintenance.disable_failing_endpoints(
            cur,
            now=moment,
            failing_before=moment - timedelta(seconds=settings.disable_after_failing_s),
            reason=f"failing without a single success for {days:g} days",
        )
        for endpoint in disabled:
            logger.warning(
                "endpoint disabled after failing too long",
                extra={
                    "endpoint_id": endpoint.endpoint_id,
                    "failing_since": endpoint.failing_since,
                },
            )
        unreachable = 0
        for _ in range(settings.prune_max_batches):
            done = maintenance.dead_letter_unreachable_messages(
                cur, batch_size=settings.prune_batch_size
            )
            unreachable += done
            if done < settings.prune_batch_size:
                break
        summary = health_summary(cur, settings, moment)
        checkpoint = reports.monitor_checkpoint(cur)
        # A row's dead_lettered_at is when its recording statement began; the statement may
        # commit up to a statement timeout later, after the previous run had looked. Looking
        # back that much further never misses one (at worst it counts one twice, and the alert
        # resolves a run later).
        new_dead_letters = (
            None
            if checkpoint is None
            else reports.count_dead_lettered_between(
                cur,
                since=checkpoint - timedelta(milliseconds=settings.statement_timeout_ms),
                now=moment,
            )
        )
        attention = reports.endpoints_needing_attention(
            cur,
            slow_p95_ms=settings.slow_endpoint_p95_ms,
            min_samples=settings.slow_endpoint_min_samples,
        )
        firing = reports.firing_alerts(cur)
    conditions = alerts.current_conditions(
        oldest_undelivered_age_s=summary.oldest_undelivered_age_s,
        new_dead_letters=new_dead_letters,
        dead_letters=summary.dead_letters,
        endpoints=attention,
        settings=settings,
    )
    dispatched = alerts.dispatch(
        db.cursor, notifier, alerts.plan_alerts(conditions, firing), moment
    )
    # Only after the alerts went out: a run that failed to send re-counts the same dead letters.
    with db.cursor() as cur:
        reports.save_monitor_checkpoint(cur, moment)
    return MonitorResult(
        summary=summary,
        disabled_endpoint_ids=tuple(e.endpoint_id for e in disabled),
        unreachable_dead_lettered=unreachable,
        fired=dispatched.fired,
        resolved=dispatched.resolved,
    )
