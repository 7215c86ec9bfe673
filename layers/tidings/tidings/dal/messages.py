"""Messages of an application: look-up with attempts, filtered paging, dead-letter replay,
resend and recovery."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from tidings.dal import lines
from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


def get_message(cur: Cursor, app_id: int, message_id: int) -> dict[str, Any] | None:
    cur.execute(sql("get_message"), {"app_id": app_id, "message_id": message_id})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def attempts_of_message(cur: Cursor, app_id: int, message_id: int) -> list[dict[str, Any]]:
    cur.execute(sql("attempts_of_message"), {"app_id": app_id, "message_id": message_id})
    return fetch_dicts(cur)


def list_messages(
    cur: Cursor,
    app_id: int,
    *,
    before_id: int | None,
    limit: int,
    status: str | None = None,
    endpoint_id: int | None = None,
    event_type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` messages, newest first (the extra row means more follow)."""
    cur.execute(
        sql("list_messages"),
        {
            "app_id": app_id,
            "before_id": before_id,
            "limit": limit,
            "status": status,
            "endpoint_id": endpoint_id,
            "event_type": event_type,
            "since": since,
            "until": until,
        },
    )
    return fetch_dicts(cur)


def replay_dead_letters(
    cur: Cursor,
    app_id: int,
    *,
    batch_size: int,
    message_ids: Sequence[int] | None = None,
    endpoint_id: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[int]:
    """Requeue one batch of matching dead letters; returns their ids."""
    cur.execute(
        sql("replay_dead_letters"),
        {
            "app_id": app_id,
            "batch_size": batch_size,
            "message_ids": None if message_ids is None else list(message_ids),
            "endpoint_id": endpoint_id,
            "since": since,
            "until": until,
        },
    )
    ids = [int(row[0]) for row in cur.fetchall()]
    # Those of FIFO endpoints go to the end of their lines (run in the same transaction).
    lines.place_in_lines(cur, ids)
    return ids


def messages_outside_application(cur: Cursor, app_id: int, message_ids: Sequence[int]) -> list[int]:
    """Those of ``message_ids`` that are not messages of the application's endpoints."""
    cur.execute(
        sql("messages_outside_application"),
        {"app_id": app_id, "message_ids": list(message_ids)},
    )
    return [int(row[0]) for row in cur.fetchall()]


def resend_message(cur: Cursor, app_id: int, message_id: int) -> dict[str, Any] | None:
    """Start a new delivery of a finished message of the application's endpoints; the message as
    it is now, with ``resent``, ``endpoint_open`` and ``endpoint_deleted`` (None when the
    application has no such message)."""
    cur.execute(sql("resend_message"), {"app_id": app_id, "message_id": message_id})
    rows = fetch_dicts(cur)
    if not rows:
        return None
    row = rows[0]
    if row["resent"]:
        # On a FIFO endpoint it takes its place in its line (run in the same transaction).
        placed = dict(lines.place_in_lines(cur, [row["id"]]))
        row["status"] = placed.get(row["id"], row["status"])
    return row


def recovery_candidates(
    cur: Cursor, *, endpoint_id: int, since: datetime, until: datetime
) -> list[int]:
    """An endpoint's dead letters and failed messages created in [since, until), by id."""
    cur.execute(
        sql("recovery_candidates"), {"endpoint_id": endpoint_id, "since": since, "until": until}
    )
    return [int(row[0]) for row in cur.fetchall()]


def recover_messages(cur: Cursor, *, endpoint_id: int, ids: Sequence[int]) -> list[int]:
    """Start a new delivery of those of ``ids`` still dead or awaiting a retry; their ids."""
    cur.execute(sql("recover_messages"), {"endpoint_id": endpoint_id, "ids": list(ids)})
    recovered = [int(row[0]) for row in cur.fetchall()]
    # Those of a FIFO endpoint go to the end of their lines (run in the same transaction).
    lines.place_in_lines(cur, recovered)
    return recovered


def endpoint_of_application(cur: Cursor, app_id: int, endpoint_id: int) -> bool:
    """Whether the endpoint is the application's (deleted or not)."""
    cur.execute(sql("endpoint_of_application"), {"app_id": app_id, "endpoint_id": endpoint_id})
    row = cur.fetchone()
    return bool(row and row[0])
