"""Isolation between applications, tried as an attacker would, through the token authorizer and
the ingest function as API Gateway runs them.

Two customers, acme and globex, each with an endpoint, messages, attempts and dead letters, and
the default application beside them. With acme's token: every route of the API, asked for
globex's application, endpoint, message, attempt or replay, answers 404 as for something that
does not exist (never 403, never globex's data); no list shows another application's rows. A
producer token is refused (403) every endpoint route, replay and resend; expired, revoked and
forged tokens 401.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.api.conftest import Gateway
from tests.support.seed import make_application, make_endpoint
from tidings.cli.openapi import document
from tidings.dal.connection import Database
from tidings.logic import event_types, tokens

DOC = json.loads(document())
# Every operation of the API, as (method, path template).
OPERATIONS = sorted((method.upper(), path) for path, ops in DOC["paths"].items() for method in ops)
# Strings that appear in globex's rows and nowhere else.
GLOBEX_MARKERS = ("globex-only-hook", "globex-only-payload", "globex-only-description")


@dataclass
class World:
    acme: int
    globex: int
    acme_endpoint: int
    globex_endpoint: int
    default_endpoint: int
    acme_messages: list[int]
    globex_messages: list[int]
    default_messages: list[int]
    acme_token: str
    globex_token: str
    producer_token: str
    admin_token: str


def _messages(db: Database, app: str | None, endpoint: int, n: int, marker: str) -> list[int]:
    found = []
    with db.cursor() as cur:
        for i in range(n):
            cur.execute(
                "SELECT * FROM tidings.enqueue('order.paid', %s::jsonb, %s, %s::bigint[], %s)",
                (json.dumps({"note": marker, "i": i}), f"{marker}-{i}", [endpoint], app),
            )
            found.extend(row[0] for row in cur.fetchall())
        # One of them dead, after an attempt: something to replay, an attempt to read.
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 1 WHERE id = %s",
            (found[0],),
        )
        cur.execute(
            "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, status_code,"
            " response_ms, response_excerpt) VALUES (%s, %s, 1, 500, 12, %s)",
            (found[0], endpoint, marker),
        )
    return found


@pytest.fixture
def world(db: Database) -> World:
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        globex = make_application(cur, "globex")
        acme_endpoint = make_endpoint(cur, "https://93.184.215.14/acme-hook", app_id=acme)
        globex_endpoint = make_endpoint(
            cur, "https://93.184.215.14/globex-only-hook", app_id=globex
        )
        cur.execute(
            "UPDATE tidings.endpoints SET description = 'globex-only-description' WHERE id = %s",
            (globex_endpoint,),
        )
        default_endpoint = make_endpoint(cur, "https://93.184.215.14/default-hook")
    # The deployment's catalog, which every application shares.
    event_types.create_event_type(db, {"name": "order.paid", "examples": [{"n": 1}]})
    return World(
        acme=acme,
        globex=globex,
        acme_endpoint=acme_endpoint,
        globex_endpoint=globex_endpoint,
        default_endpoint=default_endpoint,
        acme_messages=_messages(db, "acme", acme_endpoint, 3, "acme-payload"),
        globex_messages=_messages(db, "globex", globex_endpoint, 3, "globex-only-payload"),
        default_messages=_messages(db, None, default_endpoint, 2, "default-payload"),
        acme_token=tokens.create_token(db, scope="app", application="acme").token,
        globex_token=tokens.create_token(db, scope="app", application="globex").token,
        producer_token=tokens.create_token(db, scope="producer").token,
        admin_token=tokens.create_token(db, scope="admin").token,
    )


# The bodies of the routes that name no application's things.
FIXED_BODIES: dict[str, Any] = {
    "/v1/apps": {"uid": "mine"},
    "/v1/apps/{app}": {"name": "taken over"},
    "/v1/tokens": {"scope": "admin"},
    "/v1/event-types": {"name": "mine"},
    "/v1/event-types/{name}": {"description": "taken over"},
    "/v1/event-types/import": {"openapi": "3.1.0", "webhooks": {"order.paid": {"post": {}}}},
}


def body_for(method: str, template: str, world: World) -> Any:  # noqa: PLR0911, PLR0912 - per route
    """A well-formed body for an operation, naming globex's things where it names any."""
    if method in ("GET", "DELETE"):
        return None
    if template in FIXED_BODIES:
        return FIXED_BODIES[template]
    if template.endswith("/events"):
        return {"event_type": "order.paid", "payload": {"n": 1}}
    if template.endswith("/events/batch"):
        return {"events": [{"event_type": "order.paid", "payload": {"n": 1}}]}
    if template.endswith("/endpoints"):
        return {"url": "https://93.184.215.14/new"}
    if template.endswith("/endpoints/{endpoint_id}"):
        return {"description": "taken over"}
    if template.endswith("/dead-letters/replay"):
        return {"message_ids": [world.globex_messages[0]]}
    if template.endswith(("/rotate-secret", "/resend")):
        return None
    if template.endswith("/recover"):
        return {"since": "2000-01-01T00:00:00Z"}
    if template.endswith(("/portal-links", "/portal/sessions")):
        return {}
    if template == "/v1/filters/test":
        return {"filter": {"n": 1}, "payload": {"n": 1}, "event_type": "order.paid"}
    if template.endswith("/send-example"):
        return {"event_type": "order.paid"}
    if template.endswith("/lines/resume"):
        return {}

    raise AssertionError(f"no body for {method} {template}")


