"""End-to-end helpers: waiting on the database, reading message states."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tidings.dal.connection import Database, fetch_dicts


def wait_until(
    condition: Callable[[], bool],
    timeout_s: float,
    what: str,
    state: Callable[[], str] | None = None,
) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` (and ``state()``) on timeout."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            found = f"\n{state()}" if state is not None else ""
            raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}{found}")
        time.sleep(0.5)


def progress_table(db: Database) -> str:
    """Every endpoint's figures, to show where a run stood."""
    from datetime import UTC, datetime, timedelta

    from tidings.dal.operator import endpoint_progress
    from tidings.local.progress import ENDPOINT_HEADERS, endpoint_rows, table

    since = datetime.now(UTC) - timedelta(hours=1)
    return table(ENDPOINT_HEADERS, endpoint_rows(db.run(lambda cur: endpoint_progress(cur, since))))


def message_states(db: Database) -> list[dict[str, Any]]:
    """Every message with its status, attempts and endpoint."""

    def read(cur: Any) -> list[dict[str, Any]]:
        cur.execute(
            "SELECT m.id, m.endpoint_id, m.status::text AS status, m.attempts, e.enabled"
            " FROM tidings.messages m JOIN tidings.endpoints e ON e.id = m.endpoint_id"
            " ORDER BY m.id"
        )
        return fetch_dicts(cur)

    return db.run(read)


def count_where(db: Database, condition_sql: str) -> int:
    def read(cur: Any) -> int:
        cur.execute(f"SELECT count(*) FROM tidings.messages m WHERE {condition_sql}")
        row = cur.fetchone()
        return int(row[0])

    return db.run(read)
