"""Ordered delivery: what a FIFO endpoint's batch request is, and which lines move on.

A FIFO endpoint gets the messages of each line (one per ordering key) one request at a time, in
order; the database decides which message heads each line (``tidings.advance_lines_v1``). An
endpoint whose ``fifo_batch_size`` is above 1 takes a line's head and up to that many of the
messages behind it in one request, whose body is a JSON array, oldest first, of

    {"id": "msg_<message id>", "type": "<event type>", "timestamp": "<accepted at>",
     "ordering_key": "<key>" | null, "data": <payload>}

(each element the Standard Webhooks envelope with its message's ``webhook-id`` and ordering key),
signed once, under a ``webhook-id`` of the batch: ``batch_<first message id>_<last message id>``.
The messages a head carries are fixed at its first attempt, so a retried batch is the same batch
with the same id. One answer settles every message of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from tidings.dal.delivery import Line, MessageStatus
from tidings.delivery.request_body import envelope_timestamp

# The statuses that end a head's time at the front of its line.
SETTLED = frozenset({MessageStatus.DELIVERED, MessageStatus.DEAD_LETTER})


@dataclass(frozen=True, slots=True)
class BatchElement:
    """One message of a batch request."""

    message_id: int
    event_type: str
    accepted_at: datetime
    ordering_key: str | None
    payload: str


def batch_body(elements: Sequence[BatchElement]) -> bytes:
    """The body of a batch request: its messages' envelopes, in line order. Each payload's JSON
    text is spliced in as stored (it is valid JSON already), never parsed again."""
    if not elements:
        raise ValueError("a batch carries one message at least")
    return (
        "["
        + ",".join(
            f'{{"id":{json.dumps(f"msg_{e.message_id}")},'
            f'"type":{json.dumps(e.event_type)},'
            f'"timestamp":"{envelope_timestamp(e.accepted_at)}",'
            f'"ordering_key":{json.dumps(e.ordering_key)},'
            f'"data":{e.payload}}}'
            for e in elements
        )
        + "]"
    ).encode()


def batch_webhook_id(message_ids: Sequence[int]) -> str:
    """The ``webhook-id`` of a batch: the same for every attempt of the same messages."""
    if not message_ids:
        raise ValueError("a batch carries one message at least")
    return f"batch_{message_ids[0]}_{message_ids[-1]}"


def batch_event_type(event_types: Iterable[str]) -> str | None:
    """The event type a batch names in ``webhook-event-type``: the one its messages share, or
    None (no header) when they are of several."""
    types = set(event_types)
    return types.pop() if len(types) == 1 else None


@dataclass(frozen=True, slots=True)
class SettledHead:
    """A recorded outcome of a message, as far as its line cares."""

    endpoint_id: int
    line_key: str | None
    status: MessageStatus


def lines_to_move(settled: Iterable[SettledHead]) -> list[Line]:
    """The lines whose heads these outcomes settled (delivered or dead-lettered), once each, in
    the order the database locks them."""
    return sorted(
        {
            Line(s.endpoint_id, s.line_key)
            for s in settled
            if s.line_key is not None and s.status in SETTLED
        },
        key=lambda line: (line.endpoint_id, line.ordering_key),
    )
