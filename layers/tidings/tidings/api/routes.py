"""The routes: each parses its request, checks who asks in which application, calls one use
case, and shapes the answer.

Everything an application holds (events, messages, endpoints, replay) is served twice: at
``/v1/…`` for the default application and at ``/v1/apps/{app}/…`` (see ``tidings.api.scoping``).
Applications and tokens are managed at ``/v1/apps`` and ``/v1/tokens``.
"""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body, Path, Query

from tidings import wiring
from tidings.api.models import (
    Application,
    ApplicationPage,
    BatchResult,
    CreateApplication,
    CreatedEndpoint,
    CreatedToken,
    CreateEndpoint,
    CreatePortalLink,
    CreateToken,
    Endpoint,
    EndpointHealth,
    EndpointPage,
    ErrorBody,
    EventBatch,
    Message,
    MessageDetail,
    MessagePage,
    MessageStatus,
    Moment,
    PortalLink,
    PortalSession,
    RecoverRequest,
    RecoverResult,
    ReplayRequest,
    ReplayResult,
    RevealedSecret,
    RotatedSecret,
    SendEvent,
    SendResult,
    Token,
    TokenPage,
    UpdateApplication,
    UpdateEndpoint,
)
from tidings.api.scoping import AppPath, AppScope, app_routes, principal, route
from tidings.logic import (
    access,
    applications,
    endpoints,
    events,
    messages,
    portal,
    replay,
    resend,
    tokens,
)
from tidings.logic.access import Action

router = Router()  # type: ignore[no-untyped-call]

JSON = "application/json"
MAX_ID = 2**63 - 1
EndpointIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="endpoint id")]
MessageIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="message id")]
TokenIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="token id")]
Limit = Annotated[int, Query(ge=1, le=100, description="page size")]
Cursor = Annotated[str | None, Query(max_length=200, description="next_cursor of the last page")]
# A recovery stops starting batches after this long, within API Gateway's 29 s; the answer then
# says it is not complete, and the same request again carries on.
RECOVER_TIME_BUDGET_S = 20.0

_REASONS = {
    400: "The request body is not JSON or not UTF-8",
    401: "No bearer token, or one that is unknown, expired or revoked",
    403: "The token's scope does not allow this",
    404: "Not found: no such thing in this application (or the application is not the token's)",
    409: "Conflicts with the stored state",
    413: "A payload or the request is too large",
    415: "The request body is not application/json",
    422: "A field is missing, of the wrong type or not acceptable",
    429: "Too many requests from this token (AWS: the usage plan's throttle)",
    503: (
        "The database, or the key that encrypts signing secrets, is busy or unreachable: "
        "send it again (safe with an event_id)"
    ),
}


def _errors(*codes: int, body: bool = False) -> dict[int, Any]:
    """The documented error answers: ``codes`` plus those any route can give (and 415 for a
    route that reads a body)."""
    always = {400, 401, 413, 422, 429, 503} | ({415} if body else set())
    return {
        code: {"description": _REASONS[code], "content": {JSON: {"model": ErrorBody}}}
        for code in sorted(always | set(codes))
    }


def _ok(code: int, model: type, description: str) -> dict[int, Any]:
    return {code: {"description": description, "content": {JSON: {"model": model}}}}


def _json(status: int, body: Any, *, secret: bool = False) -> Response[Any]:
    """``body`` as JSON; one that holds a credential is never to be stored by a cache."""
    return Response(
        status_code=status,
        content_type=JSON,
        body=body.model_dump(mode="json"),
        headers={"Cache-Control": "no-store"} if secret else None,
    )


# -- events ---------------------------------------------------------------------------------


