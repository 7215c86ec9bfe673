"""Webhook receivers on 127.0.0.1 whose behaviour is chosen by the request path.

Paths (all answer POST):
- ``/ok``: 200 with a short body;
- ``/status/<code>``: that status (``/status/500``, ``/status/410``, ``/status/400``);
- ``/retry-after/<code>/<value>``: that status with ``Retry-After: <value>`` (percent-decoded);
- ``/slow/<ms>``: 200 after ``ms`` milliseconds;
- ``/hang``: never answers (until the receiver stops);
- ``/reset``: reads the request, then resets the connection (TCP RST);
- ``/big/<bytes>``: 200 with a body of that many bytes;
- ``/hold``: answers 200 only once ``release()`` is called (or the receiver stops);
- ``/outage``: 503 while ``down`` is set, else 200 (a receiver that is down, then back);
- ``/cookie``: 200 with a ``Set-Cookie`` header;
- ``/say/<code>/<text>``: that status with ``<text>`` as the body;
- ``/trickle``: a status line, then one header byte every 100 ms for five seconds, so that no
  single read waits long enough to time out.
Every request is recorded with its headers and body; accepted connections are counted.
"""

from __future__ import annotations

import socket
import ssl
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class ReceivedRequest:
    path: str
    headers: dict[str, str]
    body: bytes
    received_at: float


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    receiver: Receiver

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = super().get_request()
        with self.receiver.lock:
            self.receiver.connections += 1
        return conn, address


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    # Headers and body leave in separate writes; Nagle would hold the body for an ACK.
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        receiver = self.server.receiver
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        request = ReceivedRequest(
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            received_at=time.monotonic(),
        )
        with receiver.lock:
            receiver.requests.append(request)
        receiver.request_arrived.set()
        kind, args = _behaviour(self.path, receiver)
        if kind == "ok":
            self._answer(200, b"thanks")
        elif kind == "status":
            self._answer(int(args[0]), f"status {args[0]}".encode())
        elif kind == "retry-after":
            value = unquote(args[1]) if len(args) > 1 else ""
            self._answer(int(args[0]), b"later", {"Retry-After": value})
        elif kind == "slow":
            time.sleep(int(args[0]) / 1000)
            self._answer(200, b"slowly")
        elif kind == "hang":
            receiver.stopping.wait(60)
        elif kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
        elif kind == "big":
            self._answer(200, b"x" * int(args[0]))
        elif kind == "trickle":
            self._trickle(receiver)
        elif kind == "say":
            self._answer(int(args[0]), args[1].encode())
        elif kind == "cookie":
            self._answer(200, b"have one", {"Set-Cookie": "session=abc; Path=/"})
        elif kind == "hold":
            receiver.released.wait(60)
            self._answer(200, b"held")
        else:
            self._answer(404, b"no such behaviour")

    def _trickle(self, receiver: Receiver) -> None:
        try:
            self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            for _ in range(50):
                if receiver.stopping.wait(0.1):
                    break
                self.wfile.write(b"z")
        except OSError:
            pass
        self.close_connection = True

    def _answer(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            # The client gave up (its timeout); nothing left to tell it.
            self.close_connection = True


def _behaviour(path: str, receiver: Receiver) -> tuple[str, list[str]]:
    """What a path asks for: a kind and its arguments."""
    parts = path.strip("/").split("/")
    if parts[0] == "outage":
        return ("status", ["503"]) if receiver.down.is_set() else ("ok", [])
    return parts[0], parts[1:]


class Receiver:
    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.lock = threading.Lock()
        self.requests: list[ReceivedRequest] = []
        self.connections = 0
        self.request_arrived = threading.Event()
        self.released = threading.Event()
        self.down = threading.Event()
        self.stopping = threading.Event()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.receiver = self
        self.scheme = "http"
        if tls is not None:
            # Handshakes happen as connections are accepted; one that fails is dropped.
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}/{path.lstrip('/')}"

    def requests_to(self, path: str) -> list[ReceivedRequest]:
        with self.lock:
            return [r for r in self.requests if r.path == "/" + path.lstrip("/")]

    def release(self) -> None:
        self.released.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.stopping.set()
        self.released.set()
        self._server.shutdown()
        self._server.server_close()


@contextmanager
def running_receiver(tls: ssl.SSLContext | None = None) -> Iterator[Receiver]:
    """A receiver on loopback; with ``tls``, one that speaks HTTPS with that server context."""
    receiver = Receiver(tls)
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()
