"""What a receiver is sent besides the signature: the body, in its endpoint's format, and the
event's type in a header.

The body is built once per attempt, before signing: the signature covers exactly these bytes.
An ``envelope`` body is the structure the Standard Webhooks specification recommends,

    {"type": "<event type>", "timestamp": "<when Tidings accepted the event>", "data": <payload>}

Its timestamp is the event's acceptance time, not the send time (that is ``webhook-timestamp``):
the body of a message is then the same on every attempt, and a receiver orders events by when
they happened, not by when a retry got through. ``data`` is the payload's JSON text as stored,
spliced in without being parsed again.
"""

from __future__ import annotations

import functools
import json
from datetime import UTC, datetime
from urllib.parse import quote

from tidings.dal.delivery import PayloadFormat

# The header that names the event's type, next to the Standard Webhooks headers.
EVENT_TYPE_HEADER = "webhook-event-type"

# What an event type may hold as it is in a header value: visible ASCII. Anything else (spaces,
# controls, non-ASCII letters) and "%" itself are percent-encoded from UTF-8, so that a header
# never carries a byte HTTP forbids and a receiver can always recover the type.
_HEADER_SAFE = "".join(chr(c) for c in range(0x21, 0x7F) if chr(c) != "%")


def request_body(
    payload_format: PayloadFormat, event_type: str, accepted_at: datetime, payload: str
) -> bytes:
    """The bytes sent as the body of one attempt."""
    if payload_format is PayloadFormat.RAW:
        return payload.encode("utf-8")
    if payload_format is PayloadFormat.ENVELOPE:
        # Built as text rather than by json.dumps of a parsed payload: the payload is valid JSON
        # already (the database's jsonb), and parsing it again would cost as much as sending it.
        return (
            f'{{"type":{json.dumps(event_type)},'
            f'"timestamp":"{envelope_timestamp(accepted_at)}",'
            f'"data":{payload}}}'
        ).encode()
    raise ValueError(f"unknown payload format {payload_format!r}")


def envelope_timestamp(moment: datetime) -> str:
    """``moment`` as RFC 3339 in UTC to the microsecond, as the specification's examples write
    it: ``2024-05-01T12:00:00.123456Z``."""
    if moment.tzinfo is None:
        raise ValueError("the acceptance time must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@functools.lru_cache(maxsize=1024)
def event_type_header(event_type: str) -> str:
    """The ``webhook-event-type`` value of ``event_type``: itself when it is visible ASCII
    without "%" (``order.created``), else percent-encoded UTF-8. Cached: a deployment has few
    event types, and most batches repeat them."""
    return quote(event_type, safe=_HEADER_SAFE)
