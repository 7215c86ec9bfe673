"""What the client raises: the API's refusals, with its machine-readable reason and the HTTP
status, and the failures to get an answer at all."""

from __future__ import annotations

from typing import Any


class TidingsError(Exception):
    """Anything the client raises."""


class ApiUnreachable(TidingsError):
    """No answer: the API could not be reached, or did not answer in time (after the retries a
    safe request gets)."""


class UnexpectedAnswer(TidingsError):
    """An answer that is not the API's (not JSON, or not the documented shape): something else
    answered at that address, such as a proxy's error page."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class ApiError(TidingsError):
    """The API refused the request: ``status`` is the HTTP status, ``code`` the stable,
    machine-readable reason (``endpoint_not_found``, ``forbidden``, ``payload_too_large``…),
    ``field`` the request field at fault when one is; for a payload or example that does not
    match its event type's schema, ``pointer`` (the JSON pointer of the first place inside that
    field that does not) and ``keyword`` (the schema keyword that failed)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        *,
        pointer: str | None = None,
        keyword: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.pointer = pointer
        self.keyword = keyword

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        return f"{self.message}{where} [{self.code}, HTTP {self.status}]"


class InvalidRequest(ApiError):
    """400, 413, 415, 422: the request cannot be taken as it is (a field missing, of the wrong
    type or not acceptable, a payload too large); sending it again changes nothing."""


class Unauthorized(ApiError):
    """401: no token, or one that is unknown, expired or revoked."""


class Forbidden(ApiError):
    """403: the token's scope does not allow this."""


class NotFound(ApiError):
    """404: no such thing (in this application, or the application is not the token's)."""


class Conflict(ApiError):
    """409: the request contradicts the stored state (a message not finished, an endpoint
    disabled, an event id reused with another payload…)."""


class RateLimited(ApiError):
    """429: too many requests from this token, still after the retries a safe request gets."""


class ServerError(ApiError):
    """5xx: the API or what it needs failed; 503 (busy or unreachable database) still after the
    retries a safe request gets."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: InvalidRequest,
    415: InvalidRequest,
    422: InvalidRequest,
    429: RateLimited,
}


def error_for(status: int, body: Any, text: str = "") -> ApiError:
    """The error an answer with ``status`` and (decoded JSON) ``body`` stands for. A body in
    the API's shape, ``{"error": {"code", "message", "field"?}}``, gives the reason; any other
    gives ``http_<status>`` and what text there was."""
    kind = _BY_STATUS.get(status, ServerError if status >= 500 else ApiError)
    detail = body.get("error") if isinstance(body, dict) else None
    if isinstance(detail, dict) and isinstance(detail.get("code"), str):
        field, pointer, keyword = (detail.get(k) for k in ("field", "pointer", "keyword"))
        return kind(
            status,
            detail["code"],
            str(detail.get("message") or detail["code"]),
            field if isinstance(field, str) else None,
            pointer=pointer if isinstance(pointer, str) else None,
            keyword=keyword if isinstance(keyword, str) else None,
        )
    message = text.strip()[:200] or f"HTTP {status}"
    return kind(status, f"http_{status}", message)
