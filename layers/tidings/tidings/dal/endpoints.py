"""Endpoints: creation, look-up, paging, changes, soft deletion and health (their signing secrets,
encrypted, are ``dal.secrets``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql

# Fields that an update may change; each has a set_<field> flag in the update statement.
UPDATABLE_FIELDS = (
    "url",
    "description",
    "max_attempts",
    "timeout_ms",
    "rate_limit_per_s",
    "enabled",
    "event_types",
)


def insert_endpoint(
    cur: Cursor,
    *,
    url: str,
    description: str,
    event_types: Sequence[str],
    max_attempts: int | None,
    timeout_ms: int | None,
    rate_limit_per_s: float | None,
) -> dict[str, Any]:
    cur.execute(
        sql("insert_endpoint"),
        {
            "url": url,
            "description": description,
            "event_types": list(event_types),
            "max_attempts": max_attempts,
            "timeout_ms": timeout_ms,
            "rate_limit_per_s": rate_limit_per_s,
        },
    )
    return fetch_dicts(cur)[0]


def get_endpoint(cur: Cursor, endpoint_id: int) -> dict[str, Any] | None:
    cur.execute(sql("get_endpoint"), {"endpoint_id": endpoint_id})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def list_endpoints(cur: Cursor, *, after_id: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` endpoints after ``after_id`` (the extra row means more follow)."""
    cur.execute(sql("list_endpoints"), {"after_id": after_id, "limit": limit})
    return fetch_dicts(cur)


def update_endpoint(
    cur: Cursor, endpoint_id: int, changes: dict[str, Any]
) -> dict[str, Any] | None:
    """Apply ``changes`` (keys from ``UPDATABLE_FIELDS``); None when the endpoint is not there."""
    unknown = set(changes) - set(UPDATABLE_FIELDS)
    if unknown:
        raise ValueError(f"fields that cannot be updated: {sorted(unknown)}")
    params: dict[str, Any] = {"endpoint_id": endpoint_id}
    for name in UPDATABLE_FIELDS:
        params[f"set_{name}"] = name in changes
        params[name] = changes.get(name)
    if params["event_types"] is not None:
        params["event_types"] = list(params["event_types"])
    cur.execute(sql("update_endpoint"), params)
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def soft_delete_endpoint(cur: Cursor, endpoint_id: int) -> bool:
    cur.execute(sql("soft_delete_endpoint"), {"endpoint_id": endpoint_id})
    return cur.fetchone() is not None


def endpoint_health(cur: Cursor, endpoint_id: int) -> dict[str, Any] | None:
    cur.execute(sql("endpoint_health"), {"endpoint_id": endpoint_id})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None
