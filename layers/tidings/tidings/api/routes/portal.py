"""``/portal-links`` and ``/v1/portal/sessions``: the consumer portal's credentials."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body

from tidings import wiring
from tidings.api.models import CreatePortalLink, PortalLink, PortalSession
from tidings.api.routes.common import errors, json_response, ok, router
from tidings.api.scoping import AppScope, Link, app_routes, principal, route
from tidings.logic import access, portal
from tidings.logic.access import Action


@app_routes(
    router,
    "POST",
    "/portal-links",
    action=Action.MAKE_PORTAL_LINKS,
    summary="A link that opens the consumer portal for the application, once, before it expires",
    responses={**ok(201, PortalLink, "The link"), **errors(403, 404, body=True)},
    links={
        201: {
            "GetLinkToken": Link(
                "get_token",
                {"token_id": "$response.body#/token_id"},
                "The link's token (an admin's request)",
                in_application=False,
            ),
            "RevokeLink": Link(
                "revoke_token",
                {"token_id": "$response.body#/token_id"},
                "Revoke the link before it is used (an admin's request)",
                in_application=False,
            ),
        }
    },
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
    return json_response(201, link, secret=True)


@route(
    router,
    "POST",
    "/v1/portal/sessions",
    summary="Exchange a portal link (its credential as the bearer token) for a session, once",
    responses={**ok(201, PortalSession, "The session"), **errors(403, body=True)},
    tags=["portal"],
)
def open_portal_session() -> Response[PortalSession]:
    who = principal(router)
    access.require(who, Action.OPEN_PORTAL_SESSION)
    session = portal.open_session(wiring.database(), who, settings=wiring.settings())
    return json_response(201, session, secret=True)


def _own_portal_url() -> str:
    """The portal's address on the API's own domain and stage, as this request reached it."""
    context = router.current_event.raw_event.get("requestContext") or {}
    return f"https://{context.get('domainName')}/{context.get('stage')}/portal"
