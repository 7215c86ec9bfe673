"""FIFO lines as the API and the operators see them: listed, resumed, started or ended when an
endpoint's ordering changes, and joined by the messages a replay, resend or recovery sends again
(``queries/lines.sql``; the delivery path's side is ``dal.delivery``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


def list_lines(
    cur: Cursor,
    app_id: int,
    endpoint_id: int,
    *,
    after_key: str | None,
    limit: int,
    paused_only: bool,
    count_limit: int,
) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` lines of the endpoint with a head (the extra row means more follow),
    by ordering key after ``after_key``."""
    cur.execute(
        sql("list_lines"),
        {
            "app_id": app_id,
            "endpoint_id": endpoint_id,
            "after_key": after_key,
            "limit": limit,
            "paused_only": paused_only,
            "count_limit": count_limit,
        },
    )
    return fetch_dicts(cur)


def resume_lines(cur: Cursor, endpoint_id: int, keys: Sequence[str] | None) -> list[str]:
    """Resume the endpoint's paused lines (all, or those of ``keys``); the keys resumed."""
    cur.execute(
        sql("resume_lines"),
        {"endpoint_id": endpoint_id, "keys": None if keys is None else list(keys)},
    )
    return [row[0] for row in cur.fetchall()]


def reorder_endpoint(cur: Cursor, endpoint_id: int) -> int:
    """After the endpoint's ordering changed: its messages moved into or out of lines."""
    cur.execute(sql("reorder_endpoint"), {"endpoint_id": endpoint_id})
    row = cur.fetchone()
    return int(row[0]) if row else 0


def place_in_lines(cur: Cursor, message_ids: Sequence[int]) -> list[tuple[int, str]]:
    """The messages just made pending again take their places in their FIFO lines; those of
    FIFO endpoints with the status they now have (waiting, or pending at a line's head)."""
    if not message_ids:
        return []
    cur.execute(sql("place_in_lines"), {"message_ids": list(message_ids)})
    return [(int(row[0]), str(row[1])) for row in cur.fetchall()]
