"""Recording events: one or many, through the SQL functions that producers call too."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidings.dal.connection import Cursor
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class NewEvent:
    event_type: str
    # The payload's JSON text, exactly as it will be stored.
    payload_json: str
    event_id: str | None = None
    endpoint_ids: Sequence[int] | None = None
    # The event's channels (None: none); only tidings.enqueue_batch takes them.
    channels: Sequence[str] | None = None
    # Its ordering key (FIFO endpoints keep order per key); only tidings.enqueue_batch takes it.
    ordering_key: str | None = None


@dataclass(frozen=True, slots=True)
class Enqueued:
    # None when the key was taken as the call began but its event was pruned (its idempotency
    # window over) before the call could read it: the call should be made again.
    event_ref: int | None
    created: bool
    message_ids: tuple[int, ...]


def enqueue_event(cur: Cursor, event: NewEvent, *, application: str | None = None) -> Enqueued:
    """Record one event (``tidings.enqueue_event``, or ``enqueue_batch`` for an event with
    channels or an ordering key) for the application of this uid ('default' when None); a
    repeated key creates nothing."""
    if event.channels or event.ordering_key is not None:
        return enqueue_batch(cur, [event], application=application)[0]
    cur.execute(
        sql("enqueue_event"),
        {
            "event_type": event.event_type,
            "payload": event.payload_json,
            "event_id": event.event_id,
            "endpoint_ids": None if event.endpoint_ids is None else list(event.endpoint_ids),
            "application": application,
        },
    )
    row = cur.fetchone()
    if row is None:
        raise RuntimeError("tidings.enqueue_event returned no row")
    return _enqueued(row[0], row[1], row[2])


def enqueue_batch(
    cur: Cursor, events: Sequence[NewEvent], *, application: str | None = None
) -> list[Enqueued]:
    """Record many events for the application of this uid ('default' when None) in one
    statement (``tidings.enqueue_batch``), in input order."""
    if not events:
        return []
    cur.execute(sql("enqueue_batch"), {"events": _batch_json(events), "application": application})
    rows = cur.fetchall()
    if len(rows) != len(events):
        raise RuntimeError(f"tidings.enqueue_batch returned {len(rows)} rows for {len(events)}")
    return [_enqueued(r[1], r[2], r[3]) for r in rows]


def _enqueued(event_ref: Any, created: Any, message_ids: Any) -> Enqueued:
    return Enqueued(
        None if event_ref is None else int(event_ref),
        bool(created),
        tuple(int(i) for i in message_ids),
    )


def _batch_json(events: Sequence[NewEvent]) -> str:
    # The payloads are already JSON text; splice them in rather than parse and dump them again.
    parts = []
    for event in events:
        head: dict[str, Any] = {"event_type": event.event_type}
        if event.event_id is not None:
            head["event_id"] = event.event_id
        if event.endpoint_ids is not None:
            head["endpoint_ids"] = list(event.endpoint_ids)
        if event.channels:
            head["channels"] = list(event.channels)
        if event.ordering_key is not None:
            head["ordering_key"] = event.ordering_key
        parts.append(json.dumps(head)[:-1] + ',"payload":' + event.payload_json + "}")
    return "[" + ",".join(parts) + "]"
