"""The health monitor's run (every 5 minutes), one job after the other:

1. ``failing_endpoints``: disable endpoints that have failed without a success for too long;
2. ``unreachable``: dead-letter what deleted and disabled endpoints still have queued;
3. ``health``: take the queue's summary (emitted as metrics by the handler);
4. ``alerts``: send the alerts that start and the resolutions of those that stopped;
5. ``expiring_certificates``: report client certificates about to expire as operational events.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from tidings.dal.connection import Database
from tidings.dal.health import ApplicationFigures
from tidings.maintenance import alerts
from tidings.maintenance.expiring_certificates import report_expiring_certificates
from tidings.maintenance.failing_endpoints import FailingEndpointSettings, disable_failing_endpoints
from tidings.maintenance.health import (
    HealthSettings,
    HealthSummary,
    health_summary,
    metered_applications,
)
from tidings.maintenance.unreachable import UnreachableSettings, dead_letter_unreachable
from tidings.notify import Notifier


class MonitorSettings(
    FailingEndpointSettings, UnreachableSettings, HealthSettings, alerts.AlertSettings, Protocol
):
    """What the health monitor's jobs read of the settings, together."""


@dataclass(frozen=True, slots=True)
class MonitorResult:
    summary: HealthSummary
    disabled_endpoint_ids: tuple[int, ...]
    # Undelivered messages of deleted or disabled endpoints turned into dead letters.
    unreachable_dead_lettered: int
    fired: tuple[str, ...]
    resolved: tuple[str, ...]
    # Notifications earlier runs could not publish, published by this run.
    caught_up: tuple[str, ...] = ()
    # The applications listed for per-application metrics, with their figures.
    applications: tuple[ApplicationFigures, ...] = ()
    # Client certificates within a notice period of their expiry (each reported once).
    expiring_certificates: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "summary": self.summary.to_dict(),
            "applications": [asdict(a) for a in self.applications],
            "disabled_endpoint_ids": list(self.disabled_endpoint_ids),
            "unreachable_dead_lettered": self.unreachable_dead_lettered,
            "fired": list(self.fired),
            "resolved": list(self.resolved),
            "caught_up": list(self.caught_up),
            "expiring_certificates": self.expiring_certificates,
        }


def run_monitor(
    db: Database, notifier: Notifier, settings: MonitorSettings, now: datetime | None = None
) -> MonitorResult:
    """One monitor run at ``now`` (default: the current time)."""
    moment = now or datetime.now(UTC)
    disabled = disable_failing_endpoints(db, settings, moment)
    unreachable = dead_letter_unreachable(db, settings)
    summary = db.run(lambda cur: health_summary(cur, settings, moment))
    metered = db.run(lambda cur: metered_applications(cur, settings, moment))
    dispatched = alerts.check_and_send(db, notifier, settings, summary, moment)
    expiring = report_expiring_certificates(db, moment)
    return MonitorResult(
        summary=summary,
        disabled_endpoint_ids=tuple(e.endpoint_id for e in disabled),
        unreachable_dead_lettered=unreachable,
        fired=dispatched.fired,
        resolved=dispatched.resolved,
        caught_up=dispatched.caught_up,
        applications=tuple(metered),
        expiring_certificates=expiring,
    )