def path_for(template: str, app: str, endpoint_id: int, message_id: int) -> str:
    return (
        template.replace("{app}", app)
        .replace("{endpoint_id}", str(endpoint_id))
        .replace("{message_id}", str(message_id))
        .replace("{token_id}", "1")
        .replace("{name}", "order.paid")
        .replace("{version}", "1")
    )


def assert_no_globex_data(raw: str) -> None:
    for marker in GLOBEX_MARKERS:
        assert marker not in raw, raw


ADMIN_ROUTES = {
    ("POST", "/v1/apps"),
    ("GET", "/v1/apps"),
    ("PATCH", "/v1/apps/{app}"),
    ("DELETE", "/v1/apps/{app}"),
    ("POST", "/v1/tokens"),
    ("GET", "/v1/tokens"),
    ("GET", "/v1/tokens/{token_id}"),
    ("DELETE", "/v1/tokens/{token_id}"),
    # Only a portal link opens a session.
    ("POST", "/v1/portal/sessions"),
    # Every application's figures at once.
    ("GET", "/v1/admin/status"),
    ("GET", "/v1/admin/dead-letters"),
    # The deployment's event-type catalog is changed by admin tokens alone.
    ("POST", "/v1/event-types"),
    ("PATCH", "/v1/event-types/{name}"),
    ("POST", "/v1/event-types/import"),
}
# The catalog holds no application's rows: every token reads it.
CATALOG_READS = {
    ("GET", "/v1/event-types"),
    ("GET", "/v1/event-types/{name}"),
    ("GET", "/v1/event-types/{name}/versions/{version}"),
}
# Routes that read and change nothing of any application: every token gets the same answer.
NO_APPLICATION_ROUTES = {("POST", "/v1/filters/test")} | CATALOG_READS


