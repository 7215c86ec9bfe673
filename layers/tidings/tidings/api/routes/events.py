"""``/events`` and ``/events/batch``: a producer's events, in an application."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body

from tidings import wiring
from tidings.api.models import BatchResult, EventBatch, SendEvent, SendResult
from tidings.api.routes.common import errors, json_response, ok, router
from tidings.api.scoping import AppScope, Link, app_routes
from tidings.logic import applications, events
from tidings.logic.access import Action


def _to_first_message(pointer: str) -> dict[str, Link]:
    """Links from an answer to the first message it names (at ``pointer``)."""
    return {
        "GetFirstMessage": Link(
            "get_message", {"message_id": pointer}, "The first message the event made"
        ),
        "ResendFirstMessage": Link(
            "resend_message", {"message_id": pointer}, "Deliver that message again"
        ),
    }


_SENT = _to_first_message("$response.body#/message_ids/0")
_BATCH_SENT = _to_first_message("$response.body#/results/0/message_ids/0")


@app_routes(
    router,
    "POST",
    "/events",
    action=Action.SEND_EVENTS,
    summary="Send one event to the application's subscribed (or named) endpoints",
    responses={
        **ok(202, SendResult, "Created: the new message ids"),
        **ok(200, SendResult, "A repeated event_id: the original message ids, nothing created"),
        **errors(404, 409, body=True),
    },
    links={202: _SENT, 200: _SENT},
    tags=["events"],
)
def send_event(app: AppScope, event: Annotated[SendEvent, Body()]) -> Response[SendResult]:
    result = events.send_event(
        wiring.database(),
        event_type=event.event_type,
        payload=event.payload,
        event_id=event.event_id,
        endpoint_ids=event.endpoint_ids,
        channels=event.channels,
        ordering_key=event.ordering_key,
        settings=wiring.settings(),
        application=None if app.id == applications.DEFAULT_APP_ID else app.uid,
    )
    return json_response(202 if result.created else 200, result)


@app_routes(
    router,
    "POST",
    "/events/batch",
    action=Action.SEND_EVENTS,
    summary="Send up to 100 events in one transaction: all are accepted or none",
    responses={
        **ok(202, BatchResult, "At least one event was created"),
        **ok(200, BatchResult, "Every event was a repeat: nothing created"),
        **errors(404, 409, body=True),
    },
    links={202: _BATCH_SENT, 200: _BATCH_SENT},
    tags=["events"],
)
def send_events(app: AppScope, batch: Annotated[EventBatch, Body()]) -> Response[BatchResult]:
    specs = [
        events.EventSpec(
            e.event_type, e.payload, e.event_id, e.endpoint_ids, e.channels, e.ordering_key
        )
        for e in batch.events
    ]
    results = events.send_events(
        wiring.database(),
        specs,
        settings=wiring.settings(),
        application=None if app.id == applications.DEFAULT_APP_ID else app.uid,
    )
    created = any(r.created for r in results)
    return json_response(202 if created else 200, BatchResult(results=results))
