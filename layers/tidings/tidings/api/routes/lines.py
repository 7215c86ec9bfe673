"""``/endpoints/{id}/lines``: a FIFO endpoint's lines (one per ordering key), listed and
resumed after a dead letter paused them."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body, Query

from tidings import wiring
from tidings.api.models import LinePage, ResumedLines, ResumeLines
from tidings.api.routes.common import Cursor, EndpointIdPath, Limit, errors, ok, router
from tidings.api.scoping import AppScope, app_routes
from tidings.logic import lines
from tidings.logic.access import Action

PausedOnly = Annotated[bool, Query(description="only the lines paused at a dead letter")]


@app_routes(
    router,
    "GET",
    "/endpoints/<endpoint_id>/lines",
    action=Action.READ_ENDPOINTS,
    summary="A FIFO endpoint's lines with a message on its way (or paused), by ordering key: "
    "each line's head and how many wait behind it",
    responses={**ok(200, LinePage, "A page of lines"), **errors(403, 404)},
    tags=["endpoints"],
)
def list_lines(
    app: AppScope,
    endpoint_id: EndpointIdPath,
    paused: PausedOnly = False,
    cursor: Cursor = None,
    limit: Limit = 50,
) -> LinePage:
    return lines.list_lines(
        wiring.database(), endpoint_id, paused=paused, cursor=cursor, limit=limit, app_id=app.id
    )


@app_routes(
    router,
    "POST",
    "/endpoints/<endpoint_id>/lines/resume",
    action=Action.REPLAY,
    summary="Resume a FIFO endpoint's lines paused at a dead letter (every one, or those of the "
    "given ordering keys): each goes on with the message behind its dead letter",
    responses={**ok(200, ResumedLines, "The lines resumed"), **errors(403, 404, body=True)},
    tags=["endpoints"],
)
def resume_lines(
    app: AppScope, endpoint_id: EndpointIdPath, body: Annotated[ResumeLines, Body()]
) -> ResumedLines:
    return lines.resume_lines(
        wiring.database(), endpoint_id, ordering_keys=body.ordering_keys, app_id=app.id
    )
