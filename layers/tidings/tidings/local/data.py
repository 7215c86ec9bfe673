"""The local tools' own reads and writes: bulk events for the demo, replay selection."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidings.dal.connection import Cursor
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


def dead_letter_ids(
    cur: Cursor,
    *,
    endpoint_id: int | None = None,
    since: datetime | None = None,
    ids: Sequence[int] | None = None,
) -> list[int]:
    """Ids of the dead letters matching every given filter, in id order."""
    cur.execute(
        sql("dead_letter_ids"),
        {"endpoint_id": endpoint_id, "since": since, "ids": list(ids) if ids is not None else None},
    )
    return [int(row[0]) for row in cur.fetchall()]
