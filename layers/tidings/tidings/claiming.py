"""The claimer: lease due rows from PostgreSQL and hand them to the delivery queue.

One invocation loops for most of its time budget, so rows due now reach the queue within about
a second even though the function is scheduled once a minute. Overlapping invocations are safe:
``claim_due`` skips rows another claimer holds.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from tidings.config import Settings
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.observability import logger, metrics
from tidings.queue import MAX_BODY_BYTES, DeliveryQueue, OutgoingMessage

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


@dataclass(frozen=True, slots=True)
class ClaimRound:
    """One claim: rows leased, messages the queue took, and leases given back at once."""

    claimed: int = 0
    sent: int = 0
    released: int = 0


@dataclass(frozen=True, slots=True)
class ClaimSummary:
    rounds: int
    claimed: int
    sent: int
    released: int

    def as_dict(self) -> dict[str, int]:
        return {
            "rounds": self.rounds,
            "claimed": self.claimed,
            "sent": self.sent,
            "released": self.released,
        }


class Claimer:
    """Moves due rows from the database to the delivery queue."""

    def __init__(
        self,
        db: Database,
        queue: DeliveryQueue,
        settings: Settings,
        *,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.db = db
        self.queue = queue
        self.settings = settings
        self._sleep = sleep

    def claim_once(self) -> ClaimRound:
        """Lease one batch, send it; rows the queue refused are released at once."""
        rows = self.db.run(
            lambda cur: delivery.claim_due(
                cur,
                batch_size=self.settings.claim_batch_size,
                lease_s=self.settings.lease_s,
                inline_payload_bytes=INLINE_PAYLOAD_BYTES,
                max_in_flight=self.settings.claim_max_in_flight,
            )
        )
        if not rows:
            return ClaimRound()
        outgoing = [
            OutgoingMessage(
                id=str(row.message_id),
                body=DeliveryEnvelope(
                    row.message_id, row.lease_token, row.attempts + 1, row.payload
                ).to_body(),
            )
            for row in rows
        ]
        try:
            failed_ids = set(self.queue.send_batch(outgoing))
        except Exception:
            # Nothing is known to have been sent: give every row back rather than wait for
            # its lease to expire.
            self._release([row.lease for row in rows])
            raise
        failed = [row.lease for row in rows if str(row.message_id) in failed_ids]
        released = self._release(failed)
        sent = len(rows) - len(failed)
        if failed:
            logger.warning(
                "queue refused claimed rows; their leases were released",
                extra={"message_ids": sorted(lease.message_id for lease in failed)},
            )
        return ClaimRound(claimed=len(rows), sent=sent, released=released)

    def run(self, remaining_ms: Callable[[], int]) -> ClaimSummary:
        """Claim until ``remaining_ms()`` falls below the configured stop margin.

        A round that leased rows is followed at once by another (fair shares can leave a batch
        unfilled while endpoints still have work); an empty one by a pause of ``claim_idle_poll_s``.
        A round whose sends failed also pauses, so an unreachable queue is not hammered.
        """
        stop_ms = self.settings.claim_stop_before_timeout_s * 1000
        rounds = claimed = sent = released = 0
        while remaining_ms() > stop_ms:
            result = self.claim_once()
            rounds += 1
            claimed += result.claimed
            sent += result.sent
            released += result.released
            if result.claimed and not result.released:
                continue
            pause_s = min(self.settings.claim_idle_poll_s, (remaining_ms() - stop_ms) / 1000)
            if pause_s > 0:
                self._sleep(pause_s)
        summary = ClaimSummary(rounds, claimed, sent, released)
        # Once per invocation, zero included: an idle minute is a data point, not a gap.
        metrics.add_metric(name="Claimed", unit=MetricUnit.Count, value=claimed)
        logger.info("claimer finished", extra=summary.as_dict())
        return summary

    def _release(self, leases: list[delivery.Lease]) -> int:
        if not leases:
            return 0
        released = self.db.run(lambda cur: delivery.release_leases(cur, leases))
        return len(released)