def test_every_route_asked_for_another_application_is_404(
    gateway: Gateway, world: World, db: Database
) -> None:
    before = _state(db)
    tried = 0
    for method, template in OPERATIONS:
        if (method, template) in ADMIN_ROUTES:
            # Admins' routes are refused to any other scope, whatever they name.
            reply = gateway.call(
                method,
                path_for(template, "globex", 1, 1),
                body_for(method, template, world),
                token=world.acme_token,
            )
            assert (reply.status, reply.error["code"]) == (403, "forbidden"), (method, template)
            continue
        if (method, template) in NO_APPLICATION_ROUTES:
            reply = gateway.call(
                method,
                path_for(template, "", 1, 1),
                body_for(method, template, world),
                token=world.acme_token,
            )
            assert reply.status == 200, (method, template, reply.raw)
            assert_no_globex_data(reply.raw)
            continue
        targets = []
        if "{app}" in template:
            # globex by uid and by id, and acme's own application with globex's ids.
            for app in ("globex", str(world.globex)):
                targets.append((app, world.globex_endpoint, world.globex_messages[0]))
            if "{endpoint_id}" in template or "{message_id}" in template:
                targets.append(("acme", world.globex_endpoint, world.globex_messages[0]))
                # Ids that exist nowhere answer exactly the same.
                targets.append(("acme", 10**12, 10**12))
        else:
            # Today's routes are the default application's, which is not acme's.
            targets.append(("", world.default_endpoint, world.default_messages[0]))
        for app, endpoint_id, message_id in targets:
            path = path_for(template, app, endpoint_id, message_id)
            reply = gateway.call(
                method, path, body_for(method, template, world), token=world.acme_token
            )
            tried += 1
            assert reply.status == 404, (method, path, reply.raw)
            assert reply.error["code"] in {
                "application_not_found",
                "endpoint_not_found",
                "message_not_found",
            }, reply.raw
            assert_no_globex_data(reply.raw)
    assert tried > 40
    # Nothing was changed by any of it.
    assert _state(db) == before


def test_a_replay_or_an_event_naming_another_applications_things_is_refused(
    gateway: Gateway, world: World, db: Database
) -> None:
    before = _state(db)
    replay = "/v1/apps/acme/dead-letters/replay"
    for body in (
        {"message_ids": [world.acme_messages[0], world.globex_messages[0]]},
        {"message_ids": [world.default_messages[0]]},
        {"endpoint_id": world.globex_endpoint},
        {"endpoint_id": world.globex_endpoint, "since": "2020-01-01T00:00:00Z"},
    ):
        reply = gateway.call("POST", replay, body, token=world.acme_token)
        assert reply.status == 404, (body, reply.raw)
    event = {"event_type": "order.paid", "payload": {}, "endpoint_ids": [world.globex_endpoint]}
    for path in ("/v1/apps/acme/events", "/v1/apps/acme/events/batch"):
        sent = event if path.endswith("events") else {"events": [event]}
        reply = gateway.call("POST", path, sent, token=world.acme_token)
        assert (reply.status, reply.error["code"]) == (422, "unknown_endpoint"), path
    assert _state(db) == before
    # Its own dead letter it may replay.
    own = gateway.call(
        "POST", replay, {"message_ids": [world.acme_messages[0]]}, token=world.acme_token
    )
    assert (own.status, own.body) == (200, {"requeued": 1})


def test_another_applications_endpoint_cap_and_lane_are_as_unknown_as_its_other_fields(
    gateway: Gateway, world: World, db: Database
) -> None:
    before = _state(db)
    for app in ("acme", "globex", str(world.globex)):
        path = f"/v1/apps/{app}/endpoints/{world.globex_endpoint}"
        for method, body in (("PATCH", {"max_in_flight": 1}), ("PATCH", {"max_in_flight": None})):
            reply = gateway.call(method, path, body, token=world.acme_token)
            assert reply.status == 404, (app, body, reply.raw)
        read = gateway.call("GET", path, token=world.acme_token)
        assert read.status == 404 and "lane" not in read.raw and "max_in_flight" not in read.raw
    assert _state(db) == before
    # Its own application's token sets and reads it.
    own = f"/v1/apps/globex/endpoints/{world.globex_endpoint}"
    changed = gateway.call("PATCH", own, {"max_in_flight": 2}, token=world.globex_token)
    assert (changed.status, changed.body["max_in_flight"]) == (200, 2), changed.raw
    shown = gateway.call("GET", own, token=world.globex_token).body
    # It has not answered yet: the slow lane, one delivery at a time.
    assert (shown["max_in_flight"], shown["lane"], shown["in_flight_limit"]) == (2, "slow", 1)


