"""``/v1/event-types``: the deployment's event-type catalog (every token reads it, admin tokens
change it), and ``/endpoints/{id}/send-example``, which sends a catalogued type's first example
to one of an application's endpoints."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from tidings import wiring
from tidings.api.models import (
    CatalogDocument,
    CreateEventType,
    EventType,
    EventTypePage,
    EventTypeVersion,
    ImportResult,
    SendExample,
    SendResult,
    UpdateEventType,
)
from tidings.api.routes.common import (
    Cursor,
    EndpointIdPath,
    Limit,
    errors,
    json_response,
    ok,
    router,
)
from tidings.api.scoping import AppScope, Link, app_routes, principal, route
from tidings.logic import access, applications, event_types
from tidings.logic.access import Action
from tidings.logic.events import SendResult as SentEvent

NamePath = Annotated[
    str,
    Path(
        pattern=event_types.NAME_PATTERN,
        description="the event type's name",
        examples=["invoice.paid"],
    ),
]
VersionPath = Annotated[
    int, Path(ge=1, le=event_types.MAX_VERSION, description="a version of its schema")
]
IncludeArchived = Annotated[
    bool, Query(description="list archived types too (the portal never shows them)")
]


def _to_event_type(pointer: str) -> dict[str, Link]:
    name = {"name": pointer}
    return {
        "GetEventType": Link("get_event_type", name, "The event type", in_application=False),
        "UpdateEventType": Link("update_event_type", name, "Change it", in_application=False),
    }


@route(
    router,
    "POST",
    "/v1/event-types",
    summary="Add an event type to the catalog: its description, JSON Schema and examples",
    responses={**ok(201, EventType, "Created, as version 1"), **errors(403, 409, body=True)},
    links={201: _to_event_type("$response.body#/name")},
    tags=["event types"],
)
def create_event_type(body: Annotated[CreateEventType, Body()]) -> Response[EventType]:
    access.require(principal(router), Action.MANAGE_EVENT_TYPES)
    created = event_types.create_event_type(
        wiring.database(), body.model_dump(by_alias=True), settings=wiring.settings()
    )
    return json_response(201, created)


@route(
    router,
    "GET",
    "/v1/event-types",
    summary="The catalog, in the order types were added (archived ones when asked for)",
    responses={**ok(200, EventTypePage, "A page of event types"), **errors(403)},
    tags=["event types"],
)
def list_event_types(
    cursor: Cursor = None, limit: Limit = 50, include_archived: IncludeArchived = False
) -> EventTypePage:
    access.require(principal(router), Action.READ_EVENT_TYPES)
    return event_types.list_event_types(
        wiring.database(), cursor=cursor, limit=limit, include_archived=include_archived
    )


@route(
    router,
    "POST",
    "/v1/event-types/import",
    summary="Add or change the event types of an OpenAPI 3.1 document's webhooks (one per "
    "operation), all or none",
    responses={
        **ok(200, ImportResult, "What was created, changed or left"),
        **errors(403, 409, body=True),
    },
    tags=["event types"],
)
def import_event_types(body: Annotated[CatalogDocument, Body()]) -> ImportResult:
    access.require(principal(router), Action.MANAGE_EVENT_TYPES)
    document: dict[str, Any] = body.model_dump()
    return event_types.import_document(wiring.database(), document, settings=wiring.settings())


@route(
    router,
    "GET",
    "/v1/event-types/<name>",
    summary="One event type with its current schema and examples",
    responses={**ok(200, EventType, "The event type"), **errors(403, 404)},
    tags=["event types"],
)
def get_event_type(name: NamePath) -> EventType:
    access.require(principal(router), Action.READ_EVENT_TYPES)
    return event_types.get_event_type(wiring.database(), name)


@route(
    router,
    "PATCH",
    "/v1/event-types/<name>",
    summary="Change some fields of an event type (archived: true archives it); a new schema or "
    "new examples make a new version",
    responses={**ok(200, EventType, "The changed event type"), **errors(403, 404, body=True)},
    tags=["event types"],
)
def update_event_type(name: NamePath, body: Annotated[UpdateEventType, Body()]) -> EventType:
    access.require(principal(router), Action.MANAGE_EVENT_TYPES)
    return event_types.update_event_type(
        wiring.database(),
        name,
        body.model_dump(exclude_unset=True, by_alias=True),
        settings=wiring.settings(),
    )


@route(
    router,
    "GET",
    "/v1/event-types/<name>/versions/<version>",
    summary="One version of an event type's schema and examples (every earlier one is kept)",
    responses={**ok(200, EventTypeVersion, "That version"), **errors(403, 404)},
    tags=["event types"],
)
def get_event_type_version(name: NamePath, version: VersionPath) -> EventTypeVersion:
    access.require(principal(router), Action.READ_EVENT_TYPES)
    return event_types.get_version(wiring.database(), name, version)


@app_routes(
    router,
    "POST",
    "/endpoints/<endpoint_id>/send-example",
    action=Action.SEND_EXAMPLES,
    summary="Send the event type's first example to the endpoint, as a real, signed message "
    "marked as an example",
    responses={
        **ok(202, SendResult, "Sent: the new message's id"),
        **errors(403, 404, 409, body=True),
    },
    links={
        202: {
            "GetExampleMessage": Link(
                "get_message", {"message_id": "$response.body#/message_ids/0"}, "The message"
            )
        }
    },
    tags=["endpoints"],
)
def send_example(
    app: AppScope, endpoint_id: EndpointIdPath, body: Annotated[SendExample, Body()]
) -> Response[SendResult]:
    event_type, event_id, message_id = event_types.send_example(
        wiring.database(),
        endpoint_id,
        body.event_type,
        app_id=app.id,
        application=None if app.id == applications.DEFAULT_APP_ID else app.uid,
        settings=wiring.settings(),
    )
    sent = SentEvent(
        event_type=event_type, event_id=event_id, created=True, message_ids=[message_id]
    )
    return json_response(202, sent)
