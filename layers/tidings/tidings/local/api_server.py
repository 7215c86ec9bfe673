"""The ingest API on localhost: real HTTP requests in, API Gateway's steps out.

For each request, as API Gateway does on AWS (``infra/api.py``):
1. a method the API's ``ANY`` method does not cover (TRACE, CONNECT, …) is answered 405;
2. the TOKEN authorizer (``tidings.handlers.authorizer``) is called with the ``Authorization``
   header; no header, or a refusal, is answered 401, and what it accepts reaches the handler with
   its context in ``requestContext.authorizer``. Unlike API Gateway, every request is checked
   (nothing is cached), so a revoked token is refused at once here;
3. the ingest handler gets the proxy event, and its reply becomes the HTTP response.

``GET /portal`` and ``GET /portal/<file>`` go to the portal function instead, without the
authorizer (the page and its scripts are public; what it shows comes from the API with a token).

The one local difference: while no token exists at all (a fresh ``tidings dev``), a request from
a loopback address without an ``Authorization`` header is let through as an admin's, so that the
API can be tried before the first token is made. The first token ends that for good. Only a
request a web page cannot make is let through so: its ``Host`` must be a loopback name
(``localhost``, ``127.x.y.z``, ``[::1]``, with any port; a page reaching the server through
DNS rebinding names its own host there), and an ``Origin``, if sent, a loopback origin (a page
elsewhere sends its own). Anything else is refused (403, ``foreign_host`` or ``foreign_origin``).
A body must also be sent as ``application/json`` (the ingest handler refuses anything else with
415, as on AWS), which a page cannot do without the browser asking first.

Answers API Gateway makes itself (401, 403, 405, 502) have the API's JSON error shape, as the
gateway responses of ``infra/api.py`` give them on AWS. Requests are handled one at a time: a
Lambda execution environment handles one invocation at a time, and the handlers' resolver keeps
the request being handled in process-wide state.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from tidings.local.lambda_env import (
    ACCOUNT,
    REGION,
    Handler,
    HttpRequest,
    HttpResponse,
    LambdaContext,
    api_gateway_event,
    http_response,
)
from tidings.logic.access import Principal, Scope
from tidings.observability import logger

FUNCTION_NAME = "tidings-ingest"
AUTHORIZER_NAME = "tidings-authorizer"
# API Gateway gives an integration at most 29 seconds, and an authorizer as long.
INTEGRATION_TIMEOUT_S = 29.0
# The methods API Gateway's ANY method passes on to the integration.
ROUTED_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"})
API_ID = "local"

OpenAccess = Callable[[], bool]
# host[:port] as a Host header or an origin holds it, an IPv6 address in brackets.
_AUTHORITY = re.compile(r"(?:\[(?P<ipv6>[0-9A-Fa-f:.]+)\]|(?P<name>[^:\[\]]+))(?::[0-9]{1,5})?")


def _error(
    status: int, code: str, message: str, extra: tuple[tuple[str, str], ...] = ()
) -> HttpResponse:
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    return HttpResponse(status, (("Content-Type", "application/json"), *extra), body)


_BAD_GATEWAY = _error(502, "bad_gateway", "the integration failed")
_UNAUTHORIZED = _error(401, "unauthorized", "a valid bearer token is required")
_FORBIDDEN = _error(403, "forbidden", "the authorizer denied this request")
_AUTHORIZER_FAILED = _error(500, "authorizer_failed", "the authorizer failed")
_FOREIGN_HOST = _error(
    403,
    "foreign_host",
    "no token exists yet: only a request to a loopback host (localhost, 127.0.0.1, [::1]) "
    "is let through without one",
)
_FOREIGN_ORIGIN = _error(
    403,
    "foreign_origin",
    "no token exists yet: a web page may call without one only from a loopback origin",
)


def invoke(handler: Handler, request: HttpRequest, authorizer: dict[str, Any]) -> HttpResponse:
    """One request through the handler; a raising or malformed handler is a 502, as on AWS."""
    context = LambdaContext(FUNCTION_NAME, INTEGRATION_TIMEOUT_S)
    event = api_gateway_event(request)
    event["requestContext"]["authorizer"] = authorizer
    try:
        result = handler(event, context)
        return http_response(result)
    except Exception:
        logger.exception(
            "ingest handler failed", extra={"method": request.method, "path": _path(request)}
        )
        return _BAD_GATEWAY


def method_arn(request: HttpRequest, stage: str = "local") -> str:
    return (
        f"arn:aws:execute-api:{REGION}:{ACCOUNT}:{API_ID}/{stage}/{request.method}{_path(request)}"
    )


def authorize(
    authorizer: Handler | None, request: HttpRequest, open_access: OpenAccess
) -> dict[str, Any] | HttpResponse:
    """The authorizer context for ``request``, or the answer that refuses it."""
    header = next((v for n, v in request.headers if n.lower() == "authorization"), None)
    if header is None or not header.strip():
        if _loopback(request.source_ip) and open_access():
            return _refuse_web_page(request) or {
                "principalId": "local-loopback",
                **Principal(Scope.ADMIN).context(),
            }
        return _UNAUTHORIZED
    if authorizer is None:
        return _UNAUTHORIZED
    answer = _call_authorizer(authorizer, request, header)
    if isinstance(answer, HttpResponse):
        return answer
    if not _allows(answer, method_arn(request)):
        return _FORBIDDEN
    return {"principalId": answer.get("principalId"), **(answer.get("context") or {})}


def _call_authorizer(authorizer: Handler, request: HttpRequest, header: str) -> Any:
    """The authorizer's answer, or the response API Gateway makes of its failure."""
    event = {"type": "TOKEN", "authorizationToken": header, "methodArn": method_arn(request)}
    try:
        return authorizer(event, LambdaContext(AUTHORIZER_NAME, INTEGRATION_TIMEOUT_S))
    except Exception as exc:
        if str(exc) == "Unauthorized":
            return _UNAUTHORIZED
        logger.exception("authorizer failed", extra={"method": request.method})
        return _AUTHORIZER_FAILED


