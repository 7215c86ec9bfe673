"""Tokens over HTTP, through the authorizer as API Gateway runs it: made by admins and shown
once, refused once expired or revoked or forged, each scope's reach, and the usage key the
authorizer names for API Gateway's throttling."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.api.conftest import PUBLIC_URL, Gateway
from tests.support.seed import make_application
from tidings.dal.connection import Database
from tidings.logic import applications, tokens


def admin_token(db: Database) -> str:
    return tokens.create_token(db, scope="admin").token


def test_admins_make_list_and_revoke_tokens(gateway: Gateway, db: Database) -> None:
    admin = admin_token(db)
    with db.cursor() as cur:
        make_application(cur, "acme")
    made = gateway.call(
        "POST",
        "/v1/tokens",
        {"scope": "app", "application": "acme", "description": "acme's backend"},
        token=admin,
    )
    assert made.status == 201, made.raw
    token = made.body["token"]
    assert tokens.is_token(token)
    assert made.body["prefix"] == token[:12]
    assert (made.body["scope"], made.body["application"]) == ("app", "acme")
    listed = gateway.call("GET", "/v1/tokens", token=admin)
    assert [t["scope"] for t in listed.body["items"]] == ["admin", "app"]
    assert token not in listed.raw and "hash" not in listed.raw
    one = gateway.call("GET", f"/v1/tokens/{made.body['id']}", token=admin)
    assert one.body == {k: v for k, v in made.body.items() if k != "token"}
    assert gateway.call("GET", "/v1/apps/acme/endpoints", token=token).status == 200

    revoked = gateway.call("DELETE", f"/v1/tokens/{made.body['id']}", token=admin)
    assert revoked.status == 200 and revoked.body["revoked_at"] is not None
    refused = gateway.call("GET", "/v1/apps/acme/endpoints", token=token)
    assert (refused.status, refused.error["code"]) == (401, "unauthorized")
    # Revoking again keeps the first time.
    again = gateway.call("DELETE", f"/v1/tokens/{made.body['id']}", token=admin)
    assert again.body["revoked_at"] == revoked.body["revoked_at"]
    assert gateway.call("DELETE", "/v1/tokens/999", token=admin).status == 404


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"scope": "app"}, 422, "application"),
        ({"scope": "admin", "application": "acme"}, 422, "application"),
        ({"scope": "root"}, 422, "scope"),
        ({"scope": "app", "application": "nobody"}, 404, None),
        ({"scope": "producer", "expires_at": "2020-01-01T00:00:00Z"}, 422, "expires_at"),
        ({"scope": "producer", "expires_at": "2099-01-01T00:00:00"}, 422, "expires_at"),
        ({"scope": "producer", "token": "tdg_mine"}, 422, "token"),
    ],
)
def test_bad_tokens_are_refused(
    gateway: Gateway, db: Database, body: dict, status: int, field: str | None
) -> None:
    admin = admin_token(db)
    with db.cursor() as cur:
        make_application(cur, "acme")
    reply = gateway.call("POST", "/v1/tokens", body, token=admin)
    assert reply.status == status, reply.raw
    assert reply.error.get("field") == field
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.tokens")
        assert cur.fetchone() == (1,)


def test_only_admins_manage_tokens_and_applications(gateway: Gateway, db: Database) -> None:
    with db.cursor() as cur:
        make_application(cur, "acme")
    for scope, application in (("producer", None), ("app", "acme")):
        token = tokens.create_token(db, scope=scope, application=application).token
        for method, path, body in (
            ("GET", "/v1/tokens", None),
            ("POST", "/v1/tokens", {"scope": "admin"}),
            ("GET", "/v1/tokens/1", None),
            ("DELETE", "/v1/tokens/1", None),
            ("GET", "/v1/apps", None),
            ("POST", "/v1/apps", {"uid": "mine"}),
            ("PATCH", "/v1/apps/acme", {"name": "x"}),
            ("DELETE", "/v1/apps/acme", None),
        ):
            reply = gateway.call(method, path, body, token=token)
            assert (reply.status, reply.error["code"]) == (403, "forbidden"), (scope, path)
    assert applications.find(db, "acme") is not None


def test_expired_revoked_forged_and_orphaned_tokens_are_401(gateway: Gateway, db: Database) -> None:
    with db.cursor() as cur:
        make_application(cur, "gone")
    expiring = tokens.create_token(
        db, scope="admin", expires_at=datetime.now(UTC) + timedelta(hours=1)
    )
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.tokens SET created_at = now() - interval '2 hours',"
            " expires_at = now() - interval '1 second' WHERE id = %s",
            (expiring.id,),
        )
    revoked = tokens.create_token(db, scope="admin")
    tokens.revoke_token(db, revoked.id)
    valid = tokens.create_token(db, scope="admin").token
    # The right prefix (the stored one is found) with another secret.
    forged = valid[:12] + ("A" if valid[12] != "A" else "B") + valid[13:]
    orphaned = tokens.create_token(db, scope="app", application="gone")
    applications.delete_application(db, applications.find(db, "gone"))  # type: ignore[arg-type]
    for token in (expiring.token, revoked.token, forged, orphaned.token, "tdg_x", "not a token"):
        reply = gateway.call("GET", "/v1/endpoints", token=token)
        assert (reply.status, reply.error["code"]) == (401, "unauthorized"), token
    no_token = gateway.call("GET", "/v1/endpoints")
    assert no_token.status == 401
    assert gateway.call("GET", "/v1/endpoints", token=valid).status == 200


def test_scopes_reach_what_they_are_for(gateway: Gateway, db: Database) -> None:
    with db.cursor() as cur:
        make_application(cur, "acme")
    admin = admin_token(db)
    producer = tokens.create_token(db, scope="producer").token
    acme = tokens.create_token(db, scope="app", application="acme").token
    created = gateway.call("POST", "/v1/apps/acme/endpoints", {"url": PUBLIC_URL}, token=acme)
    assert created.status == 201
    event = {"event_type": "t", "payload": {}}
    for path in ("/v1/apps/acme/events", "/v1/events"):
        assert gateway.call("POST", path, event, token=producer).status == 202
    assert gateway.call("GET", "/v1/apps/acme/messages", token=producer).status == 200
    for method, path in (
        ("GET", "/v1/apps/acme/endpoints"),
        ("GET", "/v1/endpoints"),
        ("POST", f"/v1/apps/acme/endpoints/{created.body['id']}/rotate-secret"),
        ("GET", "/v1/apps/acme"),
    ):
        reply = gateway.call(method, path, token=producer)
        assert (reply.status, reply.error["code"]) == (403, "forbidden"), path
    replay = gateway.call(
        "POST",
        "/v1/apps/acme/dead-letters/replay",
        {"since": "2020-01-01T00:00:00Z"},
        token=producer,
    )
    assert replay.status == 403
    assert gateway.call("GET", "/v1/apps/acme", token=acme).body["uid"] == "acme"
    assert gateway.call("POST", "/v1/apps/acme/events", event, token=acme).status == 202
    assert gateway.call("GET", "/v1/apps/acme/endpoints", token=admin).status == 200


class RecordingKeys:
    """Usage keys as API Gateway would keep them, in memory."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def value_for(self, owner: str) -> str:
        return f"tidings-test-{owner}"

    def ensure(self, owner: str) -> str:
        self.made.append(owner)
        return f"key-{owner}"


def test_the_authorizer_names_each_tokens_own_usage_key_made_once(db: Database) -> None:
    from tidings.api.authorizer import authorize

    token = tokens.create_token(db, scope="producer")
    keys = RecordingKeys()
    event = {
        "type": "TOKEN",
        "authorizationToken": f"Bearer {token.token}",
        "methodArn": "arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/POST/v1/events",
    }
    first = authorize(event, db, keys)
    second = authorize(event, db, keys)
    assert first == second
    assert first["usageIdentifierKey"] == f"tidings-test-token-{token.id}"
    assert first["principalId"] == f"token-{token.id}"
    assert first["context"] == {"scope": "producer", "token_id": str(token.id)}
    # Allowed on every route of the stage: the answer is cached across routes.
    (statement,) = first["policyDocument"]["Statement"]
    assert (statement["Effect"], statement["Resource"]) == (
        "Allow",
        ["arn:aws:execute-api:eu-west-1:123456789012:abc123/prod/*/*"],
    )
    assert keys.made == [f"token-{token.id}"]
    with db.cursor() as cur:
        cur.execute("SELECT usage_key_id FROM tidings.tokens WHERE id = %s", (token.id,))
        assert cur.fetchone() == (f"key-token-{token.id}",)
