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


class MalformedEnvelope(ValueError):
    """A queue message body is not a delivery envelope; the message says what is wrong."""


@dataclass(frozen=True, slots=True)
class DeliveryEnvelope:
    """What travels through the delivery queue for one row: which row, under which lease.

    ``payload`` is the event's JSON text when it fits in the message; otherwise the sender reads
    it from the database.
    """

    message_id: int
    lease_token: uuid.UUID
    attempt: int
    payload: str | None = None

    def to_body(self) -> str:
        """The JSON body; the payload is dropped when the body would exceed the queue's limit."""
        fields: dict[str, Any] = {
            "message_id": self.message_id,
            "lease_token": str(self.lease_token),
            "attempt": self.attempt,
        }
        if self.payload is not None:
            # ASCII escapes: a payload may hold characters SQS refuses in a body (U+FFFE), and
            # one such row must not stop every batch it is claimed in.
            with_payload = json.dumps({**fields, "payload": self.payload})
            if len(with_payload.encode("utf-8")) <= MAX_BODY_BYTES:
                return with_payload
        return json.dumps(fields)

    @classmethod
    def from_body(cls, body: str) -> DeliveryEnvelope:
        try:
            data = json.loads(body)
        except (TypeError, ValueError) as exc:
            raise MalformedEnvelope(f"body is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise MalformedEnvelope(f"body is a JSON {type(data).__name__}, not an object")
        message_id = data.get("message_id")
        attempt = data.get("attempt")
        payload = data.get("payload")
        if not isinstance(message_id, int) or not _is_positive_int(message_id):
            raise MalformedEnvelope(f"message_id must be a positive integer, got {message_id!r}")
        if not isinstance(attempt, int) or not _is_positive_int(attempt):
            raise MalformedEnvelope(f"attempt must be a positive integer, got {attempt!r}")
        if payload is not None and not isinstance(payload, str):
            raise MalformedEnvelope("payload must be the event's JSON text")
        try:
            token = uuid.UUID(str(data.get("lease_token")))
        except ValueError:
            raise MalformedEnvelope("lease_token must be a UUID") from None
        return cls(message_id=message_id, lease_token=token, attempt=attempt, payload=payload)

    @property
    def lease(self) -> delivery.Lease:
        return delivery.Lease(self.message_id, self.lease_token)


def _is_positive_int(value: int) -> bool:
    return not isinstance(value, bool) and value > 0
