"""Validation on ingest: the payloads of event types whose catalog entry says
``validate_payloads`` must match the entry's current schema.

One look-up per request, in the transaction that records the events, names the checked types
among those sent and the digest of each one's schema; a validator is compiled once per digest
and kept (``payload_schemas.ValidatorCache``), so the schema itself is read only the first time
an instance meets it. Because the digest comes with every look-up, a schema changed through one
API instance is used by every other at once. A payload that does not match raises, before
anything is written: the request (a whole batch) records nothing.

The producers' SQL path (``tidings.enqueue``, ``tidings.enqueue_batch``) does not validate:
PostgreSQL has no JSON Schema validator, and a second implementation of draft 2020-12 in PL/pgSQL
could not be held equal to this one (docs/DESIGN.md, "The event-type catalog").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.dal import event_types as dal
from tidings.dal.connection import Cursor
from tidings.logic.errors import PayloadMismatch
from tidings.logic.payload_schemas import ValidatorCache, first_failure

_VALIDATORS = ValidatorCache()


@dataclass(frozen=True, slots=True)
class SentPayload:
    event_type: str
    payload: Any
    # The request field of the payload (payload, events[3].payload).
    field: str


def check_payloads(cur: Cursor, sent: Sequence[SentPayload]) -> None:
    """Refuse (422) the first payload of a checked type that does not match its schema."""
    if not sent:
        return
    checked = {c.name: c for c in dal.payload_validators(cur, sorted({s.event_type for s in sent}))}
    if not checked:
        return
    for item in sent:
        entry = checked.get(item.event_type)
        if entry is None:
            continue
        validator = _VALIDATORS.get(entry.schema_digest, _loader(cur, entry))
        failure = first_failure(validator, item.payload)
        if failure is not None:
            where = failure.pointer or "the payload itself"
            raise PayloadMismatch(
                "payload_does_not_match_schema",
                f"{item.field} does not match the schema of event type {entry.name} "
                f"(version {entry.version}): at {where}, keyword {failure.keyword}: "
                f"{failure.message}",
                item.field,
                failure.pointer,
                failure.keyword,
            )


def _loader(cur: Cursor, entry: dal.CheckedType) -> Callable[[], Any]:
    """What reads the schema of ``entry``'s version, when no validator of its digest is kept."""

    def load() -> Any:
        text = dal.event_type_schema(cur, entry.name, entry.version)
        if text is None:
            raise RuntimeError(f"event type {entry.name} version {entry.version} has no schema")
        return json.loads(text)

    return load
