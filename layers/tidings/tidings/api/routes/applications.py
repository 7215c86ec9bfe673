"""``/v1/apps``: applications, one per customer of the producer's."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.openapi.params import Body

from tidings import wiring
from tidings.api.models import Application, ApplicationPage, CreateApplication, UpdateApplication
from tidings.api.routes.common import Cursor, Limit, errors, json_response, ok, router
from tidings.api.scoping import AppPath, Link, principal, route
from tidings.logic import access, applications
from tidings.logic.access import Action

_CREATED = "$response.body#/uid"
_ITSELF = {"app": _CREATED}


@route(
    router,
    "POST",
    "/v1/apps",
    summary="Create an application (one per customer): endpoints and events live inside it",
    responses={**ok(201, Application, "Created"), **errors(403, 409, body=True)},
    links={
        201: {
            "GetApplication": Link("get_application", _ITSELF, "It", in_application=False),
            "UpdateApplication": Link(
                "update_application", _ITSELF, "Change it", in_application=False
            ),
            "DeleteApplication": Link(
                "delete_application", _ITSELF, "Delete it", in_application=False
            ),
            "ApplicationStatus": Link(
                "application_status", _ITSELF, "Its queue's figures", in_application=False
            ),
            "ApplicationDeadLetters": Link(
                "application_dead_letters", _ITSELF, "Its dead letters", in_application=False
            ),
            "CreateEndpointInIt": Link("create_endpoint", _ITSELF, "An endpoint in it"),
            "ListItsEndpoints": Link("list_endpoints", _ITSELF, "Its endpoints"),
            "SendEventToIt": Link("send_event", _ITSELF, "An event for its endpoints"),
            "ListItsMessages": Link("list_messages", _ITSELF, "Its messages"),
            "CreatePortalLinkToIt": Link("create_portal_link", _ITSELF, "Its portal"),
        }
    },
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
    return json_response(201, created)


@route(
    router,
    "GET",
    "/v1/apps",
    summary="Applications by ascending id",
    responses={**ok(200, ApplicationPage, "A page of applications"), **errors(403)},
    links={
        200: {
            "GetFirstApplication": Link(
                "get_application",
                {"app": "$response.body#/items/0/uid"},
                "The first listed",
                in_application=False,
            )
        }
    },
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
    responses={**ok(200, Application, "The application"), **errors(403, 404)},
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
    responses={**ok(200, Application, "The changed application"), **errors(403, 404, body=True)},
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
    responses={204: {"description": "Deleted", "content": {}}, **errors(403, 404, 409)},
    tags=["applications"],
)
def delete_application(app: AppPath) -> Response[None]:
    who = principal(router)
    access.require(who, Action.MANAGE_APPLICATIONS)
    found = applications.visible(wiring.database(), app, who)
    applications.delete_application(wiring.database(), found)
    return Response(status_code=204)
