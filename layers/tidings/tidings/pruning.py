"""Pruning: old attempts leave by whole daily partitions, old messages in bounded batches.

- Attempts are kept for the longer of the latency window and the log retention. A daily
  partition goes when its whole day is older than that; dropping it needs a moment's exclusive
  lock on ``attempts``, taken with a short lock timeout so that the senders' inserts never queue
  behind a waiting drop for long (a drop that times out is left to the next run). The partitions of
  the coming days are created ahead. Rows that landed in the default partition (no daily partition
  existed for their day) are deleted in batches.
- Delivered messages older than their retention and dead letters older than theirs are deleted in
  batches of ``prune_batch_size`` rows, each batch its own short transaction (rows another session
  holds are skipped), with the events left without any message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import psycopg2.errors

from tidings.config import Settings
from tidings.dal import maintenance
from tidings.dal.connection import Database
from tidings.dal.maintenance import PrunedBatch
from tidings.observability import logger


@dataclass(frozen=True, slots=True)
class PruneResult:
    partitions_created: int
    partitions_dropped: tuple[str, ...]
    # A partition change waited longer than the lock timeout and is left to the next run.
    partitions_deferred: bool
    default_attempts_deleted: int
    delivered_deleted: int
    dead_letters_deleted: int
    events_deleted: int
    # False when some table still had rows due after prune_max_batches batches.
    complete: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "partitions_created": self.partitions_created,
            "partitions_dropped": list(self.partitions_dropped),
            "partitions_deferred": self.partitions_deferred,
            "default_attempts_deleted": self.default_attempts_deleted,
            "delivered_deleted": self.delivered_deleted,
            "dead_letters_deleted": self.dead_letters_deleted,
            "events_deleted": self.events_deleted,
            "complete": self.complete,
        }


def attempts_cutoff(settings: Settings, now: datetime) -> datetime:
    """Attempts made before this moment are no longer needed."""
    keep_s = max(settings.latency_window_s, settings.attempts_retention_s)
    return now - timedelta(seconds=keep_s)


def prune(db: Database, settings: Settings, now: datetime | None = None) -> PruneResult:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    lock_ms = settings.prune_lock_timeout_ms
    deferred = False
    created = 0
    dropped: list[str] = []
    try:
        with db.cursor() as cur:
            created = maintenance.ensure_attempt_partitions(
                cur,
                from_day=moment.astimezone(UTC).date(),
                days=settings.attempt_partitions_ahead_days + 1,
                lock_timeout_ms=lock_ms,
            )
            cutoff = attempts_cutoff(settings, moment)
            while (
                name := maintenance.drop_oldest_attempt_partition(
                    cur, cutoff=cutoff, lock_timeout_ms=lock_ms
                )
            ) is not None:
                dropped.append(name)
    except psycopg2.errors.LockNotAvailable:
        # Busy senders held the lock past the timeout; the next hourly run tries again.
        logger.warning("attempt partitions busy; left to the next run", extra={"lock_ms": lock_ms})
        deferred = True

    batch = settings.prune_batch_size
    default_deleted, default_done = _in_batches(
        db,
        lambda cur: maintenance.prune_default_attempts(
            cur, cutoff=attempts_cutoff(settings, moment), batch_size=batch
        ),
        batch,
        settings.prune_max_batches,
    )
    delivered, delivered_done = _messages_in_batches(
        db,
        lambda cur: maintenance.prune_delivered_messages(
            cur,
            cutoff=moment - timedelta(seconds=settings.delivered_retention_s),
            batch_size=batch,
        ),
        batch,
        settings.prune_max_batches,
    )
    dead, dead_done = _messages_in_batches(
        db,
        lambda cur: maintenance.prune_dead_letters(
            cur,
            cutoff=moment - timedelta(seconds=settings.dead_letter_retention_s),
            batch_size=batch,
        ),
        batch,
        settings.prune_max_batches,
    )
    return PruneResult(
        partitions_created=created,
        partitions_dropped=tuple(dropped),
        partitions_deferred=deferred,
        default_attempts_deleted=default_deleted,
        delivered_deleted=delivered.messages,
        dead_letters_deleted=dead.messages,
        events_deleted=delivered.events + dead.events,
        complete=default_done and delivered_done and dead_done,
    )


def _in_batches(
    db: Database, delete_batch: Callable[..., int], batch: int, max_batches: int
) -> tuple[int, bool]:
    """Run ``delete_batch`` until a batch comes back short; (rows deleted, whether done)."""
    total = 0
    for _ in range(max_batches):
        deleted = db.run(delete_batch)
        total += deleted
        if deleted < batch:
            return total, True
    return total, False


def _messages_in_batches(
    db: Database, delete_batch: Callable[..., PrunedBatch], batch: int, max_batches: int
) -> tuple[PrunedBatch, bool]:
    messages = events = 0
    for _ in range(max_batches):
        pruned = db.run(delete_batch)
        messages += pruned.messages
        events += pruned.events
        if pruned.messages < batch:
            return PrunedBatch(messages, events), True
    return PrunedBatch(messages, events), False
