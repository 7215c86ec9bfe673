"""Application use cases: create, read, page, change, delete, and find the one a request names.

An application is a tenant: one customer of the producer's, with its own endpoints. Requests
name it by its uid or its id; ``visible`` answers only what the caller's token may see.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from tidings.config import Settings, get_settings
from tidings.dal import applications as dal
from tidings.dal.applications import DEFAULT_APP_ID, DEFAULT_APP_UID
from tidings.dal.connection import Database
from tidings.logic.access import Principal, sees
from tidings.logic.errors import Conflict, InvalidInput, NotFound
from tidings.logic.operational import refuse_operational
from tidings.logic.validation import (
    check_limit,
    check_payload_format,
    clean_text,
    decode_cursor,
    encode_cursor,
    text_problem,
)

__all__ = [
    "DEFAULT_APP_ID",
    "DEFAULT_APP_UID",
    "Application",
    "ApplicationPage",
    "create_application",
    "delete_application",
    "find",
    "list_applications",
    "update_application",
    "visible",
]

# What migration 0040 allows: the producer's own id for its customer.
UID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$"
_UID = re.compile(UID_PATTERN)
MAX_NAME = 200
MAX_METADATA_ENTRIES = 50
MAX_METADATA_KEY = 100
MAX_METADATA_VALUE = 1000


class Application(BaseModel):
    id: int
    uid: str
    name: str
    metadata: dict[str, str]
    default_payload_format: str | None = Field(
        description="What the application's new endpoints receive as the body when they do not "
        "say (raw or envelope); null: the deployment's default"
    )
    created_at: datetime
    updated_at: datetime


class ApplicationPage(BaseModel):
    items: list[Application]
    next_cursor: str | None


class DeletedApplication(BaseModel):
    id: int
    uid: str
    endpoints_disabled: int
    messages_dead_lettered: int


def check_uid(uid: Any, field: str = "uid") -> str:
    if not isinstance(uid, str):
        raise InvalidInput("invalid_type", f"{field} must be a string", field)
    if not _UID.fullmatch(uid):
        raise InvalidInput(
            "invalid_value",
            f"{field} must be 1 to 200 letters, digits and . _ : -, "
            "starting with a letter or digit",
            field,
        )
    return uid


def check_metadata(metadata: Any) -> dict[str, str]:
    if not isinstance(metadata, Mapping):
        raise InvalidInput("invalid_type", "metadata must be an object of strings", "metadata")
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise InvalidInput(
            "invalid_value", f"metadata holds more than {MAX_METADATA_ENTRIES} keys", "metadata"
        )
    checked: dict[str, str] = {}
    for key, value in metadata.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidInput("invalid_type", "metadata must be an object of strings", "metadata")
        if not key or len(key) > MAX_METADATA_KEY or len(value) > MAX_METADATA_VALUE:
            raise InvalidInput(
                "invalid_value",
                f"metadata keys are 1 to {MAX_METADATA_KEY} characters, values at most "
                f"{MAX_METADATA_VALUE}",
                "metadata",
            )
        problem = text_problem(key) or text_problem(value)
        if problem:
            raise InvalidInput("invalid_value", f"metadata {problem}", "metadata")
        checked[key] = value
    return checked


def create_application(
    db: Database,
    *,
    uid: str,
    name: str = "",
    metadata: Mapping[str, str] | None = None,
    default_payload_format: str | None = None,
) -> Application:
    """A new application; its uid must not be taken (also by a deleted application). Its new
    endpoints receive ``default_payload_format`` unless they say otherwise (None: the
    deployment's)."""
    uid = check_uid(uid)
    name = clean_text(name, "name", max_length=MAX_NAME, allow_empty=True)
    checked = check_metadata(metadata or {})
    fmt = _optional_format(default_payload_format)
    row = db.run(
        lambda cur: dal.insert_application(
            cur, uid=uid, name=name, metadata=checked, default_payload_format=fmt
        ),
        transaction=True,
    )
    if row is None:
        raise Conflict("uid_taken", f"an application with uid {uid} exists (or existed)", "uid")
    return Application(**row)


def find(db: Database, ref: str) -> Application | None:
    """The live application named by ``ref`` (its uid, or its id in digits; a uid wins)."""
    if not isinstance(ref, str) or not ref or len(ref) > 200 or text_problem(ref):
        return None
    row = db.run(lambda cur: dal.find_application(cur, ref))
    return None if row is None else Application(**row)


def visible(db: Database, ref: str, principal: Principal) -> Application:
    """The application ``ref`` names, if the principal may see it; else NotFound, whether it
    does not exist or belongs to another application's token."""
    found = find(db, ref)
    if found is None or not sees(principal, found.id):
        raise NotFound("application", ref)
    return found


def list_applications(
    db: Database, *, cursor: str | None = None, limit: int = 50
) -> ApplicationPage:
    """Live applications by ascending id, ``limit`` (at most 100) at a time."""
    check_limit(limit)
    after_id = 0 if cursor is None else decode_cursor(cursor)
    rows = db.run(lambda cur: dal.list_applications(cur, after_id=after_id, limit=limit))
    items = [Application(**row) for row in rows[:limit]]
    more = len(rows) > limit
    return ApplicationPage(items=items, next_cursor=encode_cursor(items[-1].id) if more else None)


def update_application(
    db: Database,
    app: Application,
    *,
    name: str | None = None,
    metadata: Mapping[str, str] | None = None,
    changes: Mapping[str, Any] | None = None,
) -> Application:
    """Change the name and/or the metadata (replaced whole); the uid never changes. ``changes``
    may hold ``default_payload_format`` (None: back to the deployment's), the one field whose
    null is a value, not an absence; it changes what new endpoints get, never existing ones."""
    checked_name = (
        None if name is None else clean_text(name, "name", max_length=MAX_NAME, allow_empty=True)
    )
    checked_metadata = None if metadata is None else check_metadata(metadata)
    extra = dict(changes or {})
    unknown = sorted(set(extra) - {"default_payload_format"})
    if unknown:
        raise InvalidInput("unknown_field", f"{unknown[0]} cannot be changed", unknown[0])
    set_format = "default_payload_format" in extra
    fmt = _optional_format(extra.get("default_payload_format"))
    row = db.run(
        lambda cur: dal.update_application(
            cur,
            app.id,
            name=checked_name,
            metadata=checked_metadata,
            set_default_payload_format=set_format,
            default_payload_format=fmt,
        ),
        transaction=True,
    )
    if row is None:
        raise NotFound("application", app.uid)
    return Application(**row)


def delete_application(
    db: Database, app: Application, *, settings: Settings | None = None
) -> DeletedApplication:
    """Soft delete: the application disappears, its endpoints are disabled and their undelivered
    messages become dead letters; its rows stay as history. 'default' cannot be deleted, nor
    can the operational application (its events report on every other)."""
    if app.id == DEFAULT_APP_ID:
        raise Conflict(
            "default_application", "the default application cannot be deleted", "application"
        )
    refuse_operational(app.uid, (settings or get_settings()).operational_application, "be deleted")
    # The database names it too: a caller whose environment leaves the setting out (an
    # operator's CLI) must not delete the application the deployment reports into.
    named = db.run(dal.operational_application)
    if named is not None:
        refuse_operational(app.uid, named, "be deleted")
    # Two transactions, so that nothing a producer can hold stalls intake or starves a deletion
    # (see dal/queries/applications.sql): the first marks it deleted and disables its endpoints,
    # waiting for nobody, so that every later call refuses the application and nothing more is
    # delivered to it; the second waits for the calls that came before and dead-letters what
    # they queued. A connection lost during the first COMMIT is not retried (run twice after it
    # committed, the delete would answer 404). Should the second fail (a producer's transaction
    # outlasting the statement timeout), the health monitor dead-letters those messages.
    marked = db.run(lambda cur: dal.mark_application_deleted(cur, app.id), transaction=True)
    if marked is None:
        raise NotFound("application", app.uid)
    endpoints, messages = marked
    _, stragglers = db.run(lambda cur: dal.retire_application(cur, app.id), transaction=True)
    messages += stragglers
    return DeletedApplication(
        id=app.id, uid=app.uid, endpoints_disabled=endpoints, messages_dead_lettered=messages
    )


def _optional_format(value: Any) -> str | None:
    return None if value is None else check_payload_format(value, "default_payload_format")
