"""``/messages``: an application's messages (one per event and endpoint), their attempts, and
resending one."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Query

from tidings import wiring
from tidings.api.models import Message, MessageDetail, MessagePage, MessageStatus, Moment
from tidings.api.routes.common import (
    MAX_ID,
    Cursor,
    Limit,
    MessageIdPath,
    errors,
    json_response,
    ok,
    router,
)
from tidings.api.scoping import AppScope, Link, app_routes
from tidings.logic import messages, resend
from tidings.logic.access import Action

_TO_ITSELF = {
    "GetMessage": Link("get_message", {"message_id": "$response.body#/id"}, "The message"),
}


@app_routes(
    router,
    "GET",
    "/messages/<message_id>",
    action=Action.READ_MESSAGES,
    summary="One message with its payload and attempt history",
    responses={**ok(200, MessageDetail, "The message"), **errors(404)},
    links={
        200: {
            "ResendMessage": Link(
                "resend_message", {"message_id": "$response.body#/id"}, "Deliver it again"
            ),
            "GetEndpoint": Link(
                "get_endpoint",
                {"endpoint_id": "$response.body#/endpoint_id"},
                "The endpoint it is delivered to",
            ),
        }
    },
    tags=["messages"],
)
def get_message(app: AppScope, message_id: MessageIdPath) -> MessageDetail:
    return messages.get_message(
        wiring.database(), message_id, app_id=app.id, settings=wiring.settings()
    )


@app_routes(
    router,
    "POST",
    "/messages/<message_id>/resend",
    action=Action.REPLAY,
    summary="Deliver a delivered or dead-lettered message again: a fresh attempt budget, the "
    "same webhook-id, its history kept",
    responses={
        **ok(202, Message, "A new delivery started: the message, pending"),
        **errors(403, 404, 409),
    },
    links={202: _TO_ITSELF},
    tags=["messages"],
)
def resend_message(app: AppScope, message_id: MessageIdPath) -> Response[Message]:
    return json_response(202, resend.resend_message(wiring.database(), message_id, app_id=app.id))


@app_routes(
    router,
    "GET",
    "/messages",
    action=Action.READ_MESSAGES,
    summary="Messages, newest first, filtered by status, endpoint, event type and creation time",
    responses={**ok(200, MessagePage, "A page of messages"), **errors(404)},
    links={
        200: {
            "GetFirstMessage": Link(
                "get_message", {"message_id": "$response.body#/items/0/id"}, "The newest listed"
            )
        }
    },
    tags=["messages"],
)
def list_messages(
    app: AppScope,
    *,
    status: Annotated[MessageStatus | None, Query()] = None,
    endpoint_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    event_type: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    since: Annotated[Moment | None, Query(description="created at or after")] = None,
    until: Annotated[Moment | None, Query(description="created before")] = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> MessagePage:
    return messages.list_messages(
        wiring.database(),
        status=status,
        endpoint_id=endpoint_id,
        event_type=event_type,
        since=since,
        until=until,
        cursor=cursor,
        limit=limit,
        app_id=app.id,
    )
