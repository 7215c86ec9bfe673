"""The routes: each parses its request, calls one use case, and shapes the answer."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from tidings import wiring
from tidings.api.models import (
    BatchResult,
    CreatedEndpoint,
    CreateEndpoint,
    Endpoint,
    EndpointHealth,
    EndpointPage,
    ErrorBody,
    EventBatch,
    MessageDetail,
    MessagePage,
    MessageStatus,
    ReplayRequest,
    ReplayResult,
    RotatedSecret,
    SendEvent,
    SendResult,
    UpdateEndpoint,
)
from tidings.logic import endpoints, events, messages, replay

router = Router()  # type: ignore[no-untyped-call]

JSON = "application/json"
MAX_ID = 2**63 - 1
EndpointIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="endpoint id")]
MessageIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="message id")]
Limit = Annotated[int, Query(ge=1, le=100, description="page size")]
Cursor = Annotated[str | None, Query(max_length=200, description="next_cursor of the last page")]


def _errors(*codes: int) -> dict[int, Any]:
    """The documented error answers: ``codes`` plus those any route can give."""
    reasons = {
        400: "The request body is not JSON or not UTF-8",
        404: "Not found",
        409: "Conflicts with the stored state",
        413: "A payload or the request is too large",
        422: "A field is missing, of the wrong type or not acceptable",
        503: (
            "The database, or the key that encrypts signing secrets, is busy or unreachable: "
            "send it again (safe with an event_id)"
        ),
    }
    return {
        code: {"description": reasons[code], "content": {JSON: {"model": ErrorBody}}}
        for code in sorted({400, 413, 422, 503, *codes})
    }


def _ok(code: int, model: type, description: str) -> dict[int, Any]:
    return {code: {"description": description, "content": {JSON: {"model": model}}}}


def _json(status: int, body: Any) -> Response[Any]:
    return Response(status_code=status, content_type=JSON, body=body.model_dump(mode="json"))


@router.post(
    "/v1/events",
    summary="Send one event to its subscribed (or named) endpoints",
    responses={
        **_ok(202, SendResult, "Created: the new message ids"),
        **_ok(200, SendResult, "A repeated event_id: the original message ids, nothing created"),
        **_errors(409),
    },
    tags=["events"],
)
def send_event(event: Annotated[SendEvent, Body()]) -> Response[SendResult]:
    result = events.send_event(
        wiring.database(),
        event_type=event.event_type,
        payload=event.payload,
        event_id=event.event_id,
        endpoint_ids=event.endpoint_ids,
        settings=wiring.settings(),
    )
    return _json(202 if result.created else 200, result)


@router.post(
    "/v1/events/batch",
    summary="Send up to 100 events in one transaction: all are accepted or none",
    responses={
        **_ok(202, BatchResult, "At least one event was created"),
        **_ok(200, BatchResult, "Every event was a repeat: nothing created"),
        **_errors(409),
    },
    tags=["events"],
)
def send_events(batch: Annotated[EventBatch, Body()]) -> Response[BatchResult]:
    specs = [
        events.EventSpec(e.event_type, e.payload, e.event_id, e.endpoint_ids) for e in batch.events
    ]
    results = events.send_events(wiring.database(), specs, settings=wiring.settings())
    created = any(r.created for r in results)
    return _json(202 if created else 200, BatchResult(results=results))


@router.get(
    "/v1/messages/<message_id>",
    summary="One message with its payload and attempt history",
    responses={**_ok(200, MessageDetail, "The message"), **_errors(404)},
    tags=["messages"],
)
def get_message(message_id: MessageIdPath) -> MessageDetail:
    return messages.get_message(wiring.database(), message_id)


@router.get(
    "/v1/messages",
    summary="Messages, newest first, filtered by status, endpoint and event type",
    responses={**_ok(200, MessagePage, "A page of messages"), **_errors()},
    tags=["messages"],
)
def list_messages(
    status: Annotated[MessageStatus | None, Query()] = None,
    endpoint_id: Annotated[int | None, Query(ge=1, le=MAX_ID)] = None,
    event_type: Annotated[str | None, Query(min_length=1, max_length=200)] = None,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> MessagePage:
    return messages.list_messages(
        wiring.database(),
        status=status,
        endpoint_id=endpoint_id,
        event_type=event_type,
        cursor=cursor,
        limit=limit,
    )


@router.post(
    "/v1/endpoints",
    summary="Create an endpoint; its signing secret is in this answer only",
    responses={**_ok(201, CreatedEndpoint, "Created"), **_errors(409)},
    tags=["endpoints"],
)
def create_endpoint(body: Annotated[CreateEndpoint, Body()]) -> Response[CreatedEndpoint]:
    created = endpoints.create_endpoint(
        wiring.database(),
        keyring=wiring.keyring(),
        url=body.url,
        description=body.description,
        event_types=body.event_types,
        max_attempts=body.max_attempts,
        timeout_ms=body.timeout_ms,
        rate_limit_per_s=body.rate_limit_per_s,
        settings=wiring.settings(),
    )
    return _json(201, created)


@router.get(
    "/v1/endpoints",
    summary="Endpoints by ascending id",
    responses={**_ok(200, EndpointPage, "A page of endpoints"), **_errors()},
    tags=["endpoints"],
)
def list_endpoints(cursor: Cursor = None, limit: Limit = 50) -> EndpointPage:
    return endpoints.list_endpoints(wiring.database(), cursor=cursor, limit=limit)


@router.get(
    "/v1/endpoints/<endpoint_id>",
    summary="One endpoint (never its secret)",
    responses={**_ok(200, Endpoint, "The endpoint"), **_errors(404)},
    tags=["endpoints"],
)
def get_endpoint(endpoint_id: EndpointIdPath) -> Endpoint:
    return endpoints.get_endpoint(wiring.database(), endpoint_id)


@router.patch(
    "/v1/endpoints/<endpoint_id>",
    summary="Change some fields of an endpoint",
    responses={**_ok(200, Endpoint, "The changed endpoint"), **_errors(404, 409)},
    tags=["endpoints"],
)
def update_endpoint(
    endpoint_id: EndpointIdPath, body: Annotated[UpdateEndpoint, Body()]
) -> Endpoint:
    return endpoints.update_endpoint(
        wiring.database(),
        endpoint_id,
        body.model_dump(exclude_unset=True),
        settings=wiring.settings(),
    )


@router.delete(
    "/v1/endpoints/<endpoint_id>",
    summary="Delete an endpoint (its messages and attempts are kept)",
    responses={204: {"description": "Deleted"}, **_errors(404)},
    tags=["endpoints"],
)
def delete_endpoint(endpoint_id: EndpointIdPath) -> Response[None]:
    endpoints.delete_endpoint(wiring.database(), endpoint_id)
    return Response(status_code=204)


@router.post(
    "/v1/endpoints/<endpoint_id>/rotate-secret",
    summary="A new signing secret; earlier ones keep signing for their overlap (24 h, 5 at most)",
    responses={**_ok(200, RotatedSecret, "The new secret, shown once"), **_errors(404)},
    tags=["endpoints"],
)
def rotate_secret(endpoint_id: EndpointIdPath) -> RotatedSecret:
    return endpoints.rotate_secret(
        wiring.database(), endpoint_id, keyring=wiring.keyring(), settings=wiring.settings()
    )


@router.get(
    "/v1/endpoints/<endpoint_id>/health",
    summary="Circuit state, consecutive failures, latency percentiles and message counts",
    responses={**_ok(200, EndpointHealth, "The endpoint's health"), **_errors(404)},
    tags=["endpoints"],
)
def endpoint_health(endpoint_id: EndpointIdPath) -> EndpointHealth:
    return endpoints.endpoint_health(wiring.database(), endpoint_id)


@router.post(
    "/v1/dead-letters/replay",
    summary="Requeue dead letters by message ids, endpoint or time range, keeping their history",
    responses={**_ok(200, ReplayResult, "How many were requeued"), **_errors()},
    tags=["dead letters"],
)
def replay_dead_letters(body: Annotated[ReplayRequest, Body()]) -> ReplayResult:
    return replay.replay_dead_letters(
        wiring.database(),
        message_ids=body.message_ids,
        endpoint_id=body.endpoint_id,
        since=body.since,
        until=body.until,
    )
