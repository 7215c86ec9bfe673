"""The local API before its first token: it lets through what the developer sends from this
machine (curl, a script) and nothing a web page in the developer's browser could send, whether
the page reaches it through DNS rebinding (its own host name in ``Host``), by a cross-origin
request (its own ``Origin``) or by a body without a JSON content type.

The requests go over real HTTP to the real authorizer and ingest handlers, as ``tidings dev``
serves them, and each refusal is checked to have made no token.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from typing import Any

import pytest

from tidings import wiring
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.api_server import ApiServer
from tidings.local.lambda_env import load_handler
from tidings.local.runtime import OpenAccess

TOKEN_REQUEST = json.dumps({"scope": "admin"})


@pytest.fixture
def server(database_url: str) -> Iterator[ApiServer]:
    with wiring.overridden(
        settings=Settings(database_url=database_url),
        database_factory=lambda: Database(database_url),
    ):
        api = ApiServer(
            load_handler("ingest"),
            port=0,
            authorizer=load_handler("authorizer"),
            open_access=OpenAccess(),
        )
        api.start()
        try:
            yield api
        finally:
            api.stop()


def post(server: ApiServer, headers: dict[str, str], body: str = TOKEN_REQUEST) -> Any:
    """POST /v1/tokens with exactly ``headers`` (``Host`` included: http.client adds none)."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest("POST", "/v1/tokens", skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            conn.putheader(name, value.replace("PORT", port))
        conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body.encode())
        response = conn.getresponse()
        return response.status, json.loads(response.read() or b"null")
    finally:
        conn.close()


def tokens_made(database_url: str) -> int:
    db = Database(database_url)
    try:
        with db.cursor() as cur:
            cur.execute("SELECT count(*) FROM tidings.tokens")
            row = cur.fetchone()
        assert row is not None
        return int(row[0])
    finally:
        db.close()


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        # DNS rebinding: the page's own name, re-pointed at 127.0.0.1.
        ({"Host": "rebind.attacker.example:PORT", **JSON}, 403, "foreign_host"),
        ({"Host": "127.0.0.1.attacker.example:PORT", **JSON}, 403, "foreign_host"),
        ({"Host": "localhost.attacker.example", **JSON}, 403, "foreign_host"),
        ({**JSON}, 403, "foreign_host"),
        # A page elsewhere calling across origins (or a sandboxed one: "null").
        (
            {"Host": "127.0.0.1:PORT", "Origin": "https://attacker.example", **JSON},
            403,
            "foreign_origin",
        ),
        ({"Host": "127.0.0.1:PORT", "Origin": "null", **JSON}, 403, "foreign_origin"),
        (
            {"Host": "localhost:PORT", "Origin": "http://localhost.attacker.example", **JSON},
            403,
            "foreign_origin",
        ),
        # A body a page can send without the browser asking first: none or a form's type.
        ({"Host": "127.0.0.1:PORT"}, 415, "unsupported_media_type"),
        ({"Host": "127.0.0.1:PORT", "Content-Type": "text/plain"}, 415, "unsupported_media_type"),
    ],
)
def test_what_a_web_page_could_send_is_refused_and_makes_no_token(
    server: ApiServer, database_url: str, headers: dict[str, str], status: int, code: str
) -> None:
    answer_status, body = post(server, headers)
    assert (answer_status, body["error"]["code"]) == (status, code)
    assert tokens_made(database_url) == 0


@pytest.mark.parametrize(
    "headers",
    [
        {"Host": "127.0.0.1:PORT", **JSON},
        {"Host": "localhost:PORT", "Content-Type": "application/json; charset=utf-8"},
        {"Host": "LOCALHOST", **JSON},
        {"Host": "[::1]:PORT", **JSON},
        {"Host": "[::1]", **JSON},
        {"Host": "127.0.0.1:PORT", "Origin": "http://127.0.0.1:PORT", **JSON},
        {"Host": "localhost:PORT", "Origin": "http://localhost:3000", **JSON},
        {"Host": "[::1]:PORT", "Origin": "http://[::1]:PORT", **JSON},
    ],
)
def test_what_the_developer_sends_from_this_machine_makes_the_first_token(
    server: ApiServer, database_url: str, headers: dict[str, str]
) -> None:
    status, body = post(server, headers)
    assert status == 201, body
    assert body["scope"] == "admin" and body["token"].startswith("tdg_")
    # The first token ends the open access, whatever the request.
    assert post(server, headers)[0] == 401