def _allows(answer: Any, arn: str) -> bool:
    """Whether an authorizer's IAM policy allows ``arn`` (no Deny matching it, an Allow that
    does), with the wildcards API Gateway understands."""

    try:
        statements = answer["policyDocument"]["Statement"]
    except (KeyError, TypeError):
        return False
    allowed = False
    for statement in statements:
        resources = statement.get("Resource", [])
        resources = [resources] if isinstance(resources, str) else resources
        if not any(fnmatch.fnmatchcase(arn, r) for r in resources):
            continue
        if statement.get("Effect") == "Deny":
            return False
        allowed = allowed or statement.get("Effect") == "Allow"
    return allowed


def _loopback(address: str) -> bool:
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _refuse_web_page(request: HttpRequest) -> HttpResponse | None:
    """The refusal of a tokenless request a web page could have made, or None.

    A loopback source address alone proves nothing: the developer's browser is on loopback too,
    and any page it shows can send requests here (a simple cross-origin POST, or its own host
    name re-pointed at 127.0.0.1). What a page cannot forge is the ``Host`` it names (its own,
    under DNS rebinding) and the ``Origin`` the browser adds."""
    hosts = [v for n, v in request.headers if n.lower() == "host"]
    if not hosts or not all(_loopback_authority(host) for host in hosts):
        return _FOREIGN_HOST
    for origin in (v for n, v in request.headers if n.lower() == "origin"):
        parts = urlsplit(origin.strip())
        if (
            parts.scheme not in ("http", "https")
            or parts.path
            or parts.query
            or parts.fragment
            or not _loopback_authority(parts.netloc)
        ):
            return _FOREIGN_ORIGIN
    return None


def _loopback_authority(authority: str) -> bool:
    """Whether ``host[:port]`` names this machine: localhost, 127.0.0.0/8 or [::1]."""
    match = _AUTHORITY.fullmatch(authority.strip())
    if match is None:
        return False
    host = match["name"] or match["ipv6"]
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _path(request: HttpRequest) -> str:
    return request.target.partition("?")[0] or "/"


class ApiServer:
    """Serves ``handler`` behind ``authorizer`` on ``host:port`` (port 0 picks a free one) from
    a background thread. ``open_access`` says whether no token exists yet."""

    def __init__(
        self,
        handler: Handler,
        host: str = "127.0.0.1",
        port: int = 8080,
        *,
        authorizer: Handler | None = None,
        open_access: OpenAccess = lambda: False,
        portal: Handler | None = None,
    ) -> None:
        self.gateway = Gateway(handler, authorizer, open_access, portal)
        self._server = ThreadingHTTPServer((host, port), _request_class(self.gateway))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="ingest-api", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting requests; requests already being handled finish on their threads.
        A server bound but never started just closes its socket (``shutdown`` would wait for a
        loop that never ran)."""
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()


class Gateway:
    """What API Gateway does with one request before and after the integration (see the
    module docstring); ``answer`` is the whole of it, without the HTTP server around it."""

    def __init__(
        self,
        handler: Handler,
        authorizer: Handler | None = None,
        open_access: OpenAccess = lambda: False,
        portal: Handler | None = None,
    ) -> None:
        self._handler = handler
        self._authorizer = authorizer
        self._open_access = open_access
        self._portal = portal
        self._one_at_a_time = threading.Lock()

    def answer(self, request: HttpRequest) -> HttpResponse:
        path = _path(request)
        if self._portal is not None and (path == "/portal" or path.startswith("/portal/")):
            if request.method not in ("GET", "HEAD"):
                return _error(
                    405,
                    "method_not_allowed",
                    f"{request.method} is not allowed here",
                    (("Allow", "GET, HEAD"),),
                )
            return invoke(self._portal, request, {})
        if request.method not in ROUTED_METHODS:
            from tidings.api.app import allowed_methods

            allowed = ", ".join(allowed_methods(_path(request)))
            return _error(
                405,
                "method_not_allowed",
                f"{request.method} is not allowed here",
                (("Allow", allowed),),
            )
        with self._one_at_a_time:
            context = authorize(self._authorizer, request, self._open_access)
            if isinstance(context, HttpResponse):
                return context
            return invoke(self._handler, request, context)


def _request_class(gateway: Gateway) -> type[BaseHTTPRequestHandler]:
    class _Bridge(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "tidings-local"
        # Headers and body leave in separate writes: answer without waiting for delayed ACKs.
        disable_nagle_algorithm = True

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            request = HttpRequest(
                method=self.command,
                target=self.path,
                headers=tuple(self.headers.items()),
                body=body,
                source_ip=str(self.client_address[0]),
            )
            response = gateway.answer(request)
            self.send_response(response.status)
            for name, value in response.headers:
                if name.lower() not in {"content-length", "connection", "transfer-encoding"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        def __getattr__(self, name: str) -> Any:
            # BaseHTTPRequestHandler looks up do_<METHOD>; every method is served (and those
            # API Gateway does not route are answered 405), never a 501 page.
            if name.startswith("do_"):
                return self._serve
            raise AttributeError(name)

        def log_message(self, format: str, *args: Any) -> None:
            # The request line: method, path and query, never headers (the token is in one).
            logger.debug("ingest api request", extra={"line": format % args})

    return _Bridge
