"""The delivery envelope: what travels through the delivery queue for one row.

The claimer writes it, the sender reads it back; a retry through the queue writes the next one.
The claimer packs the fast lane's envelopes several to a queue message (``pack``): SQS bills
requests, and a request carrying ten deliveries costs what one carrying one does. A packed body
is ``{"deliveries": [envelope, ...]}``; a body of one envelope is the envelope itself, as retries
and the slow lane send it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidings.config import MAX_DELIVERIES_PER_MESSAGE
from tidings.dal import delivery
from tidings.queue import MAX_BODY_BYTES, DeliveryQueue, OutgoingMessage

# Room for the envelope's other fields around an inline payload.
_ENVELOPE_OVERHEAD_BYTES = 512
INLINE_PAYLOAD_BYTES = MAX_BODY_BYTES - _ENVELOPE_OVERHEAD_BYTES


# The ranges of the database columns an envelope's numbers go to: messages.id is a bigint, the
# attempt number an integer. A number outside them is refused here, so that it never reaches a
# statement it would fail for the whole batch.
MAX_MESSAGE_ID = 2**63 - 1
MAX_ATTEMPT = 2**31 - 1

# The size a packed body stays within: SQS bills each 64 KiB of a request as one request, so a
# larger pack would cost as much as two.
PACKED_BODY_BYTES = 65_536


class MalformedEnvelope(ValueError):
    """A queue message body is not a delivery envelope; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class DeliveryEnvelope:
    """What travels through the delivery queue for one row: which row, under which lease.

    ``payload`` is the event's JSON text when it fits in the message; otherwise the sender reads
    it from the database. ``slow`` says the row travels in the slow lane (its endpoint is slow, or
    has never answered): its retries pass the claim rather than the queue. It is written only when
    true, so a body is otherwise as before.
    """

    message_id: int
    lease_token: uuid.UUID
    attempt: int
    payload: str | None = None
    slow: bool = False

    def to_body(self) -> str:
        """The JSON body; the payload is dropped when the body would exceed the queue's limit."""
        fields = self.as_fields()
        if self.payload is not None:
            # ASCII escapes: a payload may hold characters SQS refuses in a body (U+FFFE), and
            # one such row must not stop every batch it is claimed in.
            with_payload = json.dumps({**fields, "payload": self.payload})
            if len(with_payload.encode("utf-8")) <= MAX_BODY_BYTES:
                return with_payload
        return json.dumps(fields)

    def as_fields(self, *, with_payload: bool = False) -> dict[str, Any]:
        """The envelope as a JSON object's fields (the payload only when asked for)."""
        fields: dict[str, Any] = {
            "message_id": self.message_id,
            "lease_token": str(self.lease_token),
            "attempt": self.attempt,
        }
        if self.slow:
            fields["slow"] = True
        if with_payload and self.payload is not None:
            fields["payload"] = self.payload
        return fields

    @classmethod
    def from_body(cls, body: str) -> DeliveryEnvelope:
        """The envelope in ``body`` (a body of one); anything else raises ``MalformedEnvelope``
        (and only that), naming what is wrong without quoting the payload."""
        return cls.from_fields(_json_object(body))

    @classmethod
    def from_fields(cls, data: object) -> DeliveryEnvelope:
        """The envelope of a decoded JSON value; ``MalformedEnvelope`` if it is none."""
        if not isinstance(data, dict):
            raise MalformedEnvelope(f"an envelope is a JSON {type(data).__name__}, not an object")
        message_id = _bounded_int(data.get("message_id"), "message_id", MAX_MESSAGE_ID)
        attempt = _bounded_int(data.get("attempt"), "attempt", MAX_ATTEMPT)
        payload = data.get("payload")
        if payload is not None and not isinstance(payload, str):
            raise MalformedEnvelope("payload must be the event's JSON text")
        if payload is not None and not _is_unicode(payload):
            raise MalformedEnvelope("payload is not valid Unicode (lone surrogate)")
        slow = data.get("slow", False)
        if not isinstance(slow, bool):
            raise MalformedEnvelope("slow must be true or false")
        token_text = data.get("lease_token")
        if not isinstance(token_text, str):
            raise MalformedEnvelope("lease_token must be a UUID")
        try:
            token = uuid.UUID(token_text)
        except ValueError:
            raise MalformedEnvelope("lease_token must be a UUID") from None
        return cls(
            message_id=message_id,
            lease_token=token,
            attempt=attempt,
            payload=payload,
            slow=slow,
        )

    @property
    def lease(self) -> delivery.Lease:
        return delivery.Lease(self.message_id, self.lease_token)