@app_routes(
    router,
    "POST",
    "/events",
    action=Action.SEND_EVENTS,
    summary="Send one event to the application's subscribed (or named) endpoints",
    responses={
        **_ok(202, SendResult, "Created: the new message ids"),
        **_ok(200, SendResult, "A repeated event_id: the original message ids, nothing created"),
        **_errors(404, 409, body=True),
    },
    tags=["events"],
)
def send_event(app: AppScope, event: Annotated[SendEvent, Body()]) -> Response[SendResult]:
    result = events.send_event(
        wiring.database(),
        event_type=event.event_type,
        payload=event.payload,
        event_id=event.event_id,
        endpoint_ids=event.endpoint_ids,
        settings=wiring.settings(),
        application=None if app.id == applications.DEFAULT_APP_ID else app.uid,
    )
    return _json(202 if result.created else 200, result)


@app_routes(
    router,
    "POST",
    "/events/batch",
    action=Action.SEND_EVENTS,
    summary="Send up to 100 events in one transaction: all are accepted or none",
    responses={
        **_ok(202, BatchResult, "At least one event was created"),
        **_ok(200, BatchResult, "Every event was a repeat: nothing created"),
        **_errors(404, 409, body=True),
    },
    tags=["events"],
)
def send_events(app: AppScope, batch: Annotated[EventBatch, Body()]) -> Response[BatchResult]:
    specs = [
        events.EventSpec(e.event_type, e.payload, e.event_id, e.endpoint_ids) for e in batch.events
    ]
    results = events.send_events(
        wiring.database(),
        specs,
        settings=wiring.settings(),
        application=None if app.id == applications.DEFAULT_APP_ID else app.uid,
    )
    created = any(r.created for r in results)
    return _json(202 if created else 200, BatchResult(results=results))


# -- messages -------------------------------------------------------------------------------


@app_routes(
    router,
    "GET",
    "/messages/<message_id>",
    action=Action.READ_MESSAGES,
    summary="One message with its payload and attempt history",
    responses={**_ok(200, MessageDetail, "The message"), **_errors(404)},
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
        **_ok(202, Message, "A new delivery started: the message, pending"),
        **_errors(403, 404, 409),
    },
    tags=["messages"],
)
def resend_message(app: AppScope, message_id: MessageIdPath) -> Response[Message]:
    return _json(202, resend.resend_message(wiring.database(), message_id, app_id=app.id))


