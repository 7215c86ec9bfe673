"""API tokens: their stored hashes and prefixes, look-up for authentication, listing and
revocation (see ``queries/tokens.sql``). Tokens themselves never reach this module."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


def insert_token(
    cur: Cursor,
    *,
    prefix: str,
    token_hash: bytes,
    scope: str,
    app_id: int | None,
    description: str,
    expires_at: datetime | None,
    session_scope: str | None,
    created_by: int | None = None,
) -> dict[str, Any] | None:
    """The stored token, or None when its application is not there (any more)."""
    cur.execute(
        sql("insert_token"),
        {
            "prefix": prefix,
            "hash": token_hash,
            "scope": scope,
            "app_id": app_id,
            "description": description,
            "expires_at": expires_at,
            "session_scope": session_scope,
            "created_by": created_by,
        },
    )
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def tokens_with_prefix(cur: Cursor, prefix: str) -> list[dict[str, Any]]:
    cur.execute(sql("tokens_with_prefix"), {"prefix": prefix})
    rows = fetch_dicts(cur)
    for row in rows:
        row["hash"] = bytes(row["hash"])
    return rows


def token_with_hash(cur: Cursor, token_hash: bytes) -> dict[str, Any] | None:
    cur.execute(sql("token_with_hash"), {"hash": token_hash})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def list_tokens(cur: Cursor, *, after_id: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` tokens after ``after_id`` (the extra row means more follow)."""
    cur.execute(sql("list_tokens"), {"after_id": after_id, "limit": limit})
    return fetch_dicts(cur)


def get_token(cur: Cursor, token_id: int) -> dict[str, Any] | None:
    cur.execute(sql("get_token"), {"token_id": token_id})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def revoke_token(cur: Cursor, token_id: int) -> datetime | None:
    """When the token was revoked (now, or earlier); None when there is no such token."""
    cur.execute(sql("revoke_token"), {"token_id": token_id})
    row = cur.fetchone()
    return None if row is None else row[1]


def set_usage_key(cur: Cursor, token_id: int, usage_key_id: str) -> None:
    cur.execute(sql("set_usage_key"), {"token_id": token_id, "usage_key_id": usage_key_id})


def any_token(cur: Cursor) -> bool:
    cur.execute(sql("any_token"))
    row = cur.fetchone()
    return bool(row and row[0])


def exchange_portal_link(
    cur: Cursor, *, link_id: int, prefix: str, token_hash: bytes, session_s: float
) -> dict[str, Any] | None:
    """The session a usable portal link opens (the link marked used), or None."""
    cur.execute(
        sql("exchange_portal_link"),
        {"link_id": link_id, "prefix": prefix, "hash": token_hash, "session_s": session_s},
    )
    rows = fetch_dicts(cur)
    return rows[0] if rows else None