def test_another_applications_filter_and_channels_are_its_own(
    gateway: Gateway, world: World, db: Database
) -> None:
    def routing(endpoint: int) -> tuple[Any, ...]:
        with db.cursor() as cur:
            cur.execute(
                "SELECT filter, filter_path::text, channels FROM tidings.endpoints WHERE id = %s",
                (endpoint,),
            )
            return tuple(cur.fetchone())

    own = f"/v1/apps/globex/endpoints/{world.globex_endpoint}"
    set_by_owner = gateway.call(
        "PATCH",
        own,
        {"filter": {"total": {"$gt": 1}}, "channels": ["globex"]},
        token=world.globex_token,
    )
    assert set_by_owner.status == 200, set_by_owner.raw
    before = routing(world.globex_endpoint)
    for app in ("acme", "globex", str(world.globex)):
        path = f"/v1/apps/{app}/endpoints/{world.globex_endpoint}"
        for body in ({"filter": {}}, {"filter": None}, {"channels": ["acme"]}, {"channels": None}):
            reply = gateway.call("PATCH", path, body, token=world.acme_token)
            assert reply.status == 404, (app, body, reply.raw)
        read = gateway.call("GET", path, token=world.acme_token)
        assert read.status == 404 and "total" not in read.raw and "channels" not in read.raw
    assert routing(world.globex_endpoint) == before
    # Events acme sends on globex's channel reach acme's own subscribers only.
    sent = gateway.call(
        "POST",
        "/v1/apps/acme/events",
        {"event_type": "order.paid", "payload": {"total": 5}, "channels": ["globex"]},
        token=world.acme_token,
    )
    assert sent.status in (200, 202), sent.raw
    with db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.messages WHERE id = ANY(%s) AND endpoint_id = %s",
            (sent.body["message_ids"], world.globex_endpoint),
        )
        assert cur.fetchone() == (0,)
    shown = gateway.call("GET", own, token=world.globex_token).body
    assert (shown["filter"], shown["channels"]) == ({"total": {"$gt": 1}}, ["globex"])


