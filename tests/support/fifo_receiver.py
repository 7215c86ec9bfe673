"""A receiver for ordered delivery: it records the messages it takes, in the order it took them.

Each request's messages are read from its body (a FIFO batch's JSON array, or one message whose
``webhook-id`` names it), so a test can compare the order of arrival with the order of the
events. It answers 500 to a chosen message (or a batch holding it) a chosen number of times, and
can take ``latency_ms`` to answer. A message counts as taken when the receiver answered 2xx.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Arrival:
    """One request: the message ids it carried (``msg_<id>`` less its prefix), its headers and
    body, its answer, when it arrived and when it was answered (monotonic seconds)."""

    message_ids: tuple[int, ...]
    headers: dict[str, str]
    body: bytes
    status: int
    at: float
    answered_at: float


@dataclass
class FifoReceiver:
    latency_ms: float = 0.0
    # Message id -> how many more times a request holding it is answered 500.
    fail_times: dict[int, int] = field(default_factory=dict)
    # Message ids answered 400 (a dead letter at once), every time.
    refuse: set[int] = field(default_factory=set)
    arrivals: list[Arrival] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # Requests under way at once, and the most seen.
    in_progress: int = 0
    most_in_progress: int = 0
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/fifo"

    def taken(self) -> list[int]:
        """The message ids answered 2xx, in the order they arrived (repeats included)."""
        with self.lock:
            return [i for a in self.arrivals if 200 <= a.status < 300 for i in a.message_ids]

    def answer(self, message_ids: tuple[int, ...]) -> int:
        with self.lock:
            if any(i in self.refuse for i in message_ids):
                return 400
            for i in message_ids:
                if self.fail_times.get(i, 0) > 0:
                    self.fail_times[i] -= 1
                    return 500
        return 200


def message_ids_of(headers: dict[str, str], body: bytes) -> tuple[int, ...]:
    """The message ids a request carries."""
    webhook_id = headers.get("webhook-id", "")
    if webhook_id.startswith("batch_"):
        return tuple(int(element["id"].removeprefix("msg_")) for element in json.loads(body))
    return (int(webhook_id.removeprefix("msg_")),)


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        receiver = self.server.receiver
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        headers = {k.lower(): v for k, v in self.headers.items()}
        ids = message_ids_of(headers, body)
        arrived = time.monotonic()
        with receiver.lock:
            receiver.in_progress += 1
            receiver.most_in_progress = max(receiver.most_in_progress, receiver.in_progress)
        try:
            if receiver.latency_ms:
                time.sleep(receiver.latency_ms / 1000)
            status = receiver.answer(ids)
            with receiver.lock:
                receiver.arrivals.append(
                    Arrival(ids, headers, body, status, arrived, time.monotonic())
                )
        finally:
            with receiver.lock:
                receiver.in_progress -= 1
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    receiver: FifoReceiver


@contextmanager
def running_fifo_receiver(**options: Any) -> Iterator[FifoReceiver]:
    receiver = FifoReceiver(**options)
    server = _Server(("127.0.0.1", 0), _Handler)
    server.receiver = receiver
    receiver.server = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
