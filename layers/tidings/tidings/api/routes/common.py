"""What the route modules share: the one router every route is registered on, the parameter
types, the documented answers, and the JSON answer."""

from __future__ import annotations

from typing import Annotated, Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from tidings.api.models import ErrorBody

router = Router()  # type: ignore[no-untyped-call]

JSON = "application/json"
MAX_ID = 2**63 - 1
EndpointIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="endpoint id")]
MessageIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="message id")]
TokenIdPath = Annotated[int, Path(ge=1, le=MAX_ID, description="token id")]
Limit = Annotated[int, Query(ge=1, le=100, description="page size")]
Cursor = Annotated[str | None, Query(max_length=200, description="next_cursor of the last page")]

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


def errors(*codes: int, body: bool = False) -> dict[int, Any]:
    """The documented error answers: ``codes`` plus those any route can give (and 415 for a
    route that reads a body)."""
    always = {400, 401, 413, 422, 429, 503} | ({415} if body else set())
    return {
        code: {"description": _REASONS[code], "content": {JSON: {"model": ErrorBody}}}
        for code in sorted(always | set(codes))
    }


def ok(code: int, model: type, description: str) -> dict[int, Any]:
    return {code: {"description": description, "content": {JSON: {"model": model}}}}


def json_response(status: int, body: Any, *, secret: bool = False) -> Response[Any]:
    """``body`` as JSON; one that holds a credential is never to be stored by a cache."""
    return Response(
        status_code=status,
        content_type=JSON,
        body=body.model_dump(mode="json"),
        headers={"Cache-Control": "no-store"} if secret else None,
    )
