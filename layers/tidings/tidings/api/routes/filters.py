"""``/v1/filters/test``: try a content filter on a payload before an endpoint uses it."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.openapi.params import Body

from tidings import wiring
from tidings.api.models import FailedClause, FilterTest, FilterTestResult
from tidings.api.routes.common import errors, ok, router
from tidings.api.scoping import principal, route
from tidings.logic import access, filters
from tidings.logic.access import Action


@route(
    router,
    "POST",
    "/v1/filters/test",
    summary="Whether a filter matches an event of this payload and type, and if not, the "
    "clause that failed",
    responses={**ok(200, FilterTestResult, "The verdict"), **errors(403, body=True)},
    tags=["filters"],
)
def test_filter(body: Annotated[FilterTest, Body()]) -> FilterTestResult:
    access.require(principal(router), Action.TEST_FILTERS)
    trial = filters.try_filter(
        body.filter,
        body.payload,
        body.event_type,
        max_payload_bytes=wiring.settings().max_payload_bytes,
    )
    verdict = trial.verdict
    failed = (
        None
        if verdict.matches
        else FailedClause(path=verdict.failed_path or "", operator=verdict.failed_operator)
    )
    return FilterTestResult(matches=verdict.matches, failed=failed, jsonpath=trial.jsonpath)
