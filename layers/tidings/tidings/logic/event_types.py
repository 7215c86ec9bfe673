"""The event-type catalog, shared by every application: entries with a description, a JSON
Schema (draft 2020-12) and examples, versioned; importing and exporting it as an OpenAPI 3.1
document; and sending an entry's first example to an endpoint.

Every write checks the schema against the meta-schema and each example against the schema
before anything is stored, and happens in one transaction that holds the entry's row: changes to
one entry are made one after the other, and a refused change writes nothing. A change of the
schema or of the examples makes a new version; earlier versions stay readable.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tidings.config import Settings, get_settings
from tidings.dal import endpoints as endpoints_dal
from tidings.dal import event_types as dal
from tidings.dal import ingest as ingest_dal
from tidings.dal.connection import Cursor, Database
from tidings.logic.catalog_documents import TypeSpec, read_document
from tidings.logic.errors import Conflict, InvalidInput, NotFound, PayloadMismatch
from tidings.logic.operational import refuse_operational
from tidings.logic.payload_schemas import (
    canonical_json,
    check_schema,
    compile_schema,
    first_failure,
    schema_digest,
)
from tidings.logic.validation import (
    check_id,
    check_limit,
    clean_text,
    decode_cursor,
    encode_cursor,
    payload_json,
)

NAME_PATTERN = r"^[A-Za-z0-9._:~-]{1,200}$"
_NAME = re.compile(NAME_PATTERN)
MAX_DESCRIPTION = 2000
MAX_EXAMPLES = 20
# A schema's JSON text, at most.
MAX_SCHEMA_BYTES = 256 * 1024
MAX_VERSION = 2**31 - 1
EDITABLE = ("description", "schema", "examples", "deprecated", "archived", "validate_payloads")


# "schema" names a method of pydantic's models: the field is schema_, named schema in JSON.
_SCHEMA_FIELD = ConfigDict(populate_by_name=True, serialize_by_alias=True)


class EventType(BaseModel):
    model_config = _SCHEMA_FIELD

    name: str
    description: str
    # None: the type has no schema (its payloads are not described, never validated).
    schema_: Any = Field(alias="schema")
    examples: list[Any]
    deprecated: bool
    archived: bool
    validate_payloads: bool
    # The version of the schema and examples shown; every change of either adds one.
    version: int
    created_at: datetime
    updated_at: datetime


class EventTypePage(BaseModel):
    items: list[EventType]
    next_cursor: str | None


class EventTypeVersion(BaseModel):
    model_config = _SCHEMA_FIELD

    name: str
    version: int
    schema_: Any = Field(alias="schema")
    examples: list[Any]
    created_at: datetime


class ImportResult(BaseModel):
    created: list[str]
    updated: list[str]
    unchanged: list[str]


def check_name(value: Any, field: str = "name") -> str:
    """``value`` if it can name a catalog entry."""
    if not isinstance(value, str):
        raise InvalidInput("invalid_type", f"{field} must be a string", field)
    if not _NAME.fullmatch(value):
        raise InvalidInput(
            "invalid_value",
            f"{field} must be 1 to 200 letters, digits or . _ : ~ - (a catalogued event type is "
            "addressed in URL paths)",
            field,
        )
    return value


def create_event_type(
    db: Database, fields: Mapping[str, Any], *, settings: Settings | None = None
) -> EventType:
    """A new catalog entry (409 when its name is taken)."""
    name = check_name(fields.get("name"))
    entry = _entry(name, {**_DEFAULTS, **fields}, settings or get_settings())

    def create(cur: Cursor) -> dict[str, Any]:
        if not dal.insert_event_type(cur, entry):
            raise Conflict(
                "event_type_exists", f"event type {name} is in the catalog already", "name"
            )
        return _found(dal.get_event_type(cur, name), name)

    return _event_type(db.run(create, transaction=True))


def update_event_type(
    db: Database, name: str, changes: Mapping[str, Any], *, settings: Settings | None = None
) -> EventType:
    """Change some fields of an entry; a changed schema or examples make a new version."""
    check_name(name)
    unknown = sorted(set(changes) - set(EDITABLE))
    if unknown:
        raise InvalidInput("unknown_field", f"{unknown[0]} cannot be changed", unknown[0])
    cfg = settings or get_settings()

    def update(cur: Cursor) -> dict[str, Any]:
        current = _found(dal.lock_event_type(cur, name), name)
        merged = {**_stored(current), **changes}
        entry = _entry(name, merged, cfg)
        if _version_differs(entry, current):
            dal.add_version(cur, current["id"], entry)
        dal.update_event_type(cur, current["id"], entry)
        return _found(dal.get_event_type(cur, name), name)

    return _event_type(db.run(update, transaction=True))


def get_event_type(db: Database, name: str) -> EventType:
    check_name(name)
    return _event_type(_found(db.run(lambda cur: dal.get_event_type(cur, name)), name))


def list_event_types(
    db: Database, *, cursor: str | None = None, limit: int = 50, include_archived: bool = False
) -> EventTypePage:
    """The catalog in the order entries were made; archived entries only when asked for."""
    check_limit(limit)
    after_id = None if cursor is None else decode_cursor(cursor)
    rows = db.run(
        lambda cur: dal.list_event_types(
            cur, after_id=after_id, limit=limit, include_archived=include_archived
        )
    )
    shown = rows[:limit]
    items = [_event_type(row) for row in shown]
    more = len(rows) > limit
    return EventTypePage(items=items, next_cursor=encode_cursor(shown[-1]["id"]) if more else None)


def every_event_type(db: Database) -> list[EventType]:
    """The whole catalog, archived entries included."""
    found: list[EventType] = []
    cursor: str | None = None
    while True:
        page = list_event_types(db, cursor=cursor, limit=100, include_archived=True)
        found.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return found


def get_version(db: Database, name: str, version: int) -> EventTypeVersion:
    check_name(name)
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= MAX_VERSION:
        raise InvalidInput("invalid_value", "version must be a positive integer", "version")
    row = db.run(lambda cur: dal.get_version(cur, name, version))
    if row is None:
        raise NotFound("event_type_version", f"{name} version {version}")
    return EventTypeVersion(
        name=row["name"],
        version=row["version"],
        schema=_json_or_none(row["schema"]),
        examples=json.loads(row["examples"]),
        created_at=row["created_at"],
    )


def import_document(
    db: Database, document: Any, *, settings: Settings | None = None
) -> ImportResult:
    """The event types of an OpenAPI 3.1 document's ``webhooks`` into the catalog, in one
    transaction: new names are created, others changed where they differ (a changed schema or
    examples is a new version), nothing else touched. One refused type refuses them all."""
    specs = read_document(document)
    cfg = settings or get_settings()
    entries = [_entry(_imported_name(s.name), _from_spec(s), cfg, f"{s.name}: ") for s in specs]

    def apply(cur: Cursor) -> ImportResult:
        result = ImportResult(created=[], updated=[], unchanged=[])
        for entry in entries:
            current = dal.lock_event_type(cur, entry.name)
            if current is None:
                if not dal.insert_event_type(cur, entry):
                    raise Conflict(
                        "event_type_exists", f"event type {entry.name} was created meanwhile"
                    )
                result.created.append(entry.name)
                continue
            new_version = _version_differs(entry, current)
            plain_change = any(
                getattr(entry, f) != current[f]
                for f in ("description", "deprecated", "archived", "validate_payloads")
            )
            if new_version:
                dal.add_version(cur, current["id"], entry)
            if new_version or plain_change:
                dal.update_event_type(cur, current["id"], entry)
                result.updated.append(entry.name)
            else:
                result.unchanged.append(entry.name)
        return result

    return db.run(apply, transaction=True)


def send_example(
    db: Database,
    endpoint_id: int,
    event_type: Any,
    *,
    app_id: int,
    application: str | None,
    settings: Settings | None = None,
) -> tuple[str, str, int]:
    """Send the type's first example to one endpoint of the application, as a real message
    marked as an example: (event type, event id, message id). ``application`` is its uid
    (None: the default application)."""
    check_id(endpoint_id, "endpoint_id")
    name = check_name(event_type, "event_type")
    cfg = settings or get_settings()
    # Its events are Tidings' own, as for any event sent to it.
    refuse_operational(application, cfg.operational_application, "be sent examples")

    def send(cur: Cursor) -> tuple[str, int]:
        endpoint = endpoints_dal.get_endpoint(cur, app_id, endpoint_id)
        if endpoint is None:
            raise NotFound("endpoint", endpoint_id)
        if not endpoint["enabled"]:
            raise Conflict(
                "endpoint_disabled",
                f"endpoint {endpoint_id} is disabled: enable it to send it an example",
            )
        entry = dal.get_event_type(cur, name)
        if entry is None:
            raise NotFound("event_type", name)
        examples = json.loads(entry["examples"])
        if not examples:
            raise InvalidInput(
                "no_example",
                f"event type {name} has no example: add one (examples) to send it",
                "event_type",
            )
        event_id = f"example-{uuid.uuid4()}"
        text = payload_json(examples[0], "examples[0]", max_bytes=cfg.max_payload_bytes)
        new = ingest_dal.NewEvent(name, text, event_id, [endpoint_id])
        outcome = ingest_dal.enqueue_event(cur, new, application=application)
        if outcome.event_ref is None or not outcome.message_ids:
            raise RuntimeError(f"the example event for endpoint {endpoint_id} made no message")
        dal.mark_example_event(cur, outcome.event_ref)
        return event_id, outcome.message_ids[0]

    event_id, message_id = db.run(send, transaction=True)
    return name, event_id, message_id


_DEFAULTS: Mapping[str, Any] = {
    "description": "",
    "schema": None,
    "examples": [],
    "deprecated": False,
    "archived": False,
    "validate_payloads": False,
}


def _imported_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            "invalid_value",
            f"webhooks: event type {name[:200]!r} cannot be catalogued: a name is 1 to 200 "
            "letters, digits or . _ : ~ - (name it with x-tidings-event-type)",
            "webhooks",
        )
    return name


def _from_spec(spec: TypeSpec) -> dict[str, Any]:
    return {
        "description": spec.description,
        "schema": spec.schema,
        "examples": spec.examples,
        "deprecated": spec.deprecated,
        "archived": spec.archived,
        "validate_payloads": spec.validate_payloads,
    }


def _entry(
    name: str, fields: Mapping[str, Any], settings: Settings, where: str = ""
) -> dal.CatalogEntry:
    """The entry ``fields`` describe, checked whole: the schema against the meta-schema, each
    example against the schema."""
    description = clean_text(
        fields["description"], f"{where}description", max_length=MAX_DESCRIPTION, allow_empty=True
    )
    flags = {}
    for flag in ("deprecated", "archived", "validate_payloads"):
        if not isinstance(fields[flag], bool):
            raise InvalidInput("invalid_type", f"{where}{flag} must be true or false", flag)
        flags[flag] = fields[flag]
    schema = fields["schema"]
    schema_text = None
    if schema is not None:
        # Its size first: the meta-schema check reads the whole schema.
        schema_text = payload_json(schema, f"{where}schema", max_bytes=MAX_SCHEMA_BYTES)
        check_schema(schema, f"{where}schema")
    elif flags["validate_payloads"]:
        raise InvalidInput(
            "invalid_value",
            f"{where}validate_payloads needs a schema to validate payloads against",
            "validate_payloads",
        )
    examples = fields["examples"]
    if not isinstance(examples, list):
        raise InvalidInput("invalid_type", f"{where}examples must be a list", "examples")
    if len(examples) > MAX_EXAMPLES:
        raise InvalidInput(
            "invalid_value", f"{where}examples holds more than {MAX_EXAMPLES}", "examples"
        )
    for index, example in enumerate(examples):
        payload_json(example, f"{where}examples[{index}]", max_bytes=settings.max_payload_bytes)
    if schema is not None and examples:
        _check_examples(schema, examples, where)
    return dal.CatalogEntry(
        name=name,
        description=description,
        schema_json=schema_text,
        schema_digest=None if schema is None else schema_digest(schema),
        examples_json=canonical_json(examples),
        **flags,
    )


def _check_examples(schema: Any, examples: Sequence[Any], where: str) -> None:
    validator = compile_schema(schema)
    for index, example in enumerate(examples):
        failure = first_failure(validator, example)
        if failure is not None:
            field = f"examples[{index}]"
            at = failure.pointer or "the example itself"
            raise PayloadMismatch(
                "example_does_not_match_schema",
                f"{where}{field} does not match the schema: at {at}, keyword {failure.keyword}: "
                f"{failure.message}",
                field,
                failure.pointer,
                failure.keyword,
            )


def _version_differs(entry: dal.CatalogEntry, current: Mapping[str, Any]) -> bool:
    stored_schema = _json_or_none(current["schema"])
    stored_examples = json.loads(current["examples"])
    new_schema = None if entry.schema_json is None else json.loads(entry.schema_json)
    return canonical_json(new_schema) != canonical_json(stored_schema) or (
        entry.examples_json != canonical_json(stored_examples)
    )


def _stored(row: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "description": row["description"],
        "schema": _json_or_none(row["schema"]),
        "examples": json.loads(row["examples"]),
        "deprecated": row["deprecated"],
        "archived": row["archived"],
        "validate_payloads": row["validate_payloads"],
    }


def _found(row: dict[str, Any] | None, name: str) -> dict[str, Any]:
    if row is None:
        raise NotFound("event_type", name)
    return row


def _json_or_none(text: str | None) -> Any:
    return None if text is None else json.loads(text)


def _event_type(row: Mapping[str, Any]) -> EventType:
    return EventType(
        name=row["name"],
        description=row["description"],
        schema=_json_or_none(row["schema"]),
        examples=json.loads(row["examples"]),
        deprecated=row["deprecated"],
        archived=row["archived"],
        validate_payloads=row["validate_payloads"],
        version=row["version"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
