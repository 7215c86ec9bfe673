"""The resolver: routes, the error shape, and the checks made before any route runs.

Every error answers ``{"error": {"code", "message", "field"?}}``. Nothing internal (stack traces,
SQL text, database messages) reaches a response; an unexpected exception is logged and answered
with a bare 500.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from typing import Any

import psycopg2
import psycopg2.extensions
from aws_lambda_powertools.event_handler import APIGatewayRestResolver, Response
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.event_handler.openapi.exceptions import (
    RequestUnsupportedContentType,
    RequestValidationError,
)
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import __version__
from tidings.api.routes import router
from tidings.api.scoping import READS_BODY, REGISTERED, principal_of
from tidings.logic.errors import (
    Conflict,
    Forbidden,
    InvalidInput,
    NotFound,
    PayloadMismatch,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    UseCaseError,
)
from tidings.logic.filters import InvalidFilter
from tidings.observability import logger

# API Gateway refuses bigger request bodies itself; the same limit holds locally.
MAX_REQUEST_BYTES = 10 * 1024 * 1024
JSON = "application/json"

_STATUS = {
    InvalidInput: 422,
    NotFound: 404,
    PayloadTooLarge: 413,
    Conflict: 409,
    Unauthorized: 401,
    Forbidden: 403,
    Unavailable: 503,
}
# Methods whose requests carry a body the routes read: it must be JSON.
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_ROUTE_PARAMETER = re.compile(r"<\w+>")


def error_response(
    status: int,
    code: str,
    message: str,
    field: str | None = None,
    *,
    inside: dict[str, Any] | None = None,
) -> Response[dict[str, Any]]:
    """The error body; ``inside`` adds where inside the field the fault is (a filter's clause:
    its ``path`` and ``operator``)."""
    detail: dict[str, Any] = {"code": code, "message": message}
    if field:
        detail["field"] = field
    detail.update(inside or {})
    return Response(status_code=status, content_type=JSON, body={"error": detail})


def _parse_json(text: str) -> Any:
    # Too deep nesting or an integer with too many digits are malformed input, not our failure.
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except (RecursionError, ValueError) as exc:
        message = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise json.JSONDecodeError(message, text, 0) from None


def build_app() -> APIGatewayRestResolver:
    app = APIGatewayRestResolver(enable_validation=True, json_body_deserializer=_parse_json)
    app.include_router(router)

    @app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
    def invalid_request(exc: RequestValidationError) -> Response[dict[str, Any]]:
        first = exc.errors()[0] if exc.errors() else {}
        if first.get("type") == "json_invalid":
            return error_response(400, "invalid_json", "the request body is not valid JSON")
        return error_response(
            422,
            str(first.get("type", "invalid")),
            str(first.get("msg", "invalid request")),
            _field_of(first.get("loc", ())),
        )

    @app.exception_handler(RequestUnsupportedContentType)  # type: ignore[untyped-decorator]
    def unsupported_type(exc: RequestUnsupportedContentType) -> Response[dict[str, Any]]:
        return error_response(415, "unsupported_media_type", "send application/json")

    @app.exception_handler(UseCaseError)  # type: ignore[untyped-decorator]
    def refused(exc: UseCaseError) -> Response[dict[str, Any]]:
        inside = None
        if isinstance(exc, InvalidFilter):
            inside = {"path": exc.path, "operator": exc.operator}
        elif isinstance(exc, PayloadMismatch):
            inside = {"pointer": exc.pointer, "keyword": exc.keyword}
        return error_response(
            _STATUS.get(type(exc), 422), exc.code, exc.message, exc.field, inside=inside
        )

    @app.exception_handler(psycopg2.IntegrityError)  # type: ignore[untyped-decorator]
    def integrity(exc: psycopg2.IntegrityError) -> Response[dict[str, Any]]:
        # The use cases check their input first; reaching here means a rule only the database
        # knows (a constraint), reported at once and never retried.
        logger.info("constraint refused a write", extra={"sqlstate": exc.pgcode})
        if exc.pgcode == "23505":
            return error_response(409, "conflict", "the change conflicts with stored data")
        return error_response(422, "constraint_violation", "a value breaks a stored rule")

    @app.exception_handler(psycopg2.DataError)  # type: ignore[untyped-decorator]
    def bad_data(exc: psycopg2.DataError) -> Response[dict[str, Any]]:
        logger.info("database refused a value", extra={"sqlstate": exc.pgcode})
        return error_response(422, "invalid_value", "a value is malformed or out of range")

    @app.exception_handler([psycopg2.OperationalError, psycopg2.InterfaceError])  # type: ignore[untyped-decorator]
    def unavailable(exc: psycopg2.Error) -> Response[dict[str, Any]]:
        # Deadlocks and serialization failures that outlived their retries, or no database. Not a
        # bug: the client may send the request again (with its event_id, that is always safe).
        logger.warning("database unavailable", extra={"sqlstate": exc.pgcode})
        busy = isinstance(exc, psycopg2.extensions.TransactionRollbackError)
        code = "busy" if busy else "database_unavailable"
        return error_response(503, code, "the database is busy or unreachable; retry later")

    @app.not_found
    def no_route(exc: NotFoundError) -> Response[dict[str, Any]]:
        event = app.current_event
        allowed = allowed_methods(event.path)
        if allowed:
            response = error_response(
                405,
                "method_not_allowed",
                f"{event.http_method.upper()} is not allowed here; use {', '.join(allowed)}",
            )
            response.headers["Allow"] = ", ".join(allowed)
            return response
        return error_response(404, "route_not_found", "no such route")

    @app.exception_handler(Exception)  # type: ignore[untyped-decorator]
    def bug(exc: Exception) -> Response[dict[str, Any]]:
        logger.exception("unexpected error")
        return error_response(500, "internal_error", "internal error")

    return app


def _template_pattern(template: str) -> re.Pattern[str]:
    parts = _ROUTE_PARAMETER.split(template)
    return re.compile("[^/]+".join(re.escape(part) for part in parts))


_PATTERNS = [(method, _template_pattern(template)) for method, template in REGISTERED]
_BODY_PATTERNS = [(method, _template_pattern(template)) for method, template in READS_BODY]


def reads_body(method: str, path: str) -> bool:
    """Whether the route for ``method`` at ``path`` reads a JSON body."""
    return any(m == method and pattern.fullmatch(path) for m, pattern in _BODY_PATTERNS)


def allowed_methods(path: str) -> list[str]:
    """The methods the routes answer at ``path`` (none: there is no such path)."""
    return sorted({method for method, pattern in _PATTERNS if pattern.fullmatch(path)})


def _field_of(loc: Any) -> str | None:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    if not parts:
        return None
    text = parts[0]
    for part in parts[1:]:
        text += f"[{part}]" if part.isdigit() else f".{part}"
    return text


app = build_app()


def handle(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Answer one API Gateway (REST, proxy) event."""
    refusal = _refuse_request(event)
    if refusal is not None:
        status, code, message = refusal
        return {
            "statusCode": status,
            "multiValueHeaders": {"Content-Type": [JSON]},
            "body": json.dumps({"error": {"code": code, "message": message}}),
            "isBase64Encoded": False,
        }
    return app.resolve(_json_type_in_lower_case(event), context)


