"""When the client sends a request again, against a scripted server on loopback: a safe request
(a GET, an event with its event id, a recovery) after an answer saying to try later (429, 502,
503, 504) or no answer in time; any other request only when it could not be sent at all."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tidings.client import (
    ApiUnreachable,
    Client,
    EventToSend,
    RateLimited,
    ServerError,
    Unauthorized,
    UnexpectedAnswer,
)

SENT = {"event_type": "t", "event_id": "e-1", "created": True, "message_ids": [1]}
PAGE = {"items": [], "next_cursor": None}
BUSY = {"error": {"code": "busy", "message": "the database is busy or unreachable; retry later"}}


@dataclass
class Answer:
    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    raw: bytes | None = None


@dataclass
class Script:
    answers: list[Answer]
    seen: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self, method: str, path: str) -> Answer:
        with self.lock:
            self.seen.append((method, path))
            # The last answer repeats.
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]


def _handler(script: Script) -> type[BaseHTTPRequestHandler]:
    class Scripted(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            answer = script.next(self.command, self.path)
            time.sleep(answer.delay_s)
            body = answer.raw if answer.raw is not None else b""
            if answer.body is not None:
                body = json.dumps(answer.body).encode()
            try:
                self.send_response(answer.status)
                for name, value in {"Content-Type": "application/json", **answer.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up waiting

        do_GET = do_POST = do_PATCH = do_DELETE = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Scripted


@pytest.fixture
def scripted() -> Iterator[tuple[Script, str]]:
    script = Script([Answer(200, PAGE)])
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield script, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def client(url: str, **options: Any) -> Client:
    return Client(url, "tdg_" + "x" * 43, backoff_s=0.01, **options)


def test_a_get_is_sent_again_after_try_later_answers(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.answers = [
        Answer(503, BUSY),
        Answer(502, {"message": "Internal server error"}),
        Answer(429, {"error": {"code": "too_many_requests", "message": "slow down"}}),
        Answer(504),
        Answer(200, PAGE),
    ]
    assert client(url).list_endpoints().items == []
    assert len(script.seen) == 5


def test_retry_after_is_honoured(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.answers = [Answer(429, {}, {"Retry-After": "1"}), Answer(200, PAGE)]
    started = time.monotonic()
    client(url).list_messages()
    assert time.monotonic() - started >= 0.9
    assert len(script.seen) == 2


def test_an_event_with_its_id_is_sent_again_one_without_is_not(
    scripted: tuple[Script, str],
) -> None:
    script, url = scripted
    script.answers = [Answer(503, BUSY), Answer(202, SENT)]
    assert client(url).send_event("t", {}, event_id="e-1").created
    assert script.seen == [("POST", "/v1/events")] * 2

    script.seen.clear()
    script.answers = [Answer(503, BUSY), Answer(202, SENT)]
    with pytest.raises(ServerError) as busy:
        client(url).send_event("t", {})
    assert (busy.value.status, busy.value.code) == (503, "busy")
    assert len(script.seen) == 1

    # A batch is safe when every event carries its id.
    script.seen.clear()
    script.answers = [Answer(503, BUSY), Answer(202, {"results": [SENT]})]
    assert client(url).send_events([EventToSend("t", {}, "e-1")])[0].created
    assert len(script.seen) == 2
    script.seen.clear()
    script.answers = [Answer(503, BUSY), Answer(202, {"results": [SENT, SENT]})]
    with pytest.raises(ServerError):
        client(url).send_events([EventToSend("t", {}, "e-1"), EventToSend("t", {})])
    assert len(script.seen) == 1


def test_requests_that_change_things_are_not_sent_twice(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.answers = [Answer(503, BUSY)]
    api = client(url)
    for call in (
        lambda: api.resend_message(1),
        lambda: api.rotate_secret(1),
        lambda: api.delete_endpoint(1),
        lambda: api.update_endpoint(1, enabled=False),
        lambda: api.replay_dead_letters(endpoint_id=1),
        lambda: api.create_token("admin"),
    ):
        script.seen.clear()
        with pytest.raises(ServerError):
            call()
        assert len(script.seen) == 1, script.seen


def test_a_safe_request_gives_up_after_its_retries_with_the_last_answer(
    scripted: tuple[Script, str],
) -> None:
    script, url = scripted
    script.answers = [Answer(503, BUSY)]
    with pytest.raises(ServerError) as busy:
        client(url, retries=2).get_endpoint(1)
    assert busy.value.code == "busy"
    assert len(script.seen) == 3
    script.seen.clear()
    script.answers = [Answer(429, {"error": {"code": "throttled", "message": "slow down"}})]
    with pytest.raises(RateLimited):
        client(url, retries=1).get_endpoint(1)
    assert len(script.seen) == 2


def test_no_answer_in_time(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    # A GET that times out is asked again.
    script.answers = [Answer(200, PAGE, delay_s=1.5), Answer(200, PAGE)]
    assert client(url, timeout_s=0.5).list_tokens().items == []
    assert len(script.seen) == 2
    # An event without its id may have been recorded: it is not sent again.
    script.seen.clear()
    script.answers = [Answer(202, SENT, delay_s=1.5)]
    with pytest.raises(ApiUnreachable, match="no answer in time"):
        client(url, timeout_s=0.5).send_event("t", {})
    assert len(script.seen) == 1


def test_answers_that_are_not_the_apis(scripted: tuple[Script, str]) -> None:
    script, url = scripted
    script.answers = [Answer(200, raw=b"<html>a login page</html>", headers={"X": "y"})]
    with pytest.raises(UnexpectedAnswer, match="not JSON"):
        client(url).list_endpoints()
    script.answers = [Answer(200, {"items": "nope", "next_cursor": None})]
    with pytest.raises(UnexpectedAnswer, match=r"EndpointPage\.items is not list"):
        client(url).list_endpoints()
    script.answers = [Answer(401, raw=b"Unauthorized")]
    with pytest.raises(Unauthorized) as refused:
        client(url).list_endpoints()
    assert (refused.value.code, refused.value.message) == ("http_401", "Unauthorized")


def test_a_request_that_could_not_be_sent_is_sent_again() -> None:
    """Nothing listens at first: even a request that changes things is tried again, since it
    never left; once something listens, it goes through, once."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    created = {
        "id": 2,
        "prefix": "tdg_abcdefgh",
        "scope": "admin",
        "application": None,
        "description": "",
        "created_at": "2026-01-01T00:00:00Z",
        "expires_at": None,
        "revoked_at": None,
        "token": "tdg_" + "y" * 43,
    }
    script = Script([Answer(201, created)])
    started: list[ThreadingHTTPServer] = []

    def listen_later() -> None:
        time.sleep(0.5)
        server = ThreadingHTTPServer(("127.0.0.1", port), _handler(script))
        started.append(server)
        server.serve_forever()

    threading.Thread(target=listen_later, daemon=True).start()
    try:
        api = Client(f"http://127.0.0.1:{port}", "tdg_" + "x" * 43, retries=6, backoff_s=0.2)
        made = api.create_token("admin")
        assert made.created_at.isoformat() == "2026-01-01T00:00:00+00:00"
        assert script.seen == [("POST", "/v1/tokens")]
    finally:
        for server in started:
            server.shutdown()
            server.server_close()
    # Nothing ever listening: the failure is named, after the retries.
    with pytest.raises(ApiUnreachable, match="the connection failed"):
        client("http://127.0.0.1:9", retries=2).create_token("admin")
