"""Endpoints that fail for days are disabled: the health monitor's first job.

Each run marks when every endpoint's current run of failures began (and clears the mark of those
that succeeded since), then disables the enabled endpoints that have failed without a single
success for ``disable_after_failing_s`` (5 days by default). Disabling stops deliveries at once;
an alert says so.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from tidings.dal import health as dal
from tidings.dal.connection import Database
from tidings.dal.health import DisabledEndpoint
from tidings.observability import logger


class FailingEndpointSettings(Protocol):
    @property
    def disable_after_failing_s(self) -> float: ...


def disable_failing_endpoints(
    db: Database, settings: FailingEndpointSettings, now: datetime
) -> list[DisabledEndpoint]:
    """Track failing streaks, disable the endpoints failing too long; returns those disabled."""
    days = settings.disable_after_failing_s / 86400

    db.run(dal.track_failing_streaks)
    disabled = db.run(
        lambda cur: dal.disable_failing_endpoints(
            cur,
            now=now,
            failing_before=now - timedelta(seconds=settings.disable_after_failing_s),
            reason=f"failing without a single success for {days:g} days",
        )
    )
    for endpoint in disabled:
        logger.warning(
            "endpoint disabled after failing too long",
            extra={"endpoint_id": endpoint.endpoint_id, "failing_since": endpoint.failing_since},
        )
    return disabled
