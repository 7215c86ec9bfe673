"""Pruning: old attempts leave by whole daily partitions, old messages and events in bounded
batches; no attempt leaves before the message it explains.

- A daily partition of attempts goes when its whole day is older than the attempts retention
  (at least the latency window). Before it goes, the attempts in it of messages that are still
  kept (dead letters, for 30 days; messages still retrying) are copied to ``attempts_kept`` in
  batches, where each stays until its message is pruned: a message's history lasts as long as
  the message. With the retention at least the delivered messages' (7 days), only dead letters
  and late messages have attempts to move. Dropping needs a moment's exclusive lock on
  ``attempts``, taken with a short lock timeout so that the senders' inserts never queue behind a
  waiting drop for long (a drop that times out is left to the next run). The partitions of the
  coming days are created ahead. Rows in the default partition (no daily partition existed for
  their day) go in batches once their message is gone.
- A delivered message is named by the tally of the record that delivered it
  (``tidings.attempt_tallies``, in daily partitions too): a day's tallies go once their whole
  day is older than the delivered retention (and than the latency window and the day the hourly
  charts show, which read them), after the messages they delivered that are still delivered
  (not resent since) were deleted, in batches of the tallies that name about
  ``prune_batch_size`` messages, with their kept attempts. A message is so kept until the
  end of the day its retention ends in.
- Dead letters older than their retention are deleted in batches of ``prune_batch_size`` rows,
  each batch its own short transaction (rows another session holds are skipped), with their kept
  attempts.
- Events go when no message refers to them and their idempotency window is over: the same
  ``event_id`` is answered as a repeat for as long as its event is kept.
- Rotated-out signing secrets whose overlap has ended are deleted (a rotation drops them too, but
  an endpoint may not be rotated again for a long time).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Protocol

import psycopg2.errors

from tidings.dal import pruning as dal
from tidings.dal import secrets as secrets_dal
from tidings.dal.connection import Cursor, Database
from tidings.dal.pruning import KeptBatch, TalliedBatch
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
    def idempotency_window_s(self) -> float: ...
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
    # Attempts of kept messages copied out of the partitions dropped.
    attempts_kept: int
    default_attempts_deleted: int
    delivered_deleted: int
    dead_letters_deleted: int
    events_deleted: int
    # False when some table still had rows due after prune_max_batches batches.
    complete: bool
    expired_secrets_deleted: int = 0
    # Tally partitions dropped once the messages they delivered were pruned.
    tally_partitions_dropped: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "partitions_created": self.partitions_created,
            "partitions_dropped": list(self.partitions_dropped),
            "partitions_deferred": self.partitions_deferred,
            "attempts_kept": self.attempts_kept,
            "default_attempts_deleted": self.default_attempts_deleted,
            "delivered_deleted": self.delivered_deleted,
            "tally_partitions_dropped": list(self.tally_partitions_dropped),
            "dead_letters_deleted": self.dead_letters_deleted,
            "events_deleted": self.events_deleted,
            "complete": self.complete,
            "expired_secrets_deleted": self.expired_secrets_deleted,
        }


def attempts_cutoff(settings: PruneSettings, now: datetime) -> datetime:
    """Attempts made before this moment are no longer needed."""
    keep_s = max(settings.latency_window_s, settings.attempts_retention_s)
    return now - timedelta(seconds=keep_s)


# The endpoints' hourly charts read the last day of tallies (those the percentiles job has not
# rolled up yet).
CHART_S = 25 * 3600


def tallies_cutoff(settings: PruneSettings, now: datetime) -> datetime:
    """Tallies recorded before this moment are no longer needed, nor the messages they delivered
    (should they still be delivered)."""
    keep_s = max(settings.delivered_retention_s, settings.latency_window_s, CHART_S)
    return now - timedelta(seconds=keep_s)


@dataclass(frozen=True, slots=True)
class _Partitions:
    created: int
    dropped: tuple[str, ...]
    deferred: bool
    kept: int
    complete: bool


def prune(db: Database, settings: PruneSettings, now: datetime | None = None) -> PruneResult:
    moment = now or datetime.now(UTC)
    if moment.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    cutoff = attempts_cutoff(settings, moment)
    parts = _attempt_partitions(db, settings, moment, cutoff)

    batch = settings.prune_batch_size
    default = in_batches(
        db,
        lambda cur: dal.prune_default_attempts(cur, cutoff=cutoff, batch_size=batch),
        size=lambda deleted: deleted,
        batch_size=batch,
        max_batches=settings.prune_max_batches,
    )
    events_cutoff = moment - timedelta(seconds=settings.idempotency_window_s)
    delivered = _tallied_messages(db, settings, tallies_cutoff(settings, moment), events_cutoff)
    dead = in_batches(
        db,
        lambda cur: dal.prune_dead_letters(
            cur,
            cutoff=moment - timedelta(seconds=settings.dead_letter_retention_s),
            events_cutoff=events_cutoff,
            batch_size=batch,
        ),
        size=lambda pruned: pruned.messages,
        batch_size=batch,
        max_batches=settings.prune_max_batches,
    )
    orphans = in_batches(
        db,
        lambda cur: dal.prune_orphan_events(cur, cutoff=events_cutoff, batch_size=batch),
        size=lambda deleted: deleted,
        batch_size=batch,
        max_batches=settings.prune_max_batches,
    )
    secrets = in_batches(
        db,
        lambda cur: secrets_dal.prune_expired_secrets(cur, batch_size=batch),
        size=lambda deleted: deleted,
        batch_size=batch,
        max_batches=settings.prune_max_batches,
    )
    return PruneResult(
        partitions_created=parts.created,
        partitions_dropped=parts.dropped,
        partitions_deferred=parts.deferred,
        attempts_kept=parts.kept,
        default_attempts_deleted=sum(default.results),
        delivered_deleted=delivered.messages,
        dead_letters_deleted=sum(b.messages for b in dead.results),
        tally_partitions_dropped=delivered.dropped,
        events_deleted=delivered.events
        + sum(b.events for b in dead.results)
        + sum(orphans.results),
        expired_secrets_deleted=sum(secrets.results),
        complete=parts.complete
        and default.complete
        and delivered.complete
        and dead.complete
        and orphans.complete
        and secrets.complete,
    )


def _attempt_partitions(
    db: Database, settings: PruneSettings, moment: datetime, cutoff: datetime
) -> _Partitions:
    """Create the coming days' partitions; drop those past the cutoff, oldest first, after
    copying the attempts of kept messages out of each."""
    lock_ms = settings.prune_lock_timeout_ms
    created, deferred = 0, False
    try:
        created = db.run(
            lambda cur: dal.ensure_attempt_partitions(
                cur,
                from_day=moment.astimezone(UTC).date(),
                days=settings.attempt_partitions_ahead_days + 1,
                lock_timeout_ms=lock_ms,
            )
        )
    except psycopg2.errors.LockNotAvailable:
        # Busy senders held the lock past the timeout; the next hourly run tries again.
        logger.warning("attempt partitions busy; left to the next run", extra={"lock_ms": lock_ms})
        deferred = True
    dropped: list[str] = []
    kept = 0
    budget = settings.prune_max_batches
    while True:
        name = db.run(lambda cur: dal.oldest_attempt_partition(cur, cutoff=cutoff))
        if name is None:
            break
        copied = _keep_live_attempts(db, name, settings.prune_batch_size, budget)
        kept += sum(b.kept for b in copied.results)
        budget -= len(copied.results)
        if not copied.complete:
            return _Partitions(created, tuple(dropped), deferred, kept, complete=False)
        try:
            db.run(partial(dal.drop_attempt_partition, partition=name, lock_timeout_ms=lock_ms))
        except psycopg2.errors.LockNotAvailable:
            logger.warning(
                "attempt partition busy; its drop is left to the next run",
                extra={"partition": name, "lock_ms": lock_ms},
            )
            return _Partitions(created, tuple(dropped), True, kept, complete=True)
        dropped.append(name)
    return _Partitions(created, tuple(dropped), deferred, kept, complete=True)


def _keep_live_attempts(
    db: Database, partition: str, batch_size: int, max_batches: int
) -> BatchRun[KeptBatch]:
    """Go through ``partition`` in id order, copying the attempts of kept messages aside."""
    results: list[KeptBatch] = []
    after_id = 0
    for _ in range(max_batches):
        batch = db.run(
            partial(
                dal.keep_live_attempts,
                partition=partition,
                after_id=after_id,
                batch_size=batch_size,
            )
        )
        results.append(batch)
        if batch.scanned < batch_size or batch.last_id is None:
            return BatchRun(tuple(results), complete=True)
        after_id = batch.last_id
    return BatchRun(tuple(results), complete=False)


def _tallied_batch(
    cur: Cursor,
    *,
    partition: str,
    after_ctid: str,
    batch_size: int,
    cutoff: datetime,
    events_cutoff: datetime,
) -> TalliedBatch:
    """One batch of a day's tallies, and, in its transaction, how far the day has been gone
    through (not past a batch with messages another session held)."""
    batch = dal.prune_tallied_messages(
        cur,
        partition=partition,
        after_ctid=after_ctid,
        batch_size=batch_size,
        cutoff=cutoff,
        events_cutoff=events_cutoff,
    )
    if not batch.held and batch.last_ctid is not None:
        dal.save_tally_pruning_progress(cur, partition=partition, after_ctid=batch.last_ctid)
    return batch


@dataclass(frozen=True, slots=True)
class _Tallied:
    messages: int
    events: int
    dropped: tuple[str, ...]
    complete: bool


def _tallied_messages(
    db: Database, settings: PruneSettings, cutoff: datetime, events_cutoff: datetime
) -> _Tallied:
    """Prune the messages delivered on each day whose tallies are past the cutoff (oldest day
    first), dropping each day's tallies once none of those messages is left; then those the
    default partition took. Stops, incomplete, at the batch budget."""
    budget = settings.prune_max_batches
    batch_size = settings.prune_batch_size
    messages = events = 0
    dropped: list[str] = []
    while budget > 0:
        name = db.run(lambda cur: dal.oldest_tally_partition(cur, cutoff=cutoff))
        if name is None:
            break
        # A day too large for one run's budget is taken up where the last run left it.
        saved = db.run(dal.tally_pruning_progress)
        after = saved.after_ctid if saved is not None and saved.partition == name else "(0,0)"
        while budget > 0:
            batch = db.run(
                partial(
                    _tallied_batch,
                    partition=name,
                    after_ctid=after,
                    batch_size=batch_size,
                    cutoff=cutoff,
                    events_cutoff=events_cutoff,
                )
            )
            budget -= 1
            messages, events = messages + batch.messages, events + batch.events
            if batch.held:
                # Another session held some of these messages: the next run takes this batch
                # again, and the day goes once they are gone.
                return _Tallied(messages, events, tuple(dropped), complete=False)
            if batch.named < batch_size or batch.last_ctid is None:
                break
            after = batch.last_ctid
        else:
            return _Tallied(messages, events, tuple(dropped), complete=False)
        try:
            db.run(
                partial(
                    dal.drop_attempt_partition,
                    partition=name,
                    lock_timeout_ms=settings.prune_lock_timeout_ms,
                )
            )
        except psycopg2.errors.LockNotAvailable:
            logger.warning(
                "tally partition busy; its drop is left to the next run", extra={"partition": name}
            )
            return _Tallied(messages, events, tuple(dropped), complete=True)
        dropped.append(name)
    else:
        return _Tallied(messages, events, tuple(dropped), complete=False)
    default = in_batches(
        db,
        lambda cur: dal.prune_default_tallies(
            cur, cutoff=cutoff, events_cutoff=events_cutoff, batch_size=batch_size
        ),
        size=lambda batch: batch.named,
        batch_size=batch_size,
        max_batches=max(budget, 1),
    )
    return _Tallied(
        messages + sum(b.messages for b in default.results),
        events + sum(b.events for b in default.results),
        tuple(dropped),
        complete=default.complete,
    )
