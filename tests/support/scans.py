"""How a piece of work read the tables: sequential scans and index look-ups per relation, from
PostgreSQL's own statistics counters.

A plan inside a PL/pgSQL function cannot be EXPLAINed from outside, and the embedded server has
no auto_explain; the counters show what the plans did on any server. A backend flushes its
counters when it next goes idle; ``pg_stat_force_next_flush`` makes that flush happen at once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tidings.dal.connection import Cursor, Database

_COUNTERS = """
    SELECT relname, coalesce(seq_scan, 0), coalesce(seq_tup_read, 0), coalesce(idx_scan, 0),
           coalesce(idx_tup_fetch, 0)
    FROM pg_stat_user_tables WHERE schemaname = 'tidings'
"""


@dataclass(frozen=True, slots=True)
class Reads:
    seq_scans: int
    seq_rows: int
    index_scans: int
    index_rows: int


def _counters(cur: Cursor) -> dict[str, Reads]:
    cur.execute("SELECT pg_stat_force_next_flush()")
    cur.execute("SELECT pg_stat_clear_snapshot()")
    cur.execute(_COUNTERS)
    return {name: Reads(*values) for name, *values in cur.fetchall()}


def reads_during(db: Database, work: Callable[[Cursor], Any]) -> dict[str, Reads]:
    """What ``work``, run on ``db``'s connection, read of each table of schema tidings."""
    with db.connection.cursor() as cur:
        before = _counters(cur)
    with db.cursor() as cur:
        work(cur)
    with db.connection.cursor() as cur:
        after = _counters(cur)
    zero = Reads(0, 0, 0, 0)
    return {
        name: Reads(
            *(
                a - b
                for a, b in zip(_fields(after[name]), _fields(before.get(name, zero)), strict=True)
            )
        )
        for name in after
    }


def _fields(reads: Reads | None) -> tuple[int, int, int, int] | None:
    if reads is None:
        return None
    return (reads.seq_scans, reads.seq_rows, reads.index_scans, reads.index_rows)


def scanned(reads: dict[str, Reads]) -> set[str]:
    """The tables read by a sequential scan."""
    return {name for name, r in reads.items() if r.seq_scans}
