"""The ingest API on localhost: real HTTP requests in, API Gateway proxy events to the handler."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tidings.local.lambda_env import (
    Handler,
    HttpRequest,
    HttpResponse,
    LambdaContext,
    api_gateway_event,
    http_response,
)
from tidings.observability import logger

FUNCTION_NAME = "tidings-ingest"
# API Gateway gives an integration at most 29 seconds.
INTEGRATION_TIMEOUT_S = 29.0
_BAD_GATEWAY = HttpResponse(
    status=502,
    headers=(("Content-Type", "application/json"),),
    body=json.dumps({"message": "Internal server error"}).encode(),
)


def invoke(handler: Handler, request: HttpRequest) -> HttpResponse:
    """One request through the handler; a raising or malformed handler is a 502, as on AWS."""
    context = LambdaContext(FUNCTION_NAME, INTEGRATION_TIMEOUT_S)
    try:
        result = handler(api_gateway_event(request), context)
        return http_response(result)
    except Exception:
        logger.exception(
            "ingest handler failed", extra={"method": request.method, "target": request.target}
        )
        return _BAD_GATEWAY


class ApiServer:
    """Serves ``handler`` on ``host:port`` (port 0 picks a free one) from a background thread."""

    def __init__(self, handler: Handler, host: str = "127.0.0.1", port: int = 8080) -> None:
        self._handler = handler
        self._server = ThreadingHTTPServer((host, port), _request_class(handler))
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
        """Stop accepting requests; requests already being handled finish on their threads."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()


def _request_class(handler: Handler) -> type[BaseHTTPRequestHandler]:
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
            response = invoke(handler, request)
            self.send_response(response.status)
            for name, value in response.headers:
                if name.lower() not in {"content-length", "connection", "transfer-encoding"}:
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(response.body)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("ingest api request", extra={"line": format % args})

    return _Bridge