@dataclass(frozen=True, slots=True)
class PackedMessage:
    """One queue message's body and the envelopes it carries."""

    envelopes: tuple[DeliveryEnvelope, ...]
    body: str


def pack(
    envelopes: Sequence[DeliveryEnvelope],
    *,
    per_message: int,
    max_bytes: int = PACKED_BODY_BYTES,
) -> list[PackedMessage]:
    """The envelopes in queue messages of up to ``per_message`` each, in their order, each body
    within ``max_bytes``. An envelope too large to share a message travels alone, in a body of
    one (its payload dropped if even that is too large: the sender reads it from the database).
    """
    if not 1 <= per_message <= MAX_DELIVERIES_PER_MESSAGE:
        raise ValueError(f"per_message must be within 1..{MAX_DELIVERIES_PER_MESSAGE}")
    if per_message == 1:
        return [PackedMessage((envelope,), envelope.to_body()) for envelope in envelopes]
    packed: list[PackedMessage] = []
    group: list[DeliveryEnvelope] = []
    elements: list[str] = []
    # The body is '{"deliveries": [' + elements joined by ', ' + ']}'.
    frame = len('{"deliveries": []}')
    size = frame

    def close_group() -> None:
        if len(group) == 1:
            packed.append(PackedMessage((group[0],), group[0].to_body()))
        elif group:
            body = '{"deliveries": [' + ", ".join(elements) + "]}"
            packed.append(PackedMessage(tuple(group), body))
        group.clear()
        elements.clear()

    for envelope in envelopes:
        element = json.dumps(envelope.as_fields(with_payload=True))
        element_bytes = len(element.encode("utf-8"))
        if frame + element_bytes > max_bytes:
            close_group()
            size = frame
            packed.append(PackedMessage((envelope,), envelope.to_body()))
            continue
        separator = 2 if group else 0
        if len(group) == per_message or size + separator + element_bytes > max_bytes:
            close_group()
            size, separator = frame, 0
        group.append(envelope)
        elements.append(element)
        size += separator + element_bytes
    close_group()
    return packed


def send_envelopes(
    queue: DeliveryQueue, envelopes: list[DeliveryEnvelope], per_message: int
) -> list[delivery.Lease]:
    """Send envelopes ``per_message`` to a queue message; the leases of those the queue refused
    (every envelope of a refused message). A message is named after its first row."""
    messages = pack(envelopes, per_message=per_message)
    by_id = {str(m.envelopes[0].message_id): m for m in messages}
    refused = queue.send_batch([OutgoingMessage(id=key, body=m.body) for key, m in by_id.items()])
    return [envelope.lease for key in refused for envelope in by_id[key].envelopes]


def envelopes_of(body: str) -> tuple[DeliveryEnvelope, ...]:
    """The envelopes a queue message carries: one, or a pack of them. A pack with one malformed
    envelope, or the same row twice, is malformed whole (``MalformedEnvelope``): the claimer
    writes none such, so the message is someone else's and goes to the dead-letter queue."""
    data = _json_object(body)
    if "deliveries" not in data:
        return (DeliveryEnvelope.from_fields(data),)
    deliveries = data["deliveries"]
    if not isinstance(deliveries, list) or not 1 <= len(deliveries) <= MAX_DELIVERIES_PER_MESSAGE:
        raise MalformedEnvelope(
            f"deliveries must be a list of 1..{MAX_DELIVERIES_PER_MESSAGE} envelopes"
        )
    envelopes = tuple(DeliveryEnvelope.from_fields(item) for item in deliveries)
    if len({envelope.message_id for envelope in envelopes}) != len(envelopes):
        raise MalformedEnvelope("deliveries carry the same message_id twice")
    return envelopes


def _json_object(body: str) -> dict[str, Any]:
    try:
        data = json.loads(body)
    except (TypeError, ValueError) as exc:
        raise MalformedEnvelope(f"body is not JSON: {type(exc).__name__}") from None
    except RecursionError:
        raise MalformedEnvelope("body is JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise MalformedEnvelope(f"body is a JSON {type(data).__name__}, not an object")
    return data


def _bounded_int(value: object, name: str, maximum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        # Shown only when short: a number of a million digits is not worth a log line.
        shown = repr(value) if len(repr(value)) <= 40 else f"a {type(value).__name__}"
        raise MalformedEnvelope(f"{name} must be an integer within 1..{maximum}, got {shown}")
    return value


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
