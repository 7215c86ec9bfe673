"""The event-type catalog: entries, their versioned schemas and examples, the look-up ingest
makes to validate payloads, and the mark of an example event (see ``queries/event_types.sql``).

Schemas and examples travel as JSON text: the caller has checked and serialized them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """What an entry holds, ready to store."""

    name: str
    description: str
    deprecated: bool
    archived: bool
    validate_payloads: bool
    # JSON text (None: no schema), its digest, and the examples' JSON text (an array).
    schema_json: str | None
    schema_digest: str | None
    examples_json: str


@dataclass(frozen=True, slots=True)
class CheckedType:
    """An event type whose payloads are validated: its current version and schema digest."""

    name: str
    version: int
    schema_digest: str


def insert_event_type(cur: Cursor, entry: CatalogEntry) -> bool:
    """Store a new entry with its version 1; False when the name is taken."""
    cur.execute(
        sql("insert_event_type"),
        {
            "name": entry.name,
            "description": entry.description,
            "deprecated": entry.deprecated,
            "archived": entry.archived,
            "validate_payloads": entry.validate_payloads,
            "schema": entry.schema_json,
            "schema_digest": entry.schema_digest,
            "examples": entry.examples_json,
        },
    )
    return cur.fetchone() is not None


def lock_event_type(cur: Cursor, name: str) -> dict[str, Any] | None:
    """The entry with its current version's schema and examples (JSON text), its row locked
    until the transaction ends (None: no such entry)."""
    cur.execute(sql("lock_event_type"), {"name": name})
    if cur.fetchone() is None:
        return None
    return get_event_type(cur, name)


def update_event_type(cur: Cursor, type_id: int, entry: CatalogEntry) -> None:
    """Set the fields of an entry that make no new version."""
    cur.execute(
        sql("update_event_type"),
        {
            "id": type_id,
            "description": entry.description,
            "deprecated": entry.deprecated,
            "archived": entry.archived,
            "validate_payloads": entry.validate_payloads,
        },
    )


def add_version(cur: Cursor, type_id: int, entry: CatalogEntry) -> int:
    """Store the entry's schema and examples as its new current version; its number."""
    cur.execute(
        sql("add_event_type_version"),
        {
            "id": type_id,
            "schema": entry.schema_json,
            "schema_digest": entry.schema_digest,
            "examples": entry.examples_json,
        },
    )
    row = cur.fetchone()
    if row is None:
        raise RuntimeError(f"event type {type_id} vanished while locked")
    return int(row[0])


def get_event_type(cur: Cursor, name: str) -> dict[str, Any] | None:
    cur.execute(sql("get_event_type"), {"name": name})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def list_event_types(
    cur: Cursor, *, after_id: int | None, limit: int, include_archived: bool
) -> list[dict[str, Any]]:
    """Up to ``limit + 1`` entries after ``after_id`` (the extra row means more follow)."""
    cur.execute(
        sql("list_event_types"),
        {"after_id": after_id, "limit": limit, "include_archived": include_archived},
    )
    return fetch_dicts(cur)


def get_version(cur: Cursor, name: str, version: int) -> dict[str, Any] | None:
    cur.execute(sql("get_event_type_version"), {"name": name, "version": version})
    rows = fetch_dicts(cur)
    return rows[0] if rows else None


def payload_validators(cur: Cursor, names: Sequence[str]) -> list[CheckedType]:
    """Of ``names``, the types whose payloads are validated, with their schema's digest."""
    cur.execute(sql("payload_validators"), {"names": list(names)})
    return [CheckedType(str(r[0]), int(r[1]), str(r[2])) for r in cur.fetchall()]


def event_type_schema(cur: Cursor, name: str, version: int) -> str | None:
    """The JSON text of one version's schema (None: no such version, or no schema)."""
    cur.execute(sql("event_type_schema"), {"name": name, "version": version})
    row = cur.fetchone()
    return None if row is None else row[0]


def mark_example_event(cur: Cursor, event_ref: int) -> None:
    cur.execute(sql("mark_example_event"), {"event_ref": event_ref})
