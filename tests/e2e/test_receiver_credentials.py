"""Receivers that demand credentials, through ``tidings dev``.

Four receivers on loopback: one refuses requests without its static header, one wants HTTP
Basic, one accepts only OAuth2 tokens from a local token server (which gives tokens that expire
in a few seconds, answers one token request with 500, and whose receiver answers one request
made with a good token with 401 to force a refresh), and one is a TLS server that requires a
client certificate from a CA made in the test (its own certificate from that CA too, which the
endpoint trusts instead of the public roots). Every message reaches each receiver, signed and
naming its event type; the token server sees one token request per expiry, not one per delivery;
the failed token request is an ``auth_failed`` attempt, retried; no credential, token or key
shows in any log or attempt excerpt.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import message_states, progress_table, wait_until
from tests.support.secrets import secrets_keyring
from tests.support.tls import TestCa
from tests.support.webhooks import standard_verifier
from tidings.dal.connection import Database, fetch_dicts
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.local.runtime import dev_settings

REPOSITORY = Path(__file__).resolve().parents[2]
MESSAGES_PER_WAVE = 6
TOKEN_LIFETIME_S = 3
API_KEY = "zoo-api-key-" + secrets.token_hex(8)
USERNAME, PASSWORD = "tidings", "zoo-password-" + secrets.token_hex(8)
CLIENT_ID, CLIENT_SECRET = "tidings-client", "zoo-client-secret-" + secrets.token_hex(8)
SETTINGS = {
    "TIDINGS_HTTP_TIMEOUT_S": "3",
    "TIDINGS_MAX_ATTEMPTS": "6",
    "TIDINGS_BACKOFF_BASE_S": "0.2",
    "TIDINGS_BACKOFF_MAX_S": "0.5",
    "TIDINGS_CIRCUIT_COOLDOWN_S": "0.5",
    "TIDINGS_CIRCUIT_MAX_COOLDOWN_S": "1",
    "TIDINGS_CLAIM_IDLE_POLL_S": "0.1",
    "TIDINGS_CLAIM_STOP_BEFORE_TIMEOUT_S": "1",
    "TIDINGS_LEASE_S": "20",
}


@dataclass
class Tally:
    """What one receiver saw."""

    secret: str = ""
    accepted: dict[str, int] = field(default_factory=dict)
    refused: int = 0
    bad: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class TokenServer:
    """Issues short-lived bearer tokens for the client credentials; one request gets a 500."""

    def __init__(self) -> None:
        self.requests = 0
        self.tokens: dict[str, float] = {}
        self.lock = threading.Lock()
        self.fail_request = 2
        self.malformed: list[str] = []

    def answer(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, bytes]:
        with self.lock:
            self.requests += 1
            number = self.requests
        expected = "Basic " + base64.b64encode(f"{CLIENT_ID}:{CLIENT_SECRET}".encode()).decode()
        form = dict(pair.split("=", 1) for pair in body.decode().split("&") if "=" in pair)
        if handler.headers.get("Authorization") != expected:
            self.malformed.append("client authentication")
            return 401, b"{}"
        if form.get("grant_type") != "client_credentials" or form.get("scope") != "webhooks":
            self.malformed.append(f"form {sorted(form)}")
            return 400, b"{}"
        if number == self.fail_request:
            return 500, b'{"error": "temporarily_unavailable"}'
        token = "tok-" + secrets.token_hex(16)
        with self.lock:
            self.tokens[token] = time.monotonic() + TOKEN_LIFETIME_S
        answer = {"access_token": token, "token_type": "Bearer", "expires_in": TOKEN_LIFETIME_S}
        return 200, json.dumps(answer).encode()

    def valid(self, token: str) -> bool:
        with self.lock:
            return self.tokens.get(token, 0) > time.monotonic()

    def revoke(self, token: str) -> None:
        with self.lock:
            self.tokens.pop(token, None)


def _server(
    check: Callable[[BaseHTTPRequestHandler, bytes], tuple[int, bytes]],
    context: ssl.SSLContext | None = None,
) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            status, answer = check(self, body)
            self.send_response(status)
            self.send_header("Content-Length", str(len(answer)))
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _receiver(
    tally: Tally, event_type: str, authorized: Callable[[BaseHTTPRequestHandler], bool]
) -> Callable[[BaseHTTPRequestHandler, bytes], tuple[int, bytes]]:
    def check(handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, bytes]:
        if not authorized(handler):
            with tally.lock:
                tally.refused += 1
            return 401, b'{"error": "unauthorized"}'
        headers = {k.lower(): v for k, v in handler.headers.items()}
        with tally.lock:
            if not standard_verifier(tally.secret, body, headers):
                tally.bad.append("signature")
            if headers.get("webhook-event-type") != event_type:
                tally.bad.append(f"event type {headers.get('webhook-event-type')}")
            wid = headers.get("webhook-id", "")
            tally.accepted[wid] = tally.accepted.get(wid, 0) + 1
        return 200, b'{"ok": true}'

    return check


@pytest.fixture
def servers() -> Iterator[list[ThreadingHTTPServer]]:
    started: list[ThreadingHTTPServer] = []
    yield started
    for server in started:
        server.shutdown()
        server.server_close()


def _enqueue(db: Database, wave: int) -> None:
    events = [
        DemoEvent(f"creds.{kind}", f"{kind}-{wave}-{n}", {"n": n, "wave": wave})
        for kind in ("header", "basic", "oauth2", "mtls")
        for n in range(MESSAGES_PER_WAVE)
    ]
    db.run(lambda cur: enqueue_events(cur, events), transaction=True)


def _attempts(db: Database) -> list[dict[str, Any]]:
    def read(cur: Any) -> list[dict[str, Any]]:
        cur.execute(
            "SELECT endpoint_id, error_class, status_code, response_excerpt FROM tidings.attempts"
        )
        return fetch_dicts(cur)

    return db.run(read)


@pytest.mark.slow
def test_every_kind_of_receiver_credential_works_through_tidings_dev(
    database_url: str, tmp_path: Path, servers: list[ThreadingHTTPServer]
) -> None:
    from tidings.logic.endpoints import create_endpoint

    ca = TestCa()
    server_cert = ca.issue("127.0.0.1", server=True)
    client_cert = ca.issue("tidings-sender")
    tallies = {kind: Tally() for kind in ("header", "basic", "oauth2", "mtls")}
    tokens = TokenServer()
    forced_401: list[str] = []
    used_tokens: set[str] = set()

    def oauth2_authorized(handler: BaseHTTPRequestHandler) -> bool:
        value = handler.headers.get("Authorization", "")
        token = value.removeprefix("Bearer ")
        if not value.startswith("Bearer ") or not tokens.valid(token):
            return False
        if token in used_tokens and not forced_401:
            # Once, a token that worked before is refused: the sender must get a new one.
            forced_401.append(token)
            tokens.revoke(token)
            return False
        used_tokens.add(token)
        return True

    basic = "Basic " + base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode()
    checks = {
        "header": lambda h: h.headers.get("X-Api-Key") == API_KEY,
        "basic": lambda h: h.headers.get("Authorization") == basic,
        "oauth2": oauth2_authorized,
        "mtls": lambda h: True,
    }
    for kind in ("header", "basic", "oauth2"):
        servers.append(_server(_receiver(tallies[kind], f"creds.{kind}", checks[kind])))
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    (tmp_path / "server.pem").write_text(server_cert.certificate_pem + server_cert.private_key_pem)
    server_context.load_cert_chain(str(tmp_path / "server.pem"))
    server_context.verify_mode = ssl.CERT_REQUIRED
    server_context.load_verify_locations(cadata=ca.pem)
    servers.append(
        _server(_receiver(tallies["mtls"], "creds.mtls", checks["mtls"]), server_context)
    )
    token_server = _server(tokens.answer)
    servers.append(token_server)
    ports = {kind: servers[i].server_address[1] for i, kind in enumerate(tallies)}

    db = Database(database_url)
    settings = dev_settings({}, database_url=database_url)
    credentials: dict[str, dict[str, Any]] = {
        "header": {"headers": {"X-Api-Key": API_KEY}},
        "basic": {"auth": {"type": "basic", "username": USERNAME, "password": PASSWORD}},
        "oauth2": {
            "auth": {
                "type": "oauth2_client_credentials",
                "token_url": f"http://127.0.0.1:{token_server.server_address[1]}/token",
                "client_id": CLIENT_ID,
                "client_secret": CLIENT_SECRET,
                "scope": "webhooks",
            }
        },
        "mtls": {
            "tls_client_certificate": client_cert.as_credential(),
            "tls_server_ca_pem": ca.pem,
        },
    }
    kind_of: dict[int, str] = {}
    for kind, fields in credentials.items():
        scheme = "https" if kind == "mtls" else "http"
        created = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=f"{scheme}://127.0.0.1:{ports[kind]}/hook",
            event_types=[f"creds.{kind}"],
            settings=settings,
            **fields,
        )
        tallies[kind].secret = created.secret
        kind_of[created.id] = kind
    _enqueue(db, 0)

    env = {
        **os.environ,
        **SETTINGS,
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(REPOSITORY / "layers" / "tidings"),
        "POWERTOOLS_LOG_LEVEL": "DEBUG",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    out_path, err_path = tmp_path / "out.log", tmp_path / "err.log"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from tidings.cli import main; sys.exit(main())",
                "dev",
                "--no-api",
                "--data-dir",
                str(tmp_path / "data"),
                "--senders",
                "1",
            ],
            env=env,
            stdout=out,
            stderr=err,
        )
    total = 4 * MESSAGES_PER_WAVE

    def delivered() -> int:
        return sum(row["status"] == "delivered" for row in message_states(db))

    try:
        wait_until(
            lambda: "tidings dev: ready" in out_path.read_text(),
            60,
            "the ready line",
            lambda: err_path.read_text()[-3000:],
        )
        wait_until(
            lambda: delivered() == total,
            90,
            "the first wave to be delivered",
            lambda: progress_table(db) + "\n" + err_path.read_text()[-3000:],
        )
        # The tokens expire meanwhile: the second wave needs a new one.
        time.sleep(TOKEN_LIFETIME_S + 1)
        _enqueue(db, 1)
        total *= 2
        wait_until(
            lambda: delivered() == total,
            90,
            "the second wave to be delivered",
            lambda: progress_table(db) + "\n" + err_path.read_text()[-3000:],
        )
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0, err_path.read_text()[-3000:]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
    log = out_path.read_text() + err_path.read_text()

    for kind, tally in tallies.items():
        assert tally.bad == [], (kind, tally.bad)
        assert len(tally.accepted) == 2 * MESSAGES_PER_WAVE, (kind, tally.accepted)
    assert tallies["header"].refused == tallies["basic"].refused == 0
    assert tokens.malformed == []
    # One 401 forced a refresh within its attempt; the 500 made one attempt auth_failed.
    assert len(forced_401) == 1
    attempts = _attempts(db)
    auth_failed = [a for a in attempts if a["error_class"] == "auth_failed"]
    assert len(auth_failed) >= 1
    assert all("HTTP 500" in (a["response_excerpt"] or "") for a in auth_failed), auth_failed
    assert {kind_of[a["endpoint_id"]] for a in auth_failed} == {"oauth2"}
    # One token per expiry (two waves), plus the failed request and the forced refresh; far
    # fewer than the deliveries.
    assert tokens.requests <= 5, tokens.requests
    assert tokens.requests < len(tallies["oauth2"].accepted) / 2

    # No credential, token or key in any log or attempt excerpt.
    secret_texts = [API_KEY, PASSWORD, CLIENT_SECRET, *tokens.tokens, *used_tokens]
    secret_texts.append(client_cert.private_key_pem.splitlines()[1])
    secret_texts.append(base64.b64encode(f"{USERNAME}:{PASSWORD}".encode()).decode())
    excerpts = json.dumps([a["response_excerpt"] for a in attempts])
    for text in secret_texts:
        assert text not in log
        assert text not in excerpts
    db.close()
