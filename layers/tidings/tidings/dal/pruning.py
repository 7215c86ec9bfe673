"""Pruning's data access: the daily partitions of the attempt log and of the tallies and what
they hold, delivered messages (through the tallies of the day they were delivered), dead letters
and orphan events in bounded batches (see ``queries/pruning.sql``). Each function is one
statement, in a short transaction of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from tidings.dal.connection import Cursor
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class PrunedBatch:
    messages: int
    events: int


@dataclass(frozen=True, slots=True)
class KeptBatch:
    """One batch of a partition gone through before its drop."""

    scanned: int
    kept: int
    last_id: int | None


def ensure_attempt_partitions(
    cur: Cursor, *, from_day: date, days: int, lock_timeout_ms: int
) -> int:
    """Create the missing daily partitions of attempts; returns how many were created."""
    cur.execute(
        sql("ensure_attempt_partitions"),
        {"from_day": from_day, "days": days, "lock_timeout_ms": lock_timeout_ms},
    )
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def oldest_attempt_partition(cur: Cursor, *, cutoff: datetime) -> str | None:
    """The oldest daily partition whose day ends at or before ``cutoff``, or None."""
    cur.execute(sql("oldest_attempt_partition"), {"cutoff": cutoff})
    row = cur.fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def keep_live_attempts(cur: Cursor, *, partition: str, after_id: int, batch_size: int) -> KeptBatch:
    """Copy the attempts of kept messages among the next ``batch_size`` rows of ``partition``."""
    cur.execute(
        sql("keep_live_attempts"),
        {"partition": partition, "after_id": after_id, "batch_size": batch_size},
    )
    row = cur.fetchone()
    assert row is not None
    return KeptBatch(int(row[0]), int(row[1]), None if row[2] is None else int(row[2]))


def drop_attempt_partition(cur: Cursor, *, partition: str, lock_timeout_ms: int) -> bool:
    cur.execute(
        sql("drop_attempt_partition"),
        {"partition": partition, "lock_timeout_ms": lock_timeout_ms},
    )
    row = cur.fetchone()
    assert row is not None
    return bool(row[0])


def prune_default_attempts(cur: Cursor, *, cutoff: datetime, batch_size: int) -> int:
    cur.execute(sql("prune_default_attempts"), {"cutoff": cutoff, "batch_size": batch_size})
    return int(cur.rowcount)


def prune_dead_letters(
    cur: Cursor, *, cutoff: datetime, events_cutoff: datetime, batch_size: int
) -> PrunedBatch:
    """Delete up to ``batch_size`` reported dead letters dead-lettered before ``cutoff``, with
    their kept attempts, and the events they leave without messages that were recorded before
    ``events_cutoff``."""
    cur.execute(
        sql("prune_dead_letters"),
        {"cutoff": cutoff, "events_cutoff": events_cutoff, "batch_size": batch_size},
    )
    row = cur.fetchone()
    assert row is not None
    return PrunedBatch(messages=int(row[0]), events=int(row[1]))


@dataclass(frozen=True, slots=True)
class TalliedBatch:
    """One batch of a tally partition gone through before its drop."""

    # The messages the tallies read name (tallies are read until they name the batch size).
    named: int
    messages: int
    events: int
    last_ctid: str | None
    # Delivered messages another session held: the partition stays for the next run.
    held: int


@dataclass(frozen=True, slots=True)
class TallyProgress:
    """How far the pruner went through a day partition of the tallies (the last ctid done)."""

    partition: str
    after_ctid: str


def tally_pruning_progress(cur: Cursor) -> TallyProgress | None:
    """Where the last run stopped in a day partition of the tallies, if it stopped in one."""
    cur.execute(sql("tally_pruning_progress"))
    row = cur.fetchone()
    return None if row is None or row[0] is None else TallyProgress(str(row[0]), str(row[1]))


def save_tally_pruning_progress(cur: Cursor, *, partition: str, after_ctid: str) -> None:
    """Remember that ``partition`` was gone through up to ``after_ctid``."""
    cur.execute(
        sql("save_tally_pruning_progress"), {"partition": partition, "after_ctid": after_ctid}
    )


def oldest_tally_partition(cur: Cursor, *, cutoff: datetime) -> str | None:
    """The oldest daily partition of the tallies whose day ends at or before ``cutoff``."""
    cur.execute(sql("oldest_tally_partition"), {"cutoff": cutoff})
    row = cur.fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def prune_tallied_messages(
    cur: Cursor,
    *,
    partition: str,
    after_ctid: str,
    batch_size: int,
    cutoff: datetime,
    events_cutoff: datetime,
) -> TalliedBatch:
    """Delete the messages that the next tallies of ``partition`` (those naming ``batch_size``
    messages) delivered, that are still delivered and were delivered before ``cutoff``."""
    cur.execute(
        sql("prune_tallied_messages"),
        {
            "partition": partition,
            "after_ctid": after_ctid,
            "batch_size": batch_size,
            "cutoff": cutoff,
            "events_cutoff": events_cutoff,
        },
    )
    row = cur.fetchone()
    assert row is not None
    return TalliedBatch(int(row[0]), int(row[1]), int(row[2]), row[3], int(row[4]))


def prune_default_tallies(
    cur: Cursor, *, cutoff: datetime, events_cutoff: datetime, batch_size: int
) -> TalliedBatch:
    """The same for tallies in the default partition recorded before ``cutoff``, which go too."""
    cur.execute(
        sql("prune_default_tallies"),
        {"cutoff": cutoff, "events_cutoff": events_cutoff, "batch_size": batch_size},
    )
    row = cur.fetchone()
    assert row is not None
    return TalliedBatch(int(row[0]), int(row[1]), int(row[2]), None, 0)


def prune_orphan_events(cur: Cursor, *, cutoff: datetime, batch_size: int) -> int:
    """Delete up to ``batch_size`` events recorded before ``cutoff`` that no message refers to."""
    cur.execute(sql("prune_orphan_events"), {"cutoff": cutoff, "batch_size": batch_size})
    return int(cur.rowcount)