@app_routes(
    router,
    "GET",
    "/messages",
    action=Action.READ_MESSAGES,
    summary="Messages, newest first, filtered by status, endpoint, event type and creation time",
    responses={**_ok(200, MessagePage, "A page of messages"), **_errors(404)},
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


# -- endpoints ------------------------------------------------------------------------------


@app_routes(
    router,
    "POST",
    "/endpoints",
    action=Action.MANAGE_ENDPOINTS,
    summary="Create an endpoint; its signing secret is in this answer only",
    responses={**_ok(201, CreatedEndpoint, "Created"), **_errors(403, 404, 409, body=True)},
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
        headers=body.headers,
        auth=body.auth.model_dump() if body.auth is not None else None,
        tls_client_certificate=(
            body.tls_client_certificate.model_dump()
            if body.tls_client_certificate is not None
            else None
        ),
        tls_server_ca_pem=body.tls_server_ca_pem,
        settings=wiring.settings(),
        app_id=app.id,
    )
    return _json(201, created, secret=True)


@app_routes(
    router,
    "GET",
    "/endpoints",
    action=Action.READ_ENDPOINTS,
    summary="Endpoints by ascending id",
    responses={**_ok(200, EndpointPage, "A page of endpoints"), **_errors(403, 404)},
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
    responses={**_ok(200, Endpoint, "The endpoint"), **_errors(403, 404)},
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
    responses={**_ok(200, Endpoint, "The changed endpoint"), **_errors(403, 404, 409, body=True)},
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
    responses={204: {"description": "Deleted", "content": {}}, **_errors(403, 404)},
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
    responses={**_ok(200, RotatedSecret, "The new secret, shown once"), **_errors(403, 404)},
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
    return _json(200, rotated, secret=True)


@app_routes(
    router,
    "GET",
    "/endpoints/<endpoint_id>/secret",
    action=Action.REVEAL_SECRETS,
    summary="The endpoint's current signing secret, revealed on request",
    responses={**_ok(200, RevealedSecret, "The current secret"), **_errors(403, 404)},
    tags=["endpoints"],
)
def reveal_secret(app: AppScope, endpoint_id: EndpointIdPath) -> Response[RevealedSecret]:
    revealed = endpoints.reveal_secret(
        wiring.database(), endpoint_id, keyring=wiring.keyring(), app_id=app.id
    )
    return _json(200, revealed, secret=True)


@app_routes(
    router,
    "GET",
    "/endpoints/<endpoint_id>/health",
    action=Action.READ_ENDPOINTS,
    summary="Circuit state, consecutive failures, latency percentiles, message counts and the "
    "last 24 hours' attempts by hour",
    responses={**_ok(200, EndpointHealth, "The endpoint's health"), **_errors(403, 404)},
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
        **_ok(200, RecoverResult, "How many were sent again"),
        **_errors(403, 404, 409, body=True),
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


# -- dead letters ---------------------------------------------------------------------------


@app_routes(
    router,
    "POST",
    "/dead-letters/replay",
    action=Action.REPLAY,
    summary="Requeue dead letters by message ids, endpoint or time range, keeping their history",
    responses={**_ok(200, ReplayResult, "How many were requeued"), **_errors(403, 404, body=True)},
    tags=["dead letters"],
)
def replay_dead_letters(app: AppScope, body: Annotated[ReplayRequest, Body()]) -> ReplayResult:
    return replay.replay_dead_letters(
        wiring.database(),
        message_ids=body.message_ids,
        endpoint_id=body.endpoint_id,
        since=body.since,
        until=body.until,
        app_id=app.id,
    )


# -- portal ---------------------------------------------------------------------------------


@app_routes(
    router,
    "POST",
    "/portal-links",
    action=Action.MAKE_PORTAL_LINKS,
    summary="A link that opens the consumer portal for the application, once, before it expires",
    responses={**_ok(201, PortalLink, "The link"), **_errors(403, 404, body=True)},
    tags=["portal"],
)
def create_portal_link(
    app: AppScope, body: Annotated[CreatePortalLink, Body()]
) -> Response[PortalLink]:
    settings = wiring.settings()
    link = portal.create_link(
        wiring.database(),
        app.id,
        app.uid,
        base_url=settings.portal_url or _own_portal_url(),
        read_only=body.read_only,
        expires_in_s=body.expires_in_s,
        made_by=principal(router).token_id,
        settings=settings,
    )
    return _json(201, link, secret=True)


@route(
    router,
    "POST",
    "/v1/portal/sessions",
    summary="Exchange a portal link (its credential as the bearer token) for a session, once",
    responses={**_ok(201, PortalSession, "The session"), **_errors(403, body=True)},
    tags=["portal"],
)
def open_portal_session() -> Response[PortalSession]:
    who = principal(router)
    access.require(who, Action.OPEN_PORTAL_SESSION)
    session = portal.open_session(wiring.database(), who, settings=wiring.settings())
    return _json(201, session, secret=True)


def _own_portal_url() -> str:
    """The portal's address on the API's own domain and stage, as this request reached it."""
    context = router.current_event.raw_event.get("requestContext") or {}
    return f"https://{context.get('domainName')}/{context.get('stage')}/portal"


# -- applications ---------------------------------------------------------------------------


@route(
    router,
    "POST",
    "/v1/apps",
    summary="Create an application (one per customer): endpoints and events live inside it",
    responses={**_ok(201, Application, "Created"), **_errors(403, 409, body=True)},
    tags=["applications"],
)
def create_application(body: Annotated[CreateApplication, Body()]) -> Response[Application]:
    access.require(principal(router), Action.MANAGE_APPLICATIONS)
    created = applications.create_application(
        wiring.database(),
        uid=body.uid,
        name=body.name,
        metadata=body.metadata,
        default_payload_format=body.default_payload_format,
    )
    return _json(201, created)


@route(
    router,
    "GET",
    "/v1/apps",
    summary="Applications by ascending id",
    responses={**_ok(200, ApplicationPage, "A page of applications"), **_errors(403)},
    tags=["applications"],
)
def list_applications(cursor: Cursor = None, limit: Limit = 50) -> ApplicationPage:
    access.require(principal(router), Action.MANAGE_APPLICATIONS)
    return applications.list_applications(wiring.database(), cursor=cursor, limit=limit)


@route(
    router,
    "GET",
    "/v1/apps/<app>",
    summary="One application, by uid or id",
    responses={**_ok(200, Application, "The application"), **_errors(403, 404)},
    tags=["applications"],
)
def get_application(app: AppPath) -> Application:
    who = principal(router)
    access.require(who, Action.READ_APPLICATION)
    return applications.visible(wiring.database(), app, who)


@route(
    router,
    "PATCH",
    "/v1/apps/<app>",
    summary="Change an application's name or metadata (its uid never changes)",
    responses={**_ok(200, Application, "The changed application"), **_errors(403, 404, body=True)},
    tags=["applications"],
)
def update_application(app: AppPath, body: Annotated[UpdateApplication, Body()]) -> Application:
    who = principal(router)
    access.require(who, Action.MANAGE_APPLICATIONS)
    found = applications.visible(wiring.database(), app, who)
    return applications.update_application(
        wiring.database(),
        found,
        name=body.name,
        metadata=body.metadata,
        changes=body.model_dump(include={"default_payload_format"}, exclude_unset=True),
    )


@route(
    router,
    "DELETE",
    "/v1/apps/<app>",
    summary="Delete an application: its endpoints are disabled, its queued messages become "
    "dead letters, its history stays",
    responses={204: {"description": "Deleted", "content": {}}, **_errors(403, 404, 409)},
    tags=["applications"],
)
def delete_application(app: AppPath) -> Response[None]:
    who = principal(router)
    access.require(who, Action.MANAGE_APPLICATIONS)
    found = applications.visible(wiring.database(), app, who)
    applications.delete_application(wiring.database(), found)
    return Response(status_code=204)


# -- tokens ---------------------------------------------------------------------------------


@route(
    router,
    "POST",
    "/v1/tokens",
    summary="Create an API token; the token is in this answer only",
    responses={**_ok(201, CreatedToken, "Created"), **_errors(403, 404, body=True)},
    tags=["tokens"],
)
def create_token(body: Annotated[CreateToken, Body()]) -> Response[CreatedToken]:
    access.require(principal(router), Action.MANAGE_TOKENS)
    created = tokens.create_token(
        wiring.database(),
        scope=body.scope,
        application=body.application,
        description=body.description,
        expires_at=body.expires_at,
    )
    return _json(201, created, secret=True)


@route(
    router,
    "GET",
    "/v1/tokens",
    summary="Tokens by ascending id, revoked and expired ones included (never the tokens)",
    responses={**_ok(200, TokenPage, "A page of tokens"), **_errors(403)},
    tags=["tokens"],
)
def list_tokens(cursor: Cursor = None, limit: Limit = 50) -> TokenPage:
    access.require(principal(router), Action.MANAGE_TOKENS)
    return tokens.list_tokens(wiring.database(), cursor=cursor, limit=limit)


@route(
    router,
    "GET",
    "/v1/tokens/<token_id>",
    summary="One token (never the token itself)",
    responses={**_ok(200, Token, "The token"), **_errors(403, 404)},
    tags=["tokens"],
)
def get_token(token_id: TokenIdPath) -> Token:
    access.require(principal(router), Action.MANAGE_TOKENS)
    return tokens.get_token(wiring.database(), token_id)


@route(
    router,
    "DELETE",
    "/v1/tokens/<token_id>",
    summary="Revoke a token: refused from now on (on AWS within the authorizer's 60 s cache)",
    responses={**_ok(200, Token, "The revoked token"), **_errors(403, 404)},
    tags=["tokens"],
)
def revoke_token(token_id: TokenIdPath) -> Token:
    access.require(principal(router), Action.MANAGE_TOKENS)
    return tokens.revoke_token(wiring.database(), token_id)
