"""The operator tools' own reads and writes: the demo's bulk events and the per-endpoint progress
that ``tidings demo`` and ``tidings status`` draw (see ``queries/operator.sql``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class DemoEvent:
    event_type: str
    event_id: str
    payload: Any


def enqueue_events(cur: Cursor, events: Sequence[DemoEvent]) -> int:
    """Record events through ``tidings.enqueue``; the number of messages created."""
    if not events:
        return 0
    cur.execute(
        sql("enqueue_events"),
        {
            "event_types": [e.event_type for e in events],
            "payloads": [json.dumps(e.payload) for e in events],
            "event_ids": [e.event_id for e in events],
        },
    )
    row = cur.fetchone()
    return int(row[0]) if row else 0


@dataclass(frozen=True, slots=True)
class EndpointProgress:
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
    attempts: int
    p95_ms: float | None
    # The uid of the endpoint's application.
    app_uid: str = "default"
    # Its speed lane ("fast", or "slow" while it is slow or has never answered), when a slow
    # answer's hold ends, its own cap on its rows in flight and the cap in force (the slow lane's
    # or the untried one's, its own when lower, else its own; None: none, or the lane's was not
    # asked for).
    lane: str = "fast"
    slow_until: datetime | None = None
    max_in_flight: int | None = None
    in_flight_limit: int | None = None

    @property
    def settled(self) -> int:
        """Messages that reached an end state, or wait for a disabled endpoint to return."""
        held = 0 if self.enabled else self.pending + self.retrying
        return self.delivered + self.dead_letter + held


def endpoint_progress(
    cur: Cursor,
    since: datetime,
    app_id: int | None = None,
    *,
    slow_lane_max_in_flight: int | None = None,
    untried_max_in_flight: int | None = None,
) -> list[EndpointProgress]:
    """Every endpoint's figures (of one application, or all); latency from attempts made since
    ``since``; the caps the claim puts on slow and untried endpoints are the ones given."""
    cur.execute(
        sql("endpoint_progress"),
        {
            "since": since,
            "app_id": app_id,
            "slow_lane_max_in_flight": slow_lane_max_in_flight,
            "untried_max_in_flight": untried_max_in_flight,
        },
    )
    return [
        EndpointProgress(
            endpoint_id=row["id"],
            url=row["url"],
            description=row["description"],
            enabled=row["enabled"],
            circuit=row["circuit"],
            total=row["total"],
            pending=row["pending"],
            in_flight=row["in_flight"],
            retrying=row["retrying"],
            delivered=row["delivered"],
            dead_letter=row["dead_letter"],
            attempts=row["attempts"],
            p95_ms=None if row["p95_ms"] is None else float(row["p95_ms"]),
            app_uid=row["app_uid"],
            lane="slow" if row["slow_lane"] else "fast",
            slow_until=row["slow_until"],
            max_in_flight=row["max_in_flight"],
            in_flight_limit=row["in_flight_limit"],
        )
        for row in fetch_dicts(cur)
    ]


def unsettled_messages(cur: Cursor) -> int:
    """Messages still to be delivered or dead-lettered (endpoints that are disabled excepted)."""
    cur.execute(sql("unsettled_messages"))
    row = cur.fetchone()
    return int(row[0]) if row else 0
