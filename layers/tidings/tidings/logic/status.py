"""What operators read of the queue, of every application or of one: its status (the health
summary, each application's part, every endpoint's figures) and the dead-letter report of a
window (per endpoint, its pattern and the action to take; it marks nothing reported).

``tidings status`` and ``tidings dead-letters`` show these, from the database or through the
API's routes, which answer with the same models: both modes print the same document.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timedelta
from typing import Protocol

from pydantic import BaseModel, Field

from tidings.config import Settings
from tidings.dal.connection import Cursor, Database
from tidings.dal.health import application_figures
from tidings.dal.operator import endpoint_progress
from tidings.logic.errors import InvalidInput
from tidings.maintenance import dead_letter_report as reports
from tidings.maintenance.health import health_summary

# The longest window a dead-letter report reads: finished messages are pruned long before.
MAX_REPORT_WINDOW_S = 90 * 86_400


class Scoped(Protocol):
    """An application, as far as these views need one."""

    @property
    def id(self) -> int: ...
    @property
    def uid(self) -> str: ...


class QueueSummary(BaseModel):
    """The queue's figures at ``checked_at``; "recently" means the last ``recent_s`` seconds."""

    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letters: int
    delivered_recently: int
    failed_attempts_recently: int
    dead_lettered_recently: int
    oldest_undelivered_age_s: float | None
    oldest_undelivered_application: str | None = Field(
        description="The uid of the application of the oldest undelivered message"
    )
    delivery_mean_ms: float | None = Field(description="Created to delivered, recently")
    delivery_p95_ms: float | None
    open_circuits: int
    disabled_endpoints: int
    checked_at: datetime
    recent_s: float


class ApplicationQueue(BaseModel):
    """One application's part of the queue (only applications with work or dead letters)."""

    app_uid: str
    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letters: int
    oldest_undelivered_age_s: float | None


class EndpointFigures(BaseModel):
    """One endpoint's messages by status, its circuit, its lane, and its recent attempts."""

    endpoint_id: int
    url: str
    description: str
    enabled: bool
    circuit: str
    total: int
    pending: int
    in_flight: int
    retrying: int
    delivered: int
    dead_letter: int
    attempts: int = Field(description="Attempts made recently")
    p95_ms: float | None = Field(description="The p95 latency of the recent attempts")
    app_uid: str
    lane: str = Field(description="fast, or slow while it answers slowly or has never answered")
    slow_until: datetime | None = Field(
        description="When a slow answer's hold ends at the latest (quick answers may end it sooner)"
    )
    max_in_flight: int | None = Field(description="Its own cap on deliveries in flight")
    in_flight_limit: int | None = Field(description="The cap in force, its own or the lane's")


class StatusReport(BaseModel):
    application: str | None = Field(
        description="The application the figures are of (null: every application)"
    )
    summary: QueueSummary
    applications: list[ApplicationQueue]
    endpoints: list[EndpointFigures]


class DeadLetterEndpoint(BaseModel):
    endpoint_id: int
    application: str = Field(description="The endpoint's application's uid")
    url: str = Field(description="The endpoint's origin (scheme, host and port)")
    dead_letters: int
    top_error: str | None = Field(description="The most common error")
    top_status_code: int | None = Field(description="The most common status code")
    first_at: datetime
    last_at: datetime
    mean_attempts: float
    pattern: reports.Pattern
    action: str = Field(description="What to do about it")


class DeadLetterReport(BaseModel):
    """The dead letters of (since, until], per endpoint, largest first."""

    since: datetime
    until: datetime
    total: int
    endpoints: list[DeadLetterEndpoint]


def status_report(db: Database, settings: Settings, app: Scoped | None = None) -> StatusReport:
    """The status of the whole queue, or (``app``) of one application's part of it."""

    def read(cur: Cursor) -> StatusReport:
        app_id = None if app is None else app.id
        summary = health_summary(cur, settings, app_id=app_id)
        since = summary.checked_at - timedelta(seconds=summary.recent_s)
        apps = application_figures(
            cur, now=summary.checked_at, uids=None if app is None else [app.uid]
        )
        endpoints = endpoint_progress(
            cur,
            since,
            app_id,
            slow_lane_max_in_flight=settings.slow_lane_max_in_flight,
            untried_max_in_flight=settings.untried_max_in_flight,
        )
        return StatusReport(
            application=None if app is None else app.uid,
            summary=QueueSummary(**asdict(summary)),
            applications=[ApplicationQueue(**asdict(a)) for a in apps],
            endpoints=[EndpointFigures(**asdict(e)) for e in endpoints],
        )

    return db.run(read)


def dead_letter_report(
    db: Database, settings: Settings, window_s: float | None = None, app: Scoped | None = None
) -> DeadLetterReport:
    """The dead letters of the last ``window_s`` seconds (default: the scheduled report's
    window), reported or not, of every application or of ``app``."""
    window = settings.dead_letter_report_window_s if window_s is None else window_s
    if not 0 < window <= MAX_REPORT_WINDOW_S:
        raise InvalidInput(
            "invalid_value",
            f"the window is more than 0 s and at most {MAX_REPORT_WINDOW_S} s (90 days)",
            "window_s",
        )
    rules = reports.PatternRules.from_settings(settings)
    app_id = None if app is None else app.id
    built = db.run(lambda cur: reports.build_report(cur, window, rules=rules, app_id=app_id))
    return DeadLetterReport.model_validate(built.to_dict())
