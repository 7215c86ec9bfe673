"""The queue's health at a glance: the summary the health monitor emits as metrics and that
``tidings status`` shows."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit

from tidings.dal import health as dal
from tidings.dal.connection import Cursor
from tidings.dal.health import ApplicationFigures
from tidings.observability import NAMESPACE, SERVICE, metrics

# The most applications metrics carry as a dimension (each application and metric is a
# CloudWatch metric of its own, billed monthly: the list is the operator's, and bounded).
MAX_METRICS_APPLICATIONS = 20


class HealthSettings(Protocol):
    """What the health summary reads of the settings."""

    @property
    def health_recent_s(self) -> float: ...
    @property
    def metrics_applications(self) -> tuple[str, ...]: ...


@dataclass(frozen=True, slots=True)
class HealthSummary(dal.QueueFigures):
    """The queue's figures at ``checked_at``; "recent" means the last ``recent_s`` seconds."""

    checked_at: datetime
    recent_s: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the moment as ISO 8601, every figure as is (None when unknown)."""
        values = asdict(self)
        values["checked_at"] = self.checked_at.isoformat()
        return values


def health_summary(
    cur: Cursor, settings: HealthSettings, now: datetime | None = None, app_id: int | None = None
) -> HealthSummary:
    """The health summary at ``now`` (default: the current time), of one application or (None)
    of the whole queue."""
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    figures = dal.queue_figures(
        cur,
        now=moment,
        since=moment - timedelta(seconds=settings.health_recent_s),
        app_id=app_id,
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


def metered_applications(
    cur: Cursor, settings: HealthSettings, now: datetime
) -> list[ApplicationFigures]:
    """The figures of the applications the operator listed for per-application metrics
    (``TIDINGS_METRICS_APPLICATIONS``), each of them, with or without work."""
    wanted = settings.metrics_applications[:MAX_METRICS_APPLICATIONS]
    if not wanted:
        return []
    found = {f.app_uid: f for f in dal.application_figures(cur, now=now, uids=wanted)}
    return [found.get(uid) or ApplicationFigures(uid, 0, 0, 0, 0, None) for uid in wanted]


_APPLICATION_COUNTS = (
    ("Pending", "pending"),
    ("AwaitingRetry", "awaiting_retry"),
    ("InFlight", "in_flight"),
    ("DeadLetters", "dead_letters"),
)


def emit_application_metrics(figures: list[ApplicationFigures]) -> None:
    """The listed applications' figures as metrics with an ``Application`` dimension, one EMF
    record per application, written at once (the whole-queue metrics carry no such
    dimension)."""
    for f in figures:
        record = EphemeralMetrics(service=SERVICE, namespace=NAMESPACE)
        record.add_dimension(name="Application", value=f.app_uid)
        for name, attribute in _APPLICATION_COUNTS:
            record.add_metric(name=name, unit=MetricUnit.Count, value=getattr(f, attribute))
        record.add_metric(
            name="OldestUndeliveredAge",
            unit=MetricUnit.Seconds,
            value=f.oldest_undelivered_age_s or 0.0,
        )
        record.flush_metrics()