def test_no_list_shows_another_applications_rows(gateway: Gateway, world: World) -> None:
    for token, app, endpoint, messages in (
        (world.acme_token, "acme", world.acme_endpoint, world.acme_messages),
        (world.globex_token, "globex", world.globex_endpoint, world.globex_messages),
        (world.admin_token, "acme", world.acme_endpoint, world.acme_messages),
        (world.producer_token, "globex", None, world.globex_messages),
    ):
        if endpoint is not None:
            listed = gateway.call("GET", f"/v1/apps/{app}/endpoints", token=token)
            assert [e["id"] for e in listed.body["items"]] == [endpoint]
        pages = []
        cursor = None
        while True:
            query = "?limit=1" + (f"&cursor={cursor}" if cursor else "")
            page = gateway.call("GET", f"/v1/apps/{app}/messages{query}", token=token).body
            pages.extend(m["id"] for m in page["items"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(pages) == sorted(messages)
        for status in ("pending", "dead_letter"):
            filtered = gateway.call(
                "GET", f"/v1/apps/{app}/messages?status={status}", token=token
            ).body
            assert {m["id"] for m in filtered["items"]} <= set(messages)
        foreign = world.globex_endpoint if app == "acme" else world.acme_endpoint
        by_endpoint = gateway.call(
            "GET", f"/v1/apps/{app}/messages?endpoint_id={foreign}", token=token
        )
        assert by_endpoint.body["items"] == []
    # The admin's list of applications is the only one that names them all.
    apps = gateway.call("GET", "/v1/apps", token=world.admin_token).body["items"]
    assert [a["uid"] for a in apps] == ["default", "tidings-operational", "acme", "globex"]


def test_a_producer_token_is_refused_every_endpoint_route(gateway: Gateway, world: World) -> None:
    refused = 0
    for method, template in OPERATIONS:
        if not any(
            part in template
            for part in ("/endpoints", "/dead-letters", "/resend", "/portal-links", "/status")
        ):
            continue
        for app in ("acme", "globex"):
            path = path_for(template, app, world.acme_endpoint, world.acme_messages[0])
            reply = gateway.call(
                method, path, body_for(method, template, world), token=world.producer_token
            )
            assert (reply.status, reply.error["code"]) == (403, "forbidden"), (method, path)
            refused += 1
    # Two applications, each route with and without /apps/{app} (fifteen routes), the views of
    # one application's status and dead letters, and of every application's.
    assert refused == 2 * (2 * 15 + 2 + 2)


def test_expired_revoked_and_forged_tokens_are_401_on_every_route(
    gateway: Gateway, world: World, db: Database
) -> None:
    revoked = tokens.create_token(db, scope="app", application="acme")
    tokens.revoke_token(db, revoked.id)
    expired = tokens.create_token(db, scope="admin")
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.tokens SET created_at = now() - interval '1 day',"
            " expires_at = now() - interval '1 minute' WHERE id = %s",
            (expired.id,),
        )
    admin = world.admin_token
    forged = admin[:12] + "".join("B" if c == "A" else "A" for c in admin[12:])
    for method, template in OPERATIONS:
        path = path_for(template, "acme", world.acme_endpoint, world.acme_messages[0])
        for token in (revoked.token, expired.token, forged, None):
            reply = gateway.call(method, path, body_for(method, template, world), token=token)
            assert (reply.status, reply.error["code"]) == (401, "unauthorized"), (
                method,
                path,
                token,
            )


def _state(db: Database) -> list[Any]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT (SELECT json_agg(m ORDER BY m.id) FROM (SELECT id, status, attempts,"
            " next_attempt_at FROM tidings.messages) m),"
            " (SELECT json_agg(e ORDER BY e.id) FROM (SELECT id, url, description, enabled,"
            " secret, deleted_at, max_in_flight FROM tidings.endpoints) e),"
            " (SELECT json_agg(a ORDER BY a.id) FROM tidings.applications a),"
            " (SELECT count(*) FROM tidings.events), (SELECT count(*) FROM tidings.tokens)"
        )
        return list(cur.fetchone())


ids = st.one_of(
    st.integers(1, 50),
    st.integers(1, 2**63 - 1),
    st.sampled_from([0, -1, 2**63]),
)
app_refs = st.one_of(
    st.sampled_from(["globex", "default", "1", "2", "3", "4", "nobody"]),
    st.from_regex(r"\A[A-Za-z0-9][A-Za-z0-9._:-]{0,20}\Z"),
)
scoped_operations = [
    op for op in OPERATIONS if op not in ADMIN_ROUTES and op not in NO_APPLICATION_ROUTES
]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_id_reaches_another_application(
    gateway: Gateway, world: World, db: Database, data: st.DataObject
) -> None:
    """Whatever the ids and application references, acme's token gets acme's own things or a
    4xx, never another application's data; globex's ids are as unknown as ids of nothing."""
    method, template = data.draw(st.sampled_from(scoped_operations), label="operation")
    # Real ids and references often (acme's own, globex's, the default application's), any
    # others too.
    own_app = st.sampled_from(["acme", str(world.acme)])
    real_endpoints = st.sampled_from(
        [world.acme_endpoint, world.globex_endpoint, world.default_endpoint]
    )
    real_messages = st.sampled_from(
        world.acme_messages + world.globex_messages + world.default_messages
    )
    app = data.draw(st.one_of(own_app, app_refs), label="app") if "{app}" in template else ""
    endpoint_id = data.draw(st.one_of(real_endpoints, ids), label="endpoint_id")
    message_id = data.draw(st.one_of(real_messages, ids), label="message_id")
    path = path_for(template, app, endpoint_id, message_id)
    body = body_for(method, template, world)
    if template.endswith("/dead-letters/replay"):
        replayed = data.draw(st.one_of(real_messages, ids), label="replayed")
        body = {"message_ids": [replayed]}
    reply = gateway.call(method, path, body, token=world.acme_token)
    assert reply.status < 500, reply.raw
    assert_no_globex_data(reply.raw)
    acting_in_acme = "{app}" in template and app in ("acme", str(world.acme))
    if not acting_in_acme:
        # Another application, the default one, or none: as if it did not exist.
        assert reply.status in (404, 422), (method, path, reply.raw)
        if reply.status == 404:
            assert reply.error["code"] == "application_not_found"
        return
    # Earlier examples may have made endpoints and messages in acme (the world is shared by
    # every example): what is acme's own is read from the database, not from the world's lists.
    own_endpoints, own_messages = _owned_by(db, world.acme)
    if "{endpoint_id}" in template and endpoint_id not in own_endpoints:
        assert reply.status in (404, 422), (method, path, reply.raw)
    if "{message_id}" in template and message_id not in own_messages:
        assert reply.status in (404, 422), (method, path, reply.raw)
    if template.endswith("/dead-letters/replay") and replayed not in own_messages:
        assert reply.status in (404, 422), (method, path, reply.raw)


def _owned_by(db: Database, app_id: int) -> tuple[set[int], set[int]]:
    """The ids of an application's endpoints and of its endpoints' messages."""
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.endpoints WHERE app_id = %s", (app_id,))
        endpoints = {row[0] for row in cur.fetchall()}
        cur.execute(
            "SELECT m.id FROM tidings.messages m JOIN tidings.endpoints e ON e.id = m.endpoint_id"
            " WHERE e.app_id = %s",
            (app_id,),
        )
        return endpoints, {row[0] for row in cur.fetchall()}


GLOBEX_API_KEY = "globex-only-api-key-0123456789"
GLOBEX_PASSWORD = "globex-only-password-0123456789"


def test_another_applications_credentials_are_unknown_and_its_own_read_token_sees_them_redacted(
    gateway: Gateway, world: World, db: Database
) -> None:
    own = f"/v1/apps/globex/endpoints/{world.globex_endpoint}"
    credentials = {
        "headers": {"X-Api-Key": GLOBEX_API_KEY},
        "auth": {"type": "basic", "username": "globex", "password": GLOBEX_PASSWORD},
    }
    changed = gateway.call("PATCH", own, credentials, token=world.globex_token)
    assert changed.status == 200, changed.raw
    before = [_state(db), _credential_rows(db)]
    # Another application's token: 404 on reading, replacing and removing them, nothing shown.
    for app in ("acme", "globex", str(world.globex)):
        path = f"/v1/apps/{app}/endpoints/{world.globex_endpoint}"
        for body in (
            {"headers": {"X-Api-Key": "taken-over"}},
            {"headers": None},
            {"auth": None},
            {"tls_server_ca_pem": None},
        ):
            reply = gateway.call("PATCH", path, body, token=world.acme_token)
            assert reply.status == 404, (app, body, reply.raw)
        read = gateway.call("GET", path, token=world.acme_token)
        assert read.status == 404 and "X-Api-Key" not in read.raw
    listed = gateway.call("GET", "/v1/apps/acme/endpoints", token=world.acme_token)
    assert "X-Api-Key" not in listed.raw
    assert [_state(db), _credential_rows(db)] == before
    # Its own read-only token sees the redacted forms only, and cannot change them.
    reader = tokens.create_token(db, scope="app_read", application="globex").token
    shown = gateway.call("GET", own, token=reader)
    assert shown.status == 200, shown.raw
    assert shown.body["headers"] == {"X-Api-Key": "••••6789"}
    assert shown.body["auth"]["password"] == "••••6789"
    refused = gateway.call("PATCH", own, {"headers": None}, token=reader)
    assert refused.status == 403, refused.raw
    for token in (world.globex_token, world.admin_token, reader):
        for path in (own, "/v1/apps/globex/endpoints"):
            raw = gateway.call("GET", path, token=token).raw
            assert GLOBEX_API_KEY not in raw and GLOBEX_PASSWORD not in raw


def _credential_rows(db: Database) -> list[Any]:
    with db.cursor() as cur:
        cur.execute("SELECT id, endpoint_id, kind, ciphertext FROM tidings.endpoint_credentials")
        return [(r[0], r[1], r[2], bytes(r[3])) for r in cur.fetchall()]
