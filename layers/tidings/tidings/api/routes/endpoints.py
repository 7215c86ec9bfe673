"""``/endpoints``: an application's endpoints, their signing secrets, health and recovery."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body

from tidings import wiring
from tidings.api.models import (
    CreatedEndpoint,
    CreateEndpoint,
    Endpoint,
    EndpointHealth,
    EndpointPage,
    RecoverRequest,
    RecoverResult,
    RevealedSecret,
    RotatedSecret,
    UpdateEndpoint,
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
from tidings.api.scoping import AppScope, Link, app_routes
from tidings.logic import endpoints, resend
from tidings.logic.access import Action

# A recovery stops starting batches after this long, within API Gateway's 29 s; the answer then
# says it is not complete, and the same request again carries on.
RECOVER_TIME_BUDGET_S = 20.0


def _to_endpoint(pointer: str) -> dict[str, Link]:
    """Links from an answer to what can be done with the endpoint whose id is at ``pointer``."""
    endpoint = {"endpoint_id": pointer}
    return {
        "GetEndpoint": Link("get_endpoint", endpoint, "The endpoint"),
        "UpdateEndpoint": Link("update_endpoint", endpoint, "Change it"),
        "DeleteEndpoint": Link("delete_endpoint", endpoint, "Delete it"),
        "RotateSecret": Link("rotate_secret", endpoint, "A new signing secret"),
        "RevealSecret": Link("reveal_secret", endpoint, "Its current signing secret"),
        "EndpointHealth": Link("endpoint_health", endpoint, "Its health"),
        "RecoverEndpoint": Link("recover_endpoint", endpoint, "Send its undelivered again"),
        "ListItsMessages": Link("list_messages", endpoint, "Its messages"),
        "ListItsLines": Link("list_lines", endpoint, "Its FIFO lines"),
    }


@app_routes(
    router,
    "POST",
    "/endpoints",
    action=Action.MANAGE_ENDPOINTS,
    summary="Create an endpoint; its signing secret is in this answer only",
    responses={**ok(201, CreatedEndpoint, "Created"), **errors(403, 404, 409, body=True)},
    links={201: _to_endpoint("$response.body#/id")},
    tags=["endpoints"],
)
def create_endpoint(
    app: AppScope, body: Annotated[CreateEndpoint, Body()]
) -> Response[CreatedEndpoint]:
    created = endpoints.create_endpoint(
        wiring.database(),
        keyring=wiring.keyring(),
        url=body.url,
        description=body.description,
        event_types=body.event_types,
        max_attempts=body.max_attempts,
        timeout_ms=body.timeout_ms,
        rate_limit_per_s=body.rate_limit_per_s,
        retry_schedule=body.retry_schedule,
        payload_format=body.payload_format,
        max_in_flight=body.max_in_flight,
        filter=body.filter,
        channels=body.channels,
        headers=body.headers,
        auth=body.auth.model_dump() if body.auth is not None else None,
        tls_client_certificate=(
            body.tls_client_certificate.model_dump()
            if body.tls_client_certificate is not None
            else None
        ),
        tls_server_ca_pem=body.tls_server_ca_pem,
        ordering=body.ordering,
        fifo_batch_size=body.fifo_batch_size,
        fifo_on_dead_letter=body.fifo_on_dead_letter,
        settings=wiring.settings(),
        app_id=app.id,
    )
    return json_response(201, created, secret=True)


@app_routes(
    router,
    "GET",
    "/endpoints",
    action=Action.READ_ENDPOINTS,
    summary="Endpoints by ascending id",
    responses={**ok(200, EndpointPage, "A page of endpoints"), **errors(403, 404)},
    links={
        200: {
            "GetFirstEndpoint": Link(
                "get_endpoint", {"endpoint_id": "$response.body#/items/0/id"}, "The first listed"
            )
        }
    },
    tags=["endpoints"],
)
def list_endpoints(app: AppScope, cursor: Cursor = None, limit: Limit = 50) -> EndpointPage:
    return endpoints.list_endpoints(
        wiring.database(), cursor=cursor, limit=limit, app_id=app.id, settings=wiring.settings()
    )


@app_routes(
    router,
    "GET",
    "/endpoints/<endpoint_id>",
    action=Action.READ_ENDPOINTS,
    summary="One endpoint (never its secret), with the retry schedule its messages follow",
    responses={**ok(200, Endpoint, "The endpoint"), **errors(403, 404)},
    links={
        200: {
            "EndpointHealth": Link(
                "endpoint_health", {"endpoint_id": "$response.body#/id"}, "Its health"
            )
        }
    },
    tags=["endpoints"],
)
def get_endpoint(app: AppScope, endpoint_id: EndpointIdPath) -> Endpoint:
    return endpoints.get_endpoint(
        wiring.database(), endpoint_id, app_id=app.id, settings=wiring.settings()
    )


@app_routes(
    router,
    "PATCH",
    "/endpoints/<endpoint_id>",
    action=Action.MANAGE_ENDPOINTS,
    summary="Change some fields of an endpoint",
    responses={**ok(200, Endpoint, "The changed endpoint"), **errors(403, 404, 409, body=True)},
    links={200: {"GetEndpoint": Link("get_endpoint", {"endpoint_id": "$response.body#/id"}, "It")}},
    tags=["endpoints"],
)
def update_endpoint(
    app: AppScope, endpoint_id: EndpointIdPath, body: Annotated[UpdateEndpoint, Body()]
) -> Endpoint:
    return endpoints.update_endpoint(
        wiring.database(),
        endpoint_id,
        body.model_dump(exclude_unset=True),
        settings=wiring.settings(),
        app_id=app.id,
        keyring=wiring.keyring(),
    )


@app_routes(
    router,
    "DELETE",
    "/endpoints/<endpoint_id>",
    action=Action.MANAGE_ENDPOINTS,
    summary="Delete an endpoint (its messages and attempts are kept)",
    responses={204: {"description": "Deleted", "content": {}}, **errors(403, 404)},
    tags=["endpoints"],
)
def delete_endpoint(app: AppScope, endpoint_id: EndpointIdPath) -> Response[None]:
    endpoints.delete_endpoint(wiring.database(), endpoint_id, app_id=app.id)
    return Response(status_code=204)


@app_routes(
    router,
    "POST",
    "/endpoints/<endpoint_id>/rotate-secret",
    action=Action.MANAGE_ENDPOINTS,
    summary="A new signing secret; earlier ones keep signing for their overlap (24 h, 5 at most)",
    responses={**ok(200, RotatedSecret, "The new secret, shown once"), **errors(403, 404)},
    links={
        200: {
            "GetEndpoint": Link(
                "get_endpoint", {"endpoint_id": "$response.body#/endpoint_id"}, "The endpoint"
            )
        }
    },
    tags=["endpoints"],
)
def rotate_secret(app: AppScope, endpoint_id: EndpointIdPath) -> Response[RotatedSecret]:
    rotated = endpoints.rotate_secret(
        wiring.database(),
        endpoint_id,
        keyring=wiring.keyring(),
        settings=wiring.settings(),
        app_id=app.id,
    )
    return json_response(200, rotated, secret=True)


@app_routes(
    router,
    "GET",
    "/endpoints/<endpoint_id>/secret",
    action=Action.REVEAL_SECRETS,
    summary="The endpoint's current signing secret, revealed on request",
    responses={**ok(200, RevealedSecret, "The current secret"), **errors(403, 404)},
    tags=["endpoints"],
)
def reveal_secret(app: AppScope, endpoint_id: EndpointIdPath) -> Response[RevealedSecret]:
    revealed = endpoints.reveal_secret(
        wiring.database(), endpoint_id, keyring=wiring.keyring(), app_id=app.id
    )
    return json_response(200, revealed, secret=True)


@app_routes(
    router,
    "GET",
    "/endpoints/<endpoint_id>/health",
    action=Action.READ_ENDPOINTS,
    summary="Circuit state, consecutive failures, latency percentiles, message counts and the "
    "last 24 hours' attempts by hour",
    responses={**ok(200, EndpointHealth, "The endpoint's health"), **errors(403, 404)},
    tags=["endpoints"],
)
def endpoint_health(app: AppScope, endpoint_id: EndpointIdPath) -> EndpointHealth:
    return endpoints.endpoint_health(wiring.database(), endpoint_id, app_id=app.id)


@app_routes(
    router,
    "POST",
    "/endpoints/<endpoint_id>/recover",
    action=Action.REPLAY,
    summary="Send again every message of the endpoint created in a window that is not delivered "
    "(dead letters and messages awaiting a retry), in batches; safe to repeat",
    responses={
        **ok(200, RecoverResult, "How many were sent again"),
        **errors(403, 404, 409, body=True),
    },
    tags=["endpoints"],
)
def recover_endpoint(
    app: AppScope, endpoint_id: EndpointIdPath, body: Annotated[RecoverRequest, Body()]
) -> RecoverResult:
    return resend.recover_endpoint(
        wiring.database(),
        endpoint_id,
        since=body.since,
        until=body.until,
        time_budget_s=RECOVER_TIME_BUDGET_S,
        app_id=app.id,
    )
