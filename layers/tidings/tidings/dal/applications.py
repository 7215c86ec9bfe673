"""Applications: creation, look-up by uid or id, paging, changes and deletion."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql

DEFAULT_APP_ID = 1
DEFAULT_APP_UID = "default"


def insert_application(
    cur: Cursor,
    *,
    uid: str,
    name: str,
    metadata: Mapping[str, str],
    default_payload_format: str | None = None,
) -> dict[str, Any] | None:
    """The new application, or None when its uid is taken."""
    cur.execute(
        sql("insert_application"),
        {
            "uid": uid,
            "name": name,
            "metadata": json.dumps(metadata),
            "default_payload_format": default_payload_format,
        },
    )
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def find_application(cur: Cursor, ref: str) -> dict[str, Any] | None:
    """The live application whose uid is ``ref``, else whose id ``ref`` spells."""
    app_id = int(ref) if ref.isascii() and ref.isdigit() and len(ref) <= 18 else None
    cur.execute(sql("find_application"), {"ref": ref, "id": app_id})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def list_applications(cur: Cursor, *, after_id: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` live applications after ``after_id`` (the extra row: more follow)."""
    cur.execute(sql("list_applications"), {"after_id": after_id, "limit": limit})
    return fetch_dicts(cur)


def update_application(
    cur: Cursor,
    app_id: int,
    *,
    name: str | None,
    metadata: Mapping[str, str] | None,
    set_default_payload_format: bool = False,
    default_payload_format: str | None = None,
) -> dict[str, Any] | None:
    """Change the fields given (name and metadata when not None, the default payload format when
    ``set_default_payload_format``, None for the deployment's); None when the application is not
    there."""
    cur.execute(
        sql("update_application"),
        {
            "app_id": app_id,
            "set_name": name is not None,
            "name": name,
            "set_metadata": metadata is not None,
            "metadata": None if metadata is None else json.dumps(metadata),
            "set_default_payload_format": set_default_payload_format,
            "default_payload_format": default_payload_format,
        },
    )
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def operational_application(cur: Cursor) -> str | None:
    """The operational application's uid as the database holds it (None before it is set)."""
    cur.execute(sql("operational_application"))
    row = cur.fetchone()
    return None if row is None else str(row[0])


def mark_application_deleted(cur: Cursor, app_id: int) -> tuple[int, int] | None:
    """The first step of deleting an application, to commit on its own: marks it deleted,
    disables its endpoints and dead-letters the messages it sees queued (none of which waits for
    a producer); how many endpoints and messages, or None when there is no such live
    application (or it is 'default')."""
    cur.execute(sql("mark_application_deleted"), {"app_id": app_id})
    if cur.fetchone() is None:
        return None
    cur.execute(sql("retire_application_endpoints"), {"app_id": app_id})
    row = cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def retire_application(cur: Cursor, app_id: int) -> tuple[int, int]:
    """The second step, in a transaction of its own after the first committed: waits for the
    transactions that were still writing to the application, then dead-letters the messages they
    queued (and disables its endpoints again, changing nothing); returns how many endpoints and
    messages it touched. Safe to run again."""
    cur.execute(sql("wait_for_application_writers"), {"app_id": app_id})
    cur.execute(sql("retire_application_endpoints"), {"app_id": app_id})
    row = cur.fetchone()
    assert row is not None
    return int(row[0]), int(row[1])
