"""A token never appears in a log line: made, listed, presented valid, forged, revoked or
malformed, through the authorizer, the ingest function, the local API server over HTTP and the
command line, with every logger at DEBUG."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import requests

from tests.integration.api.conftest import Gateway
from tidings import wiring
from tidings.cli import main
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.api_server import ApiServer
from tidings.local.lambda_env import load_handler
from tidings.logic import tokens
from tidings.observability import logger

MARKER = "log-capture-works-7f3a"


@pytest.fixture
def everything_logged(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    previous = logger.log_level
    logger.setLevel("DEBUG")
    caplog.set_level(logging.DEBUG)
    try:
        yield caplog
    finally:
        logger.setLevel(previous)


def logged_text(capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> str:
    # A line logged now must show up below, or the capture sees nothing and proves nothing.
    logger.debug("capture check", extra={"marker": MARKER})
    captured = capfd.readouterr()
    text = captured.out + captured.err + caplog.text
    text += "".join(str(r.__dict__) for r in caplog.records)
    assert MARKER in text
    return text


def test_tokens_are_not_logged_by_the_authorizer_or_the_api(
    gateway: Gateway,
    db: Database,
    everything_logged: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    admin = tokens.create_token(db, scope="admin").token
    made = gateway.call("POST", "/v1/tokens", {"scope": "producer"}, token=admin).body["token"]
    gateway.call("GET", "/v1/tokens", token=admin)
    gateway.call("POST", "/v1/events", {"event_type": "t", "payload": {}}, token=made)
    forged = made[:12] + ("A" if made[12] != "A" else "B") + made[13:]
    gateway.call("GET", "/v1/messages", token=forged)
    gateway.call("GET", "/v1/messages", token=f"{made} trailing")
    tokens.revoke_token(db, 2)
    gateway.call("GET", "/v1/messages", token=made)
    text = logged_text(capfd, everything_logged)
    for token in (admin, made, forged, made[12:]):
        assert token not in text


def test_tokens_are_not_logged_when_the_authorizer_fails(
    settings: Settings,
    db: Database,
    everything_logged: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from tidings.local.api_server import Gateway as LocalGateway

    token = tokens.create_token(db, scope="admin").token
    unreachable = lambda: Database(  # noqa: E731
        "postgresql://nobody@127.0.0.1:9/none", max_retries=0
    )
    with wiring.overridden(settings=settings, database_factory=unreachable):
        local = Gateway(LocalGateway(load_handler("ingest"), load_handler("authorizer")))
        reply = local.call("GET", "/v1/endpoints", token=token)
    assert reply.status == 500
    assert token not in logged_text(capfd, everything_logged)


def test_tokens_are_not_logged_by_the_local_api_server(
    database_url: str,
    settings: Settings,
    db: Database,
    everything_logged: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    token = tokens.create_token(db, scope="admin").token
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        server = ApiServer(load_handler("ingest"), port=0, authorizer=load_handler("authorizer"))
        server.start()
        try:
            ok = requests.get(
                f"{server.url}/v1/endpoints",
                headers={"Authorization": f"Bearer {token}"},
                timeout=10,
            )
            bad = requests.get(
                f"{server.url}/v1/endpoints?x=1",
                headers={"Authorization": f"Bearer {token[:-1]}X"},
                timeout=10,
            )
        finally:
            server.stop()
    assert (ok.status_code, bad.status_code) == (200, 401)
    text = logged_text(capfd, everything_logged)
    assert "GET /v1/endpoints?x=1" in text  # the request lines are there, the tokens are not
    assert token not in text and token[:-1] + "X" not in text


def test_the_command_line_prints_a_token_once_and_logs_none(
    database_url: str,
    monkeypatch: pytest.MonkeyPatch,
    everything_logged: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert main(["tokens", "create", "--scope", "admin", "--json"]) == 0
    printed = capfd.readouterr().out
    token = printed.split('"token": "', 1)[1].split('"', 1)[0]
    assert tokens.is_token(token)
    assert main(["tokens", "list"]) == 0
    assert main(["tokens", "revoke", "1"]) == 0
    text = logged_text(capfd, everything_logged)
    assert token not in text


def test_the_client_and_the_remote_command_line_log_no_token_nor_secret(  # noqa: PLR0917
    database_url: str,
    settings: Settings,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    everything_logged: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """``tidings.client`` (with its retries, which urllib3 logs) and the command line over the
    API print the tokens and secrets they are asked for, once, and log none of them."""
    from tidings.client import ApiUnreachable, Client

    admin = tokens.create_token(db, scope="admin").token
    shown: list[str] = []
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        server = ApiServer(load_handler("ingest"), port=0, authorizer=load_handler("authorizer"))
        server.start()
        try:
            with Client(server.url, admin) as client:
                shown.append(client.create_token("producer").token)
                endpoint = client.create_endpoint("https://93.184.215.14/hook")
                shown += [
                    endpoint.secret,
                    client.rotate_secret(endpoint.id).secret,
                    client.reveal_secret(endpoint.id).secret,
                ]
                client.send_event("t", {"n": 1}, event_id="e-1")
            with (
                Client("http://127.0.0.1:9", admin, retries=2, backoff_s=0.01) as away,
                pytest.raises(ApiUnreachable),
            ):
                away.list_endpoints()
            monkeypatch.delenv("DATABASE_URL", raising=False)
            monkeypatch.setenv("TIDINGS_API_URL", server.url)
            monkeypatch.setenv("TIDINGS_TOKEN", admin)
            assert main(["tokens", "create", "--scope", "producer", "--json"]) == 0
            assert main(["endpoints", "rotate-secret", str(endpoint.id), "--json"]) == 0
            assert main(["tokens", "list"]) == 0
            assert main(["--token", admin[:-1] + "x", "tokens", "list"]) == 1
        finally:
            server.stop()
    printed = capfd.readouterr()
    for line in printed.out.splitlines():
        if '"token": "' in line or '"secret": "' in line:
            shown.append(line.split('": "', 1)[1].split('"', 1)[0])
    assert len(shown) == 6
    assert not any(secret in printed.err for secret in [*shown, admin])
    text = logged_text(capfd, everything_logged)
    assert "/v1/tokens" in text  # the requests were logged, the credentials were not
    for secret in [admin, admin[:-1] + "x", *shown]:
        assert secret not in text
