"""``/dead-letters/replay``: an application's dead letters, delivered again."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body

from tidings import wiring
from tidings.api.models import ReplayRequest, ReplayResult
from tidings.api.routes.common import errors, ok, router
from tidings.api.scoping import AppScope, app_routes
from tidings.logic import replay
from tidings.logic.access import Action


@app_routes(
    router,
    "POST",
    "/dead-letters/replay",
    action=Action.REPLAY,
    summary="Requeue dead letters by message ids, endpoint or time range, keeping their history",
    responses={**ok(200, ReplayResult, "How many were requeued"), **errors(403, 404, body=True)},
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
