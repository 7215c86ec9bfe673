"""Pruning's data access: attempt partitions, and finished messages in bounded batches (see
``queries/pruning.sql``). Each function is one statement, in a short transaction of its own.
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


def drop_oldest_attempt_partition(
    cur: Cursor, *, cutoff: datetime, lock_timeout_ms: int
) -> str | None:
    """Drop the oldest partition that ends at or before ``cutoff``; its name, or None."""
    cur.execute(
        sql("drop_oldest_attempt_partition"),
        {"cutoff": cutoff, "lock_timeout_ms": lock_timeout_ms},
    )
    row = cur.fetchone()
    assert row is not None
    return None if row[0] is None else str(row[0])


def prune_default_attempts(cur: Cursor, *, cutoff: datetime, batch_size: int) -> int:
    cur.execute(sql("prune_default_attempts"), {"cutoff": cutoff, "batch_size": batch_size})
    return int(cur.rowcount)


def prune_finished_messages(
    cur: Cursor, *, status: str, cutoff: datetime, batch_size: int
) -> PrunedBatch:
    """Delete up to ``batch_size`` messages that became ``status`` (``delivered`` or
    ``dead_letter``) before ``cutoff``, with the events they leave without messages."""
    if status not in FINISHED_STATUSES:
        raise ValueError(f"only finished messages are pruned, not {status!r}")
    cur.execute(
        sql("prune_finished_messages"),
        {"status": status, "cutoff": cutoff, "batch_size": batch_size},
    )
    row = cur.fetchone()
    assert row is not None
    return PrunedBatch(messages=int(row[0]), events=int(row[1]))
