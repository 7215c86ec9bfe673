"""The claimer: lease due rows from PostgreSQL and hand them to the delivery queue.

One invocation loops for most of its time budget, so rows due now reach the queue within about
a second even though the function is scheduled once a minute. Overlapping invocations are safe:
``claim_due`` skips rows another claimer holds. Each row goes to its lane's queue
(``tidings.delivery.lanes``): the slow lane's when the claim says its endpoint is slow or has
never answered and the deployment has one, the delivery queue otherwise. The fast lane's rows
travel ``deliveries_per_message`` to a queue message (``envelope.pack``), the slow lane's one to a
message, so that a slow endpoint's message holds no other row.

Before each claim it moves FIFO lines on (``advance_noted_lines``): the lines producers added
waiting messages to, and those whose settled head no sender moved on, so that their new heads
are due for the claim that follows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from aws_lambda_powertools.metrics import MetricUnit

from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.delivery.envelope import INLINE_PAYLOAD_BYTES, DeliveryEnvelope, send_envelopes
from tidings.delivery.lanes import Lane, lane_of
from tidings.observability import logger, metrics
from tidings.queue import DeliveryQueue


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


# How many notes of FIFO lines to move on (``tidings.fifo_line_moves``) before each claim.
LINE_NOTES_PER_ROUND = 1000


class ClaimerSettings(Protocol):
    """What the claimer reads of the settings."""

    @property
    def claim_batch_size(self) -> int: ...
    @property
    def claim_idle_poll_s(self) -> float: ...
    @property
    def claim_max_in_flight(self) -> int: ...
    @property
    def claim_stop_before_timeout_s(self) -> float: ...
    @property
    def deliveries_per_message(self) -> int: ...
    @property
    def lease_queue_allowance_s(self) -> float: ...
    @property
    def lease_s(self) -> float: ...
    @property
    def slow_lane_max_in_flight(self) -> int: ...
    @property
    def untried_max_in_flight(self) -> int: ...


class Claimer:
    """Moves due rows from the database to the delivery queue."""

    def __init__(
        self,
        db: Database,
        queue: DeliveryQueue,
        settings: ClaimerSettings,
        *,
        slow_queue: DeliveryQueue | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.db = db
        # Without a slow lane, every row travels through the delivery queue.
        self.queues = {Lane.FAST: queue, Lane.SLOW: slow_queue or queue}
        self.settings = settings
        self._sleep = sleep

    def claim_once(self) -> ClaimRound:
        """Lease one batch, send it; rows the queue refused are released at once."""
        self._move_lines_on()
        rows = self.db.run(
            lambda cur: delivery.claim_due(
                cur,
                batch_size=self.settings.claim_batch_size,
                lease_s=self.settings.lease_s + self.settings.lease_queue_allowance_s,
                probe_lease_s=self.settings.lease_s,
                inline_payload_bytes=INLINE_PAYLOAD_BYTES,
                max_in_flight=self.settings.claim_max_in_flight,
                slow_max_in_flight=self.settings.slow_lane_max_in_flight,
                untried_max_in_flight=self.settings.untried_max_in_flight,
            )
        )
        if not rows:
            return ClaimRound()
        by_lane: dict[Lane, list[delivery.ClaimedMessage]] = {}
        for row in rows:
            by_lane.setdefault(lane_of(slow=row.slow, untried=row.untried), []).append(row)
        failed: list[delivery.Lease] = []
        unsent: list[delivery.Lease] = []
        error: Exception | None = None
        for lane, lane_rows in by_lane.items():
            try:
                failed += self._send(self.queues[lane], lane_rows, lane, self._per_message(lane))
            except Exception as exc:
                # Nothing of this lane is known to have been sent: give its rows back rather
                # than wait for their leases to expire (the other lane's went out).
                unsent += [row.lease for row in lane_rows]
                error = exc
        released = self._release(failed + unsent)
        if error is not None:
            raise error
        sent = len(rows) - len(failed)
        if failed:
            logger.warning(
                "queue refused claimed rows; their leases were released",
                extra={"message_ids": sorted(lease.message_id for lease in failed)},
            )
        return ClaimRound(claimed=len(rows), sent=sent, released=released)

    def _move_lines_on(self) -> None:
        """Move noted FIFO lines on; should that fail, the claim goes on without it (the notes
        stay for the next round), so FIFO lines never hold up other endpoints' deliveries."""
        try:
            self.db.run(lambda cur: delivery.advance_noted_lines(cur, limit=LINE_NOTES_PER_ROUND))
        except Exception:
            logger.exception("could not move FIFO lines on; claiming without them")

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

    def _per_message(self, lane: Lane) -> int:
        return 1 if lane is Lane.SLOW else self.settings.deliveries_per_message

    @staticmethod
    def _send(
        queue: DeliveryQueue, rows: list[delivery.ClaimedMessage], lane: Lane, per_message: int
    ) -> list[delivery.Lease]:
        """Send the rows as queue messages; the leases of those the queue refused."""
        return send_envelopes(
            queue,
            [
                DeliveryEnvelope(
                    row.message_id,
                    row.lease_token,
                    row.attempts + 1,
                    row.payload,
                    slow=lane is Lane.SLOW,
                )
                for row in rows
            ],
            per_message,
        )

    def _release(self, leases: list[delivery.Lease]) -> int:
        if not leases:
            return 0
        released = self.db.run(lambda cur: delivery.release_leases(cur, leases))
        return len(released)
