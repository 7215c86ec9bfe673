"""Dead letters' data access: per-endpoint figures for the report and the operator's view, the
scheduled report's claim, and the selection a replay works through (see
``queries/dead_letters.sql``). Each function is one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class DeadLetterStats:
    endpoint_id: int
    url: str
    dead_letters: int
    top_error: str | None
    top_status_code: int | None
    auth_refusals: int
    rate_limited: int
    first_at: datetime
    last_at: datetime
    mean_attempts: float
    # The uid of the endpoint's application.
    app_uid: str = "default"


def dead_letter_stats(
    cur: Cursor, *, since: datetime, now: datetime, app_id: int | None = None
) -> list[DeadLetterStats]:
    """Per endpoint, the dead letters of (since, now], of one application or (None) of all."""
    cur.execute(sql("dead_letter_stats"), {"since": since, "now": now, "app_id": app_id})
    return [DeadLetterStats(**row) for row in fetch_dicts(cur)]


def claim_dead_letters_for_report(cur: Cursor, *, max_rows: int) -> list[DeadLetterStats]:
    """Mark up to ``max_rows`` unreported dead letters (oldest first) reported, and return them
    per endpoint. Only inside the transaction that publishes the report: see the query."""
    cur.execute(sql("claim_dead_letters_for_report"), {"max_rows": max_rows})
    return [DeadLetterStats(**row) for row in fetch_dicts(cur)]


def count_unreported_dead_letters(cur: Cursor) -> int:
    cur.execute(sql("count_unreported_dead_letters"))
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


def dead_letter_ids(
    cur: Cursor,
    app_id: int,
    *,
    endpoint_id: int | None = None,
    since: datetime | None = None,
    ids: Sequence[int] | None = None,
) -> list[int]:
    """Ids of an application's dead letters matching every given filter, in id order (what a
    replay will requeue, listed up front so that a long replay can show its progress)."""
    cur.execute(
        sql("dead_letter_ids"),
        {
            "app_id": app_id,
            "endpoint_id": endpoint_id,
            "since": since,
            "ids": list(ids) if ids is not None else None,
        },
    )
    return [int(row[0]) for row in cur.fetchall()]
