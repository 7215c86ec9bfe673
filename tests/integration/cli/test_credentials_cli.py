"""Receiver credentials through the CLI: set on add, replaced and removed on update, shown
redacted by ``show``; bad input exits non-zero and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cli.test_operator_cli import cli  # noqa: F401 - the fixture
from tests.support.tls import TestCa
from tidings.dal.connection import Database

ADD = ["endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "*"]
API_KEY = "cli-api-key-0123456789-abcd"
PASSWORD = "cli-password-0123456789-efgh"


def _kinds(db: Database) -> list[str]:
    with db.cursor() as cur:
        cur.execute("SELECT kind FROM tidings.endpoint_credentials ORDER BY kind")
        return [str(row[0]) for row in cur.fetchall()]


def test_credentials_are_set_shown_redacted_replaced_and_removed(
    cli: Any,  # noqa: F811
    db: Database,
    tmp_path: Path,
) -> None:
    ca = TestCa()
    client = ca.issue("cli-client")
    (tmp_path / "cert.pem").write_text(client.certificate_pem)
    (tmp_path / "key.pem").write_text(client.private_key_pem)
    (tmp_path / "ca.pem").write_text(ca.pem)
    code, out, err = cli(
        *ADD,
        "--header",
        f"X-Api-Key: {API_KEY}",
        "--basic-auth",
        f"user:{PASSWORD}",
        "--client-cert",
        str(tmp_path / "cert.pem"),
        "--client-key",
        str(tmp_path / "key.pem"),
        "--server-ca",
        str(tmp_path / "ca.pem"),
        "--json",
    )
    assert code == 0, err
    created = json.loads(out)
    assert created["headers"] == {"X-Api-Key": "••••abcd"}
    assert created["auth"]["password"] == "••••efgh"
    assert _kinds(db) == ["auth", "headers", "tls_client_certificate", "tls_server_ca"]
    endpoint = str(created["id"])
    code, out, _ = cli("endpoints", "show", endpoint)
    assert code == 0 and "X-Api-Key: ••••abcd" in out and "basic (user)" in out
    assert "CN=cli-client" in out
    assert API_KEY not in out and PASSWORD not in out

    code, out, err = cli(
        "endpoints",
        "update",
        endpoint,
        "--oauth2-token-url",
        "http://127.0.0.1:9/token",
        "--oauth2-client-id",
        "id",
        "--oauth2-client-secret",
        "secret",
        "--no-headers",
        "--no-client-cert",
        "--no-server-ca",
    )
    assert code == 0, err
    assert "headers removed" in out and "auth set" in out
    assert _kinds(db) == ["auth"]
    code, out, _ = cli("endpoints", "show", endpoint, "--json")
    assert json.loads(out)["auth"]["type"] == "oauth2_client_credentials"
    code, out, _ = cli("endpoints", "update", endpoint, "--no-auth")
    assert code == 0 and _kinds(db) == []


def test_bad_credentials_exit_non_zero_and_write_nothing(
    cli: Any,  # noqa: F811
    db: Database,
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.pem").write_text("not a certificate")
    for argv in (
        [*ADD, "--header", "Host: example.com"],
        [*ADD, "--basic-auth", "user:p", "--bearer-token", "t"],
        [*ADD, "--oauth2-token-url", "http://127.0.0.1:9/token"],
        [*ADD, "--server-ca", str(tmp_path / "bad.pem")],
        [*ADD, "--client-cert", str(tmp_path / "bad.pem")],
    ):
        code, _, _ = cli(*argv)
        assert code != 0, argv
    with pytest.raises(SystemExit):
        cli(*ADD, "--header", "no colon")
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.endpoints")
        assert cur.fetchone() == (0,)
    assert _kinds(db) == []
