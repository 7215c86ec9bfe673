"""Receiver credentials through the API: stored sealed, read back redacted, replaced or removed
whole, and refused (422, naming the field, nothing written) when they cannot work."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api.conftest import PUBLIC_URL, Api, count
from tests.support.tls import TestCa, other_key_pem
from tidings.dal.connection import Database

API_KEY = "k3y-0123456789-abcdef-1a2b"
PASSWORD = "pa55-w0rd-long-enough-9z8y"
TOKEN = "bearer-token-0123456789-wxyz"
CLIENT_SECRET = "client-secret-0123456789-qrst"


def _stored(db: Database) -> list[tuple[int, str, bytes, Any]]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT endpoint_id, kind, ciphertext, shown FROM tidings.endpoint_credentials"
            " ORDER BY id"
        )
        return [(r[0], r[1], bytes(r[2]), r[3]) for r in cur.fetchall()]


def _nothing_secret_in(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text


def test_headers_and_basic_auth_are_sealed_and_read_back_redacted(api: Api, db: Database) -> None:
    created = api.post(
        "/v1/endpoints",
        {
            "url": PUBLIC_URL,
            "headers": {"X-Api-Key": API_KEY, "X-Short": "abc"},
            "auth": {"type": "basic", "username": "tidings", "password": PASSWORD},
        },
    )
    assert created.status == 201, created.raw
    assert created.body["headers"] == {"X-Api-Key": "••••1a2b", "X-Short": "••••"}
    assert created.body["auth"] == {"type": "basic", "username": "tidings", "password": "••••9z8y"}
    assert created.body["tls_client_certificate"] is None
    path = f"/v1/endpoints/{created.body['id']}"
    for reply in (api.get(path), api.get("/v1/endpoints")):
        assert reply.status == 200
        _nothing_secret_in(reply.raw, API_KEY, PASSWORD)
        assert "1a2b" in reply.raw
    _nothing_secret_in(created.raw, API_KEY, PASSWORD)
    stored = _stored(db)
    assert {kind for _, kind, _, _ in stored} == {"headers", "auth"}
    for _, _, ciphertext, shown in stored:
        assert API_KEY.encode() not in ciphertext and PASSWORD.encode() not in ciphertext
        _nothing_secret_in(str(shown), API_KEY, PASSWORD)


def test_an_update_replaces_a_kind_whole_leaves_it_or_removes_it(api: Api, db: Database) -> None:
    endpoint = api.create_endpoint(headers={"X-Api-Key": API_KEY, "X-Other": "other-value"})
    path = f"/v1/endpoints/{endpoint['id']}"
    # Absent: left alone.
    kept = api.patch(path, {"description": "changed"})
    assert kept.status == 200, kept.raw
    assert set(kept.body["headers"]) == {"X-Api-Key", "X-Other"}
    # Given: the whole set is replaced.
    replaced = api.patch(
        path, {"headers": {"X-Token": TOKEN}, "auth": {"type": "bearer", "token": TOKEN}}
    )
    assert replaced.status == 200, replaced.raw
    assert replaced.body["headers"] == {"X-Token": "••••wxyz"}
    assert replaced.body["auth"] == {"type": "bearer", "token": "••••wxyz"}
    _nothing_secret_in(replaced.raw, TOKEN)
    # Null: removed.
    removed = api.patch(path, {"headers": None})
    assert removed.status == 200, removed.raw
    assert removed.body["headers"] is None and removed.body["auth"]["type"] == "bearer"
    assert [kind for _, kind, _, _ in _stored(db)] == ["auth"]
    # Deleting the endpoint forgets its credentials.
    assert api.delete(path).status == 204
    assert _stored(db) == []


def test_oauth2_is_shown_without_its_secret(api: Api) -> None:
    endpoint = api.create_endpoint(
        auth={
            "type": "oauth2_client_credentials",
            "token_url": "https://93.184.215.14/token",
            "client_id": "tidings",
            "client_secret": CLIENT_SECRET,
            "scope": "webhooks",
        }
    )
    assert endpoint["auth"] == {
        "type": "oauth2_client_credentials",
        "token_url": "https://93.184.215.14/token",
        "client_id": "tidings",
        "client_secret": "••••qrst",
        "scope": "webhooks",
        "audience": None,
        "client_auth": "basic",
    }


def test_a_client_certificate_shows_its_expiry_never_its_key(api: Api, db: Database) -> None:
    ca = TestCa()
    client = ca.issue("tidings-client")
    endpoint = api.create_endpoint(
        tls_client_certificate=client.as_credential(), tls_server_ca_pem=ca.pem
    )
    shown = endpoint["tls_client_certificate"]
    assert shown["subject"] == "CN=tidings-client"
    assert datetime.fromisoformat(shown["not_after"]) > datetime.now(UTC) + timedelta(days=19)
    assert endpoint["tls_server_ca"]["subjects"] == ["CN=Tidings Test CA"]
    reply = api.get(f"/v1/endpoints/{endpoint['id']}")
    key_body = client.private_key_pem.splitlines()[1]
    assert key_body not in reply.raw
    with db.cursor() as cur:
        cur.execute(
            "SELECT not_after FROM tidings.endpoint_credentials WHERE not_after IS NOT NULL"
        )
        assert cur.fetchone() is not None


def _expired() -> dict[str, str]:
    now = datetime.now(UTC)
    return (
        TestCa()
        .issue("old", not_before=now - timedelta(days=10), not_after=now - timedelta(days=1))
        .as_credential()
    )


def _mismatched() -> dict[str, str]:
    issued = TestCa().issue("client")
    return {"certificate_pem": issued.certificate_pem, "private_key_pem": other_key_pem()}


BAD_INPUT: list[tuple[str, dict[str, Any], str]] = [
    (
        "malformed certificate",
        {
            "tls_client_certificate": {
                "certificate_pem": "-----BEGIN CERTIFICATE-----\nnope\n-----END CERTIFICATE-----\n",
                "private_key_pem": other_key_pem(),
            }
        },
        "tls_client_certificate.certificate_pem",
    ),
    (
        "malformed key",
        {
            "tls_client_certificate": {
                "certificate_pem": TestCa().issue("c").certificate_pem,
                "private_key_pem": "not a key",
            }
        },
        "tls_client_certificate.private_key_pem",
    ),
    (
        "key not matching",
        {"tls_client_certificate": _mismatched()},
        "tls_client_certificate.private_key_pem",
    ),
    (
        "expired certificate",
        {"tls_client_certificate": _expired()},
        "tls_client_certificate.certificate_pem",
    ),
    ("malformed CA bundle", {"tls_server_ca_pem": "hello"}, "tls_server_ca_pem"),
    ("reserved header", {"headers": {"Webhook-Signature": "x"}}, "headers.Webhook-Signature"),
    ("framing header", {"headers": {"Content-Length": "1"}}, "headers.Content-Length"),
    ("host header", {"headers": {"Host": "example.com"}}, "headers.Host"),
    ("not a token", {"headers": {"X Bad": "x"}}, "headers.X Bad"),
    ("value with a newline", {"headers": {"X-Ok": "a\r\nX-Injected: b"}}, "headers.X-Ok"),
    (
        "authorization with auth",
        {"headers": {"Authorization": "x"}, "auth": {"type": "bearer", "token": "t"}},
        "headers.Authorization",
    ),
    (
        "token URL on a blocked address",
        {
            "auth": {
                "type": "oauth2_client_credentials",
                "token_url": "https://10.0.0.1/token",
                "client_id": "a",
                "client_secret": "b",
            }
        },
        "auth.token_url",
    ),
    (
        "token URL on a blocked port",
        {
            "auth": {
                "type": "oauth2_client_credentials",
                "token_url": "https://93.184.215.14:22/token",
                "client_id": "a",
                "client_secret": "b",
            }
        },
        "auth.token_url",
    ),
]


@pytest.mark.parametrize(("case", "fields", "field"), BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_unusable_credentials_are_refused_naming_the_field_and_nothing_is_written(
    api: Api, db: Database, case: str, fields: dict[str, Any], field: str
) -> None:
    endpoints_before = count(db, "endpoints")
    created = api.post("/v1/endpoints", {"url": PUBLIC_URL, **fields})
    assert created.status == 422, (case, created.raw)
    assert created.error["field"] == field, created.raw
    assert count(db, "endpoints") == endpoints_before
    # The same on an update: the endpoint keeps what it had.
    endpoint = api.create_endpoint(headers={"X-Api-Key": API_KEY})
    before = _stored(db)
    changed = api.patch(f"/v1/endpoints/{endpoint['id']}", {**fields, "description": "new"})
    assert changed.status == 422, (case, changed.raw)
    assert changed.error["field"] == field, changed.raw
    assert _stored(db) == before
    assert api.get(f"/v1/endpoints/{endpoint['id']}").body["description"] == ""


def test_authorization_header_is_refused_when_the_endpoint_keeps_an_auth(
    api: Api, db: Database
) -> None:
    endpoint = api.create_endpoint(auth={"type": "bearer", "token": TOKEN})
    before = _stored(db)
    changed = api.patch(f"/v1/endpoints/{endpoint['id']}", {"headers": {"authorization": "x"}})
    assert changed.status == 422, changed.raw
    assert changed.error["field"] == "headers"
    assert _stored(db) == before
