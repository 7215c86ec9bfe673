"""Operational events: what Tidings tells the producer's own systems about endpoints and messages.

They are events of one application, the deployment's operational application
(``TIDINGS_OPERATIONAL_APPLICATION``), delivered to the endpoints subscribed there like any
other event. The database writes them, each in the transaction of the change it reports
(``tidings.emit_lifecycle_v1``, migration 0120): this module names them and holds the
JSON Schema of each payload (``operational_events/<type>.json``), which a catalog of event types
can load.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from tidings.logic.errors import Conflict

EVENT_TYPES: tuple[str, ...] = (
    "endpoint.created",
    "endpoint.updated",
    "endpoint.deleted",
    "endpoint.enabled",
    "endpoint.disabled",
    "endpoint.failing",
    "endpoint.recovered",
    "endpoint.secret.rotated",
    "endpoint.certificate.expiring",
    "message.attempt.failing",
    "message.attempt.exhausted",
)


@cache
def payload_schema(event_type: str) -> dict[str, Any]:
    """The JSON Schema of an operational event type's payload."""
    if event_type not in EVENT_TYPES:
        raise KeyError(event_type)
    text = (
        resources.files("tidings.logic")
        .joinpath("operational_events", f"{event_type}.json")
        .read_text(encoding="utf-8")
    )
    schema: dict[str, Any] = json.loads(text)
    return schema


def refuse_operational(application: str | None, operational: str, what: str) -> None:
    """Refuse ``what`` on the operational application (uid ``operational``): its events are
    written by Tidings alone, and it cannot be deleted."""
    if application == operational:
        raise Conflict(
            "operational_application",
            f"the operational application {operational} cannot {what}",
            "application",
        )
