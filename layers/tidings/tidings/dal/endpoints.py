"""Endpoints: creation, look-up, paging, changes, soft deletion and health (their signing secrets,
encrypted, are ``dal.secrets``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql
from tidings.dal.secrets import SealedSecret

# Fields that an update may change; each has a set_<field> flag in the update statement.
UPDATABLE_FIELDS = (
    "url",
    "description",
    "max_attempts",
    "retry_schedule",
    "timeout_ms",
    "rate_limit_per_s",
    "payload_format",
    "max_in_flight",
    "enabled",
    "event_types",
    "filter",
    "channels",
    "ordering",
    "fifo_batch_size",
    "fifo_on_dead_letter",
)


@dataclass(frozen=True, slots=True)
class StoredFilter:
    """An endpoint's filter as stored: the document's JSON text and its compiled jsonpath."""

    document_json: str
    jsonpath: str


def insert_endpoint(
    cur: Cursor,
    *,
    app_id: int,
    url: str,
    description: str,
    event_types: Sequence[str],
    max_attempts: int | None,
    timeout_ms: int | None,
    rate_limit_per_s: float | None,
    retry_schedule: Sequence[float] | None = None,
    payload_format: str | None = None,
    deployment_payload_format: str = "raw",
    max_in_flight: int | None = None,
    filter: StoredFilter | None = None,
    channels: Sequence[str] | None = None,
    ordering: str | None = None,
    fifo_batch_size: int | None = None,
    fifo_on_dead_letter: str | None = None,
) -> dict[str, Any] | None:
    """The new endpoint, or None when its application is not there (any more). Without a
    ``payload_format`` it takes its application's default, else ``deployment_payload_format``."""
    cur.execute(
        sql("insert_endpoint"),
        {
            "app_id": app_id,
            "url": url,
            "description": description,
            "event_types": list(event_types),
            "max_attempts": max_attempts,
            "timeout_ms": timeout_ms,
            "rate_limit_per_s": rate_limit_per_s,
            "retry_schedule": _seconds(retry_schedule),
            "payload_format": payload_format,
            "deployment_payload_format": deployment_payload_format,
            "max_in_flight": max_in_flight,
            **_filter_params(filter),
            "channels": None if channels is None else list(channels),
            "ordering": ordering,
            "fifo_batch_size": fifo_batch_size,
            "fifo_on_dead_letter": fifo_on_dead_letter,
        },
    )
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def get_endpoint(cur: Cursor, app_id: int, endpoint_id: int) -> dict[str, Any] | None:
    cur.execute(sql("get_endpoint"), {"app_id": app_id, "endpoint_id": endpoint_id})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def list_endpoints(cur: Cursor, app_id: int, *, after_id: int, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` of an application's endpoints after ``after_id`` (the extra row means
    more follow)."""
    cur.execute(sql("list_endpoints"), {"app_id": app_id, "after_id": after_id, "limit": limit})
    return fetch_dicts(cur)


def update_endpoint(
    cur: Cursor,
    app_id: int,
    endpoint_id: int,
    changes: dict[str, Any],
    *,
    also_changed: Sequence[str] = (),
) -> dict[str, Any] | None:
    """Apply ``changes`` (keys from ``UPDATABLE_FIELDS``); None when the endpoint is not there.
    Records endpoint.updated when a field other than ``enabled`` changes (``also_changed``: the
    fields changed beside this statement in its transaction, such as credentials), and
    endpoint.enabled or endpoint.disabled when ``enabled`` flips."""
    unknown = set(changes) - set(UPDATABLE_FIELDS)
    if unknown:
        raise ValueError(f"fields that cannot be updated: {sorted(unknown)}")
    changed = sorted({name for name in changes if name != "enabled"} | set(also_changed))
    params: dict[str, Any] = {
        "app_id": app_id,
        "endpoint_id": endpoint_id,
        "changed": changed,
        "report_update": bool(changed),
    }
    for name in UPDATABLE_FIELDS:
        params[f"set_{name}"] = name in changes
        params[name] = changes.get(name)
    if params["event_types"] is not None:
        params["event_types"] = list(params["event_types"])
    params["retry_schedule"] = _seconds(params["retry_schedule"])
    params.update(_filter_params(params["filter"]))
    if params["channels"] is not None:
        params["channels"] = list(params["channels"])
    cur.execute(sql("update_endpoint"), params)
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def soft_delete_endpoint(cur: Cursor, app_id: int, endpoint_id: int) -> bool:
    cur.execute(sql("soft_delete_endpoint"), {"app_id": app_id, "endpoint_id": endpoint_id})
    return cur.fetchone() is not None


def report_secret_rotated(
    cur: Cursor,
    app_id: int,
    endpoint_id: int,
    *,
    secret_id: int,
    previous_secret_expires_at: datetime | None,
) -> None:
    """Record endpoint.secret.rotated for the rotation that installed secret ``secret_id``."""
    cur.execute(
        sql("report_secret_rotated"),
        {
            "app_id": app_id,
            "endpoint_id": endpoint_id,
            "secret_id": secret_id,
            "previous_secret_expires_at": previous_secret_expires_at,
        },
    )


def endpoint_health(cur: Cursor, app_id: int, endpoint_id: int) -> dict[str, Any] | None:
    cur.execute(sql("endpoint_health"), {"app_id": app_id, "endpoint_id": endpoint_id})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def endpoint_hourly_attempts(cur: Cursor, app_id: int, endpoint_id: int) -> list[dict[str, Any]]:
    """The last 24 hours' attempts by hour (only hours that have some), each row also naming the
    database's current hour."""
    cur.execute(sql("endpoint_hourly_attempts"), {"app_id": app_id, "endpoint_id": endpoint_id})
    return fetch_dicts(cur)


def endpoint_signing_secret(cur: Cursor, app_id: int, endpoint_id: int) -> SealedSecret | None:
    """The endpoint's current signing secret, still sealed."""
    cur.execute(sql("endpoint_signing_secret"), {"app_id": app_id, "endpoint_id": endpoint_id})
    row = cur.fetchone()
    return None if row is None else SealedSecret(int(row[0]), bytes(row[1]))


def _seconds(schedule: Sequence[float] | None) -> list[int] | None:
    """A schedule as the whole seconds the endpoints table stores."""
    return None if schedule is None else [int(delay) for delay in schedule]


def _filter_params(stored: StoredFilter | None) -> dict[str, str | None]:
    if stored is None:
        return {"filter": None, "filter_path": None}
    return {"filter": stored.document_json, "filter_path": stored.jsonpath}