def _refuse_request(event: Mapping[str, Any]) -> tuple[int, str, str] | None:
    """Why a request is refused before routing, or None."""
    # API Gateway calls this function only for requests its authorizer accepted, and passes on
    # who made them; a request without that comes from a deployment wired wrongly.
    if principal_of(event) is None:
        return 401, "unauthorized", "a valid bearer token is required"
    refusal = _refuse_body(event.get("body"), bool(event.get("isBase64Encoded")))
    return refusal or _refuse_content_type(event)


def _refuse_content_type(event: Mapping[str, Any]) -> tuple[int, str, str] | None:
    """Why a request's content type is refused, or None.

    A body is JSON only when the request says so: a body without a content type is never
    parsed. A web page can send one with no content type, or text/plain, without the browser
    asking first; such a request must not act."""
    method = str(event.get("httpMethod") or "").upper()
    if method not in _BODY_METHODS:
        return None
    content_type = (_header(event, "content-type") or "").strip()
    if not content_type:
        sends_body = bool(event.get("body")) or reads_body(method, str(event.get("path") or ""))
        if not sends_body:
            return None
        return (
            415,
            "unsupported_media_type",
            "the request has no Content-Type: send application/json",
        )
    if not _is_json(content_type):
        return 415, "unsupported_media_type", "the request body must be application/json"
    return None


def _json_type_in_lower_case(event: dict[str, Any]) -> dict[str, Any]:
    """``event`` with a JSON content type spelled as the resolver reads it (media types are
    case-insensitive; it compares them as written)."""
    content_type = _header(event, "content-type")
    if content_type is None or content_type == content_type.lower():
        return event
    changed = dict(event)
    for key in ("headers", "multiValueHeaders"):
        headers = event.get(key)
        if isinstance(headers, Mapping):
            changed[key] = {
                name: (
                    value
                    if str(name).lower() != "content-type"
                    else [v.lower() for v in value]
                    if isinstance(value, list)
                    else str(value).lower()
                )
                for name, value in headers.items()
            }
    return changed


def _header(event: Mapping[str, Any], name: str) -> str | None:
    for key in ("multiValueHeaders", "headers"):
        headers = event.get(key)
        if not isinstance(headers, Mapping):
            continue
        for header, value in headers.items():
            if str(header).lower() == name:
                if isinstance(value, list):
                    return str(value[-1]) if value else None
                return None if value is None else str(value)
    return None


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json"


def _refuse_body(body: Any, base64_encoded: bool) -> tuple[int, str, str] | None:
    """Why a request body is refused before routing (too large, not UTF-8), or None."""
    if body is None:
        return None
    if not isinstance(body, str):
        return 400, "invalid_body", "the request body is not text"
    # Far over the limit whatever the encoding: no need to decode it to say so.
    too_long = len(body) > MAX_REQUEST_BYTES * 2
    raw = b"" if too_long else _body_bytes(body, base64_encoded)
    if raw is None:
        return 400, "invalid_encoding", "the request body is not valid base64 or UTF-8"
    if too_long or len(raw) > MAX_REQUEST_BYTES:
        return 413, "request_too_large", f"the request body is over {MAX_REQUEST_BYTES} bytes"
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return 400, "invalid_encoding", "the request body is not valid UTF-8"
    return None


def _body_bytes(body: str, base64_encoded: bool) -> bytes | None:
    try:
        return base64.b64decode(body, validate=True) if base64_encoded else body.encode("utf-8")
    except (binascii.Error, ValueError, UnicodeEncodeError):
        return None


def openapi_json() -> str:
    """The OpenAPI document of this API, as committed in ``openapi.json``."""
    return app.get_openapi_json_schema(
        title="Tidings",
        version=__version__,
        description=(
            "Reliable outbound webhooks: applications, events, endpoints, messages, dead-letter "
            "replay, tokens. Every request carries `Authorization: Bearer <token>`."
        ),
        security_schemes={
            "bearerToken": HTTPBearer(
                bearerFormat="tdg_ followed by 43 URL-safe base64 characters",
                description="An API token (tidings tokens create, or POST /v1/tokens)",
            )
        },
        security=[{"bearerToken": []}],
    )
