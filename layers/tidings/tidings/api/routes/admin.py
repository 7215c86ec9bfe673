"""What operators read: the queue's status and the dead-letter report (``tidings status`` and
``tidings dead-letters`` over the API).

Every application's at once at ``/v1/admin/…``, for admin tokens only; one application's at
``/v1/apps/{app}/…``, for the tokens that may read its endpoints (another application's token is
told it does not exist, as everywhere).
"""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Query

from tidings import wiring
from tidings.api.models import DeadLetterReport, StatusReport
from tidings.api.routes.common import errors, ok, router
from tidings.api.scoping import AppPath, acting_in, principal, route
from tidings.logic import access, status
from tidings.logic.access import Action

ReportWindow = Annotated[
    int | None,
    Query(
        ge=1,
        le=status.MAX_REPORT_WINDOW_S,
        description="The report's window: the dead letters of the last window_s seconds "
        "(default: the scheduled report's, TIDINGS_DEAD_LETTER_REPORT_WINDOW_S)",
    ),
]
_STATUS = "The health summary, each application's part of the queue, every endpoint's figures"
_DEAD_LETTERS = "The dead letters of the window per endpoint, with the pattern and the action"


@route(
    router,
    "GET",
    "/v1/admin/status",
    summary="The whole queue's status: " + _STATUS[0].lower() + _STATUS[1:],
    responses={**ok(200, StatusReport, _STATUS), **errors(403)},
    tags=["operations"],
)
def deployment_status() -> StatusReport:
    access.require(principal(router), Action.READ_EVERY_APPLICATION)
    return status.status_report(wiring.database(), wiring.settings())


@route(
    router,
    "GET",
    "/v1/apps/<app>/status",
    summary="One application's status: its summary and its endpoints' figures",
    responses={**ok(200, StatusReport, _STATUS), **errors(403, 404)},
    tags=["operations"],
)
def application_status(app: AppPath) -> StatusReport:
    scope = acting_in(router, Action.READ_ENDPOINTS, app)
    return status.status_report(wiring.database(), wiring.settings(), scope)


@route(
    router,
    "GET",
    "/v1/admin/dead-letters",
    summary="Every application's dead letters of a window, per endpoint (a view: the scheduled "
    "report still names each)",
    responses={**ok(200, DeadLetterReport, _DEAD_LETTERS), **errors(403)},
    tags=["operations"],
)
def deployment_dead_letters(window_s: ReportWindow = None) -> DeadLetterReport:
    access.require(principal(router), Action.READ_EVERY_APPLICATION)
    return status.dead_letter_report(wiring.database(), wiring.settings(), window_s)


@route(
    router,
    "GET",
    "/v1/apps/<app>/dead-letters",
    summary="One application's dead letters of a window, per endpoint",
    responses={**ok(200, DeadLetterReport, _DEAD_LETTERS), **errors(403, 404)},
    tags=["operations"],
)
def application_dead_letters(app: AppPath, window_s: ReportWindow = None) -> DeadLetterReport:
    scope = acting_in(router, Action.READ_ENDPOINTS, app)
    return status.dead_letter_report(wiring.database(), wiring.settings(), window_s, scope)
