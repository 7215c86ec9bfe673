"""The delivery envelope: what travels through the delivery queue for one row.

The claimer writes it, the sender reads it back; a retry through the queue writes the next one.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any

from tidings.dal import delivery
from tidings.queue import MAX_BODY_BYTES

# Room for the envelope's other fields around an inline payload.
_ENVELOPE_OVERHEAD_BYTES = 512
INLINE_PAYLOAD_BYTES = MAX_BODY_BYTES - _ENVELOPE_OVERHEAD_BYTES


# The ranges of the database columns an envelope's numbers go to: messages.id is a bigint, the
# attempt number an integer. A number outside them is refused here, so that it never reaches a
# statement it would fail for the whole batch.
MAX_MESSAGE_ID = 2**63 - 1
MAX_ATTEMPT = 2**31 - 1


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
        fields: dict[str, Any] = {
            "message_id": self.message_id,
            "lease_token": str(self.lease_token),
            "attempt": self.attempt,
        }
        if self.slow:
            fields["slow"] = True
        if self.payload is not None:
            # ASCII escapes: a payload may hold characters SQS refuses in a body (U+FFFE), and
            # one such row must not stop every batch it is claimed in.
            with_payload = json.dumps({**fields, "payload": self.payload})
            if len(with_payload.encode("utf-8")) <= MAX_BODY_BYTES:
                return with_payload
        return json.dumps(fields)

    @classmethod
    def from_body(cls, body: str) -> DeliveryEnvelope:
        """The envelope in ``body``; anything else raises ``MalformedEnvelope`` (and only that),
        naming what is wrong without quoting the payload."""
        try:
            data = json.loads(body)
        except (TypeError, ValueError) as exc:
            raise MalformedEnvelope(f"body is not JSON: {type(exc).__name__}") from None
        except RecursionError:
            raise MalformedEnvelope("body is JSON nested too deeply") from None
        if not isinstance(data, dict):
            raise MalformedEnvelope(f"body is a JSON {type(data).__name__}, not an object")
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
