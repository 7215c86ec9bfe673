"""Pruning's data access: attempt partitions and the history they hold, finished messages and
orphan events in bounded batches (see ``queries/pruning.sql``). Each function is one statement, in
a short transaction of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime

from tidings.dal.connection import Cursor
from tidings.dal.queries import sql

# The statuses a message ends in, and so may be pruned from.
FINISHED_STATUSES = ("delivered", "dead_letter")


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


def prune_finished_messages(
    cur: Cursor, *, status: str, cutoff: datetime, events_cutoff: datetime, batch_size: int
) -> PrunedBatch:
    """Delete up to ``batch_size`` messages that became ``status`` (``delivered`` or
    ``dead_letter``) before ``cutoff``, with their kept attempts, and the events they leave
    without messages that were recorded before ``events_cutoff``."""
    if status not in FINISHED_STATUSES:
        raise ValueError(f"only finished messages are pruned, not {status!r}")
    cur.execute(
        sql("prune_finished_messages"),
        {
            "status": status,
            "cutoff": cutoff,
            "events_cutoff": events_cutoff,
            "batch_size": batch_size,
        },
    )
    row = cur.fetchone()
    assert row is not None
    return PrunedBatch(messages=int(row[0]), events=int(row[1]))


def prune_orphan_events(cur: Cursor, *, cutoff: datetime, batch_size: int) -> int:
    """Delete up to ``batch_size`` events recorded before ``cutoff`` that no message refers to."""
    cur.execute(sql("prune_orphan_events"), {"cutoff": cutoff, "batch_size": batch_size})
    return int(cur.rowcount)
