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
- Rotated-out signing secrets whose overlap has ended are deleted (a rotation drops them too, but
  an endpoint may not be rotated again for a long time).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Protocol

import psycopg2.errors

from tidings.dal import pruning as dal
from tidings.dal import secrets as secrets_dal
from tidings.dal.connection import Database
from tidings.dal.pruning import PrunedBatch
from tidings.maintenance.batches import BatchRun, in_batches
from tidings.observability import logger


class PruneSettings(Protocol):
    """What the pruner reads of the settings."""

    @property
    def attempt_partitions_ahead_days(self) -> int: ...
    @property
    def attempts_retention_s(self) -> float: ...
    @property
    def dead_letter_retention_s(self) -> float: ...
    @property
    def delivered_retention_s(self) -> float: ...
    @property
    def latency_window_s(self) -> float: ...
    @property
    def prune_batch_size(self) -> int: ...
    @property
    def prune_lock_timeout_ms(self) -> int: ...
    @property
    def prune_max_batches(self) -> int: ...


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
    expired_secrets_deleted: int = 0

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
            "expired_secrets_deleted": self.expired_secrets_deleted,
        }


def attempts_cutoff(settings: PruneSettings, now: datetime) -> datetime:
    """Attempts made before this moment are no longer needed."""
    keep_s = max(settings.latency_window_s, settings.attempts_retention_s)
    return now - timedelta(seconds=keep_s)


def prune(db: Database, settings: PruneSettings, now: datetime | None = None) -> PruneResult:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    lock_ms = settings.prune_lock_timeout_ms
    cutoff = attempts_cutoff(settings, moment)
    deferred = False
    created = 0
    dropped: list[str] = []
    try:
        with db.cursor() as cur:
            created = dal.ensure_attempt_partitions(
                cur,
                from_day=moment.astimezone(UTC).date(),
                days=settings.attempt_partitions_ahead_days + 1,
                lock_timeout_ms=lock_ms,
            )
            while (
                name := dal.drop_oldest_attempt_partition(
                    cur, cutoff=cutoff, lock_timeout_ms=lock_ms
                )
            ) is not None:
                dropped.append(name)
    except psycopg2.errors.LockNotAvailable:
        # Busy senders held the lock past the timeout; the next hourly run tries again.
        logger.warning("attempt partitions busy; left to the next run", extra={"lock_ms": lock_ms})
        deferred = True

    batch = settings.prune_batch_size
    default = in_batches(
        db,
        lambda cur: dal.prune_default_attempts(cur, cutoff=cutoff, batch_size=batch),
        size=lambda deleted: deleted,
        batch_size=batch,
        max_batches=settings.prune_max_batches,
    )
    delivered = _finished_in_batches(
        db, settings, "delivered", moment - timedelta(seconds=settings.delivered_retention_s)
    )
    dead = _finished_in_batches(
        db, settings, "dead_letter", moment - timedelta(seconds=settings.dead_letter_retention_s)
    )
    secrets = in_batches(
        db,
        lambda cur: secrets_dal.prune_expired_secrets(cur, batch_size=batch),
        size=lambda deleted: deleted,
        batch_size=batch,
        max_batches=settings.prune_max_batches,
    )
    return PruneResult(
        partitions_created=created,
        partitions_dropped=tuple(dropped),
        partitions_deferred=deferred,
        default_attempts_deleted=sum(default.results),
        delivered_deleted=sum(b.messages for b in delivered.results),
        dead_letters_deleted=sum(b.messages for b in dead.results),
        events_deleted=sum(b.events for b in delivered.results + dead.results),
        complete=default.complete and delivered.complete and dead.complete and secrets.complete,
        expired_secrets_deleted=sum(secrets.results),
    )


def _finished_in_batches(
    db: Database, settings: PruneSettings, status: str, cutoff: datetime
) -> BatchRun[PrunedBatch]:
    return in_batches(
        db,
        lambda cur: dal.prune_finished_messages(
            cur, status=status, cutoff=cutoff, batch_size=settings.prune_batch_size
        ),
        size=lambda pruned: pruned.messages,
        batch_size=settings.prune_batch_size,
        max_batches=settings.prune_max_batches,
    )
