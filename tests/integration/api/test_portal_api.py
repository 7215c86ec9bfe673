"""The consumer portal's credentials and routes, through the authorizer as API Gateway runs it:
links made by admins and application tokens only for their application, opened once for a
session of the link's scope, refused when expired, used or revoked; read-only sessions that
change nothing and reveal no secret; the secret revealed on request; the health chart's hours;
messages by creation time; and the page served with its security headers."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

from tests.integration.api.conftest import PUBLIC_URL, Gateway
from tests.support.seed import make_application, make_endpoint
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.logic import tokens
from tidings.logic.portal import create_link


def admin_token(db: Database) -> str:
    return tokens.create_token(db, scope="admin").token


def link_credential(url: str) -> str:
    base, _, credential = url.partition("#link=")
    assert base.endswith("/portal") and tokens.is_token(credential), url
    return credential


def open_link(gateway: Gateway, url: str) -> Any:
    return gateway.call("POST", "/v1/portal/sessions", {}, token=link_credential(url))


@pytest.fixture
def acme(db: Database) -> int:
    with db.cursor() as cur:
        app_id = make_application(cur, "acme", "Acme Corp")
        make_application(cur, "globex")
    return app_id


def test_a_link_opens_one_session_of_its_application_once(
    gateway: Gateway, db: Database, acme: int
) -> None:
    admin = admin_token(db)
    made = gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=admin)
    assert made.status == 201, made.raw
    assert made.body["application"] == "acme" and made.body["read_only"] is False
    # Default: an hour; the request's own address (the local stage here).
    assert made.body["url"].startswith("https://127.0.0.1/local/portal#link=tdg_")
    expires = datetime.fromisoformat(made.body["expires_at"])
    assert timedelta(minutes=59) < expires - datetime.now(UTC) <= timedelta(hours=1)

    # The link itself can do nothing but be opened.
    credential = link_credential(made.body["url"])
    refused = gateway.call("GET", "/v1/apps/acme/endpoints", token=credential)
    assert (refused.status, refused.error["code"]) == (403, "forbidden")

    session = open_link(gateway, made.body["url"])
    assert session.status == 201, session.raw
    assert session.body["read_only"] is False
    assert session.body["application"] == {"id": acme, "uid": "acme", "name": "Acme Corp"}
    token = session.body["token"]
    assert tokens.is_token(token) and token != credential
    assert gateway.call("GET", "/v1/apps/acme/endpoints", token=token).status == 200
    created = gateway.call("POST", "/v1/apps/acme/endpoints", {"url": PUBLIC_URL}, token=token)
    assert created.status == 201, created.raw

    again = open_link(gateway, made.body["url"])
    assert (again.status, again.error["code"]) == (401, "portal_link_unusable")
    # A session opens no session, makes no link (it would renew itself for ever), not even for
    # another application, and sends no event: the producer sends them.
    for path, body in (
        ("/v1/portal/sessions", {}),
        ("/v1/apps/acme/portal-links", {}),
        ("/v1/apps/globex/portal-links", {}),
        ("/v1/apps/acme/events", {"event_type": "t", "payload": {}}),
        ("/v1/apps/acme/events/batch", {"events": [{"event_type": "t", "payload": {}}]}),
    ):
        answer = gateway.call("POST", path, body, token=token)
        assert (answer.status, answer.error["code"]) == (403, "forbidden"), path
    # Links and sessions are listed with the tokens; the link says when it was used.
    listed = gateway.call("GET", "/v1/tokens", token=admin).body["items"]
    link_row = next(t for t in listed if t["id"] == made.body["token_id"])
    assert link_row["scope"] == "portal_link" and link_row["exchanged_at"] is not None
    assert [t["scope"] for t in listed if t["description"] == "portal session"] == ["app"]


def test_a_session_sees_nothing_of_another_application(
    gateway: Gateway, db: Database, acme: int
) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.applications WHERE uid = 'globex'")
        globex = cur.fetchone()[0]
        theirs = make_endpoint(cur, "https://globex.example/hook", app_id=globex)
        default_endpoint = make_endpoint(cur, "https://default.example/hook")
    link = create_link(db, acme, "acme", base_url="https://tidings.example/prod/portal")
    token = open_link(gateway, link.url).body["token"]
    for path in (
        "/v1/apps/globex/endpoints",
        f"/v1/apps/globex/endpoints/{theirs}",
        f"/v1/apps/globex/endpoints/{theirs}/secret",
        f"/v1/apps/acme/endpoints/{theirs}",
        f"/v1/apps/acme/endpoints/{theirs}/secret",
        f"/v1/apps/acme/endpoints/{theirs}/health",
        f"/v1/apps/{globex}/messages",
        "/v1/endpoints",
        f"/v1/endpoints/{default_endpoint}/secret",
    ):
        answer = gateway.call("GET", path, token=token)
        assert answer.status == 404, (path, answer.raw)
        assert "globex.example" not in answer.raw and "default.example" not in answer.raw
    # Another application's token cannot make links for acme, nor can producers or readers.
    globex_token = tokens.create_token(db, scope="app", application="globex").token
    assert gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=globex_token).status == 404
    producer = tokens.create_token(db, scope="producer").token
    assert gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=producer).status == 403
    reader = tokens.create_token(db, scope="app_read", application="acme").token
    assert gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=reader).status == 403
    acme_token = tokens.create_token(db, scope="app", application="acme").token
    assert gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=acme_token).status == 201


def test_a_read_only_session_reads_and_changes_nothing(
    gateway: Gateway, db: Database, acme: int
) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, app_id=acme)
    admin = admin_token(db)
    made = gateway.call("POST", "/v1/apps/acme/portal-links", {"read_only": True}, token=admin)
    session = open_link(gateway, made.body["url"])
    assert session.body["read_only"] is True
    token = session.body["token"]
    base = "/v1/apps/acme"
    for path in (
        "/endpoints",
        f"/endpoints/{endpoint}",
        f"/endpoints/{endpoint}/health",
        "/messages",
        "",
    ):
        assert gateway.call("GET", base + path if path else base, token=token).status == 200, path
    for method, path, body in (
        ("POST", "/endpoints", {"url": PUBLIC_URL}),
        ("PATCH", f"/endpoints/{endpoint}", {"enabled": False}),
        ("PATCH", f"/endpoints/{endpoint}", {"max_in_flight": 1}),
        ("DELETE", f"/endpoints/{endpoint}", None),
        ("POST", f"/endpoints/{endpoint}/rotate-secret", {}),
        ("GET", f"/endpoints/{endpoint}/secret", None),
        ("POST", "/dead-letters/replay", {"endpoint_id": endpoint}),
        ("POST", f"/endpoints/{endpoint}/recover", {"since": "2026-01-01T00:00:00Z"}),
        ("POST", "/events", {"event_type": "t", "payload": {}}),
        ("POST", "/portal-links", {}),
    ):
        answer = gateway.call(method, base + path, body, token=token)
        assert (answer.status, answer.error["code"]) == (403, "forbidden"), (method, path)
    with db.cursor() as cur:
        cur.execute(
            "SELECT enabled, max_in_flight FROM tidings.endpoints WHERE id = %s", (endpoint,)
        )
        assert cur.fetchone() == (True, None)


def test_a_session_sees_its_endpoints_lane_and_cap(
    gateway: Gateway, db: Database, acme: int
) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, app_id=acme)
    admin = admin_token(db)
    path = f"/v1/apps/acme/endpoints/{endpoint}"
    for read_only in (True, False):
        made = gateway.call(
            "POST", "/v1/apps/acme/portal-links", {"read_only": read_only}, token=admin
        )
        token = open_link(gateway, made.body["url"]).body["token"]
        # Not answered yet: untried, in the slow lane, one delivery at a time.
        shown = gateway.call("GET", path, token=token).body
        assert (shown["lane"], shown["slow_until"], shown["max_in_flight"]) == ("slow", None, None)
        assert shown["in_flight_limit"] == 1
    # The page's form edits URL, description and event types only; the cap is the API's.
    changed = gateway.call("PATCH", path, {"max_in_flight": 2}, token=token)
    assert (changed.status, changed.body["max_in_flight"]) == (200, 2), changed.raw
    refused = gateway.call("PATCH", path, {"max_in_flight": 0}, token=token)
    assert (refused.status, refused.error["field"]) == (422, "max_in_flight")
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET last_success_at = now(),"
            " slow_until = now() + interval '10 minutes' WHERE endpoint_id = %s",
            (endpoint,),
        )
    shown = gateway.call("GET", path, token=token).body
    assert (shown["lane"], shown["in_flight_limit"]) == ("slow", 2)
    assert shown["slow_until"] is not None


def test_revoking_the_token_that_made_a_link_voids_the_link(
    gateway: Gateway, db: Database, acme: int
) -> None:
    admin = admin_token(db)
    leaked = tokens.create_token(db, scope="app", application="acme")
    link = gateway.call(
        "POST", "/v1/apps/acme/portal-links", {"expires_in_s": 7 * 86400}, token=leaked.token
    )
    assert link.status == 201, link.raw
    # The leak is noticed: the app token is revoked, and refused from now on.
    assert gateway.call("DELETE", f"/v1/tokens/{leaked.id}", token=admin).status == 200
    assert gateway.call("GET", "/v1/apps/acme/endpoints", token=leaked.token).status == 401
    # Yet the link it made a moment before still opens a full session of the application.
    session = open_link(gateway, link.body["url"])
    assert session.status == 401, "a link made by a revoked token opened a session: " + session.raw


def test_a_link_never_outlives_the_token_that_made_it(
    gateway: Gateway, db: Database, acme: int
) -> None:
    short = tokens.create_token(
        db,
        scope="app",
        application="acme",
        expires_at=datetime.now(UTC) + timedelta(minutes=5),
    )
    link = gateway.call(
        "POST", "/v1/apps/acme/portal-links", {"expires_in_s": 7 * 86400}, token=short.token
    )
    if link.status == 201:
        expires = datetime.fromisoformat(link.body["expires_at"])
        assert short.expires_at is not None
        assert expires <= short.expires_at, (
            f"a token valid until {short.expires_at} made a link valid until {expires}"
        )
    else:
        assert link.status == 422, link.raw
    # Once that token has expired, the link opens nothing.
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.tokens SET created_at = now() - interval '1 hour',"
            " expires_at = now() - interval '1 second' WHERE id = %s",
            (short.id,),
        )
    assert open_link(gateway, link.body["url"]).status == 401


def test_revoking_a_link_ends_the_session_it_opened(
    gateway: Gateway, db: Database, acme: int
) -> None:
    admin = admin_token(db)
    made = gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=admin)
    session = open_link(gateway, made.body["url"]).body["token"]
    # The link leaked and was opened by someone else: the admin revokes the link (the only id
    # the producer was given, "revoke it with DELETE /v1/tokens/…").
    listed = gateway.call("GET", "/v1/tokens", token=admin).body["items"]
    assert [t["portal_link_id"] for t in listed if t["description"] == "portal session"] == [
        made.body["token_id"]
    ]
    assert gateway.call("DELETE", f"/v1/tokens/{made.body['token_id']}", token=admin).status == 200
    answer = gateway.call("POST", "/v1/apps/acme/endpoints", {"url": PUBLIC_URL}, token=session)
    assert answer.status == 401, "the session of a revoked link still works: " + answer.raw


def test_no_answer_that_holds_a_credential_may_be_stored_by_a_cache(
    gateway: Gateway, db: Database, acme: int
) -> None:
    admin = admin_token(db)
    token = tokens.create_token(db, scope="app", application="acme").token

    def cache_control(method: str, path: str, body: Any, bearer: str) -> str:
        answer = gateway.raw(method, path, body, token=bearer)
        assert answer.status in (200, 201), (path, answer.body)
        return dict(answer.headers).get("Cache-Control", "")

    endpoint = gateway.call("POST", "/v1/apps/acme/endpoints", {"url": PUBLIC_URL}, token=token)
    link = gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=admin)
    for method, path, body, bearer in (
        ("POST", "/v1/apps/acme/endpoints", {"url": PUBLIC_URL}, token),
        ("GET", f"/v1/apps/acme/endpoints/{endpoint.body['id']}/secret", None, token),
        ("POST", f"/v1/apps/acme/endpoints/{endpoint.body['id']}/rotate-secret", {}, token),
        ("POST", "/v1/tokens", {"scope": "producer"}, admin),
        ("POST", "/v1/apps/acme/portal-links", {}, admin),
        ("POST", "/v1/portal/sessions", {}, link_credential(link.body["url"])),
    ):
        assert cache_control(method, path, body, bearer) == "no-store", path
    assert "Cache-Control" not in dict(
        gateway.raw("GET", "/v1/apps/acme", None, token=token).headers
    )


def test_expired_revoked_and_forged_links_open_nothing(
    gateway: Gateway, db: Database, acme: int
) -> None:
    admin = admin_token(db)
    short = gateway.call("POST", "/v1/apps/acme/portal-links", {"expires_in_s": 1}, token=admin)
    revoked = gateway.call("POST", "/v1/apps/acme/portal-links", {}, token=admin)
    gateway.call("DELETE", f"/v1/tokens/{revoked.body['token_id']}", token=admin)
    time.sleep(1.2)
    for url in (short.body["url"], revoked.body["url"]):
        answer = open_link(gateway, url)
        assert (answer.status, answer.error["code"]) == (401, "unauthorized")
    forged = link_credential(revoked.body["url"])[:-4] + "AAAA"
    answer = gateway.call("POST", "/v1/portal/sessions", {}, token=forged)
    assert answer.status == 401
    # Other tokens open no session either.
    assert gateway.call("POST", "/v1/portal/sessions", {}, token=admin).status == 403
    for body, field in (
        ({"expires_in_s": 0}, "expires_in_s"),
        ({"expires_in_s": 8 * 86400}, "expires_in_s"),
        ({"read_only": "yes please"}, "read_only"),
        ({"scope": "admin"}, "scope"),
    ):
        answer = gateway.call("POST", "/v1/apps/acme/portal-links", body, token=admin)
        assert (answer.status, answer.error["field"]) == (422, field), body
    # A deleted application's links open nothing.
    link = create_link(db, acme, "acme", base_url="https://tidings.example/prod/portal")
    assert gateway.call("DELETE", "/v1/apps/acme", token=admin).status == 204
    assert open_link(gateway, link.url).status == 401


def test_the_secret_is_revealed_on_request_and_follows_rotations(
    gateway: Gateway, db: Database, acme: int
) -> None:
    token = tokens.create_token(db, scope="app", application="acme").token
    created = gateway.call("POST", "/v1/apps/acme/endpoints", {"url": PUBLIC_URL}, token=token)
    endpoint = created.body["id"]
    revealed = gateway.call("GET", f"/v1/apps/acme/endpoints/{endpoint}/secret", token=token)
    assert revealed.status == 200
    assert revealed.body == {"endpoint_id": endpoint, "secret": created.body["secret"]}
    rotated = gateway.call(
        "POST", f"/v1/apps/acme/endpoints/{endpoint}/rotate-secret", {}, token=token
    )
    again = gateway.call("GET", f"/v1/apps/acme/endpoints/{endpoint}/secret", token=token)
    assert again.body["secret"] == rotated.body["secret"] != created.body["secret"]
    gateway.call("DELETE", f"/v1/apps/acme/endpoints/{endpoint}", token=token)
    gone = gateway.call("GET", f"/v1/apps/acme/endpoints/{endpoint}/secret", token=token)
    assert gone.status == 404


def test_health_shows_the_last_24_hours_by_hour(gateway: Gateway, db: Database, acme: int) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, app_id=acme)
        cur.execute(
            "INSERT INTO tidings.events (app_id, event_type, event_id, payload)"
            " VALUES (%s, 't', 'e1', '{}') RETURNING id",
            (acme,),
        )
        event = cur.fetchone()[0]
        cur.execute(
            "INSERT INTO tidings.messages (event_ref, endpoint_id, event_type)"
            " VALUES (%s, %s, 't') RETURNING id",
            (event, endpoint),
        )
        message = cur.fetchone()[0]
        # Two hours ago: one success and one failure; now: one success; 30 hours ago: outside.
        for hours_ago, status, number in ((2, 200, 1), (2, 503, 2), (0, 204, 3), (30, 200, 4)):
            cur.execute(
                "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number,"
                " attempted_at, status_code, response_ms)"
                " VALUES (%s, %s, %s, now() - %s * interval '1 hour', %s, 10)",
                (message, endpoint, number, hours_ago, status),
            )
    token = tokens.create_token(db, scope="app_read", application="acme").token
    health = gateway.call("GET", f"/v1/apps/acme/endpoints/{endpoint}/health", token=token)
    assert health.status == 200, health.raw
    hourly = health.body["hourly"]
    assert len(hourly) == 24
    hours = [datetime.fromisoformat(h["hour"]) for h in hourly]
    assert all(b - a == timedelta(hours=1) for a, b in itertools.pairwise(hours))
    assert hours[-1] <= datetime.now(UTC) < hours[-1] + timedelta(hours=1)
    assert (hourly[-1]["delivered"], hourly[-1]["failed"]) == (1, 0)
    assert (hourly[-3]["delivered"], hourly[-3]["failed"]) == (1, 1)
    assert sum(h["delivered"] + h["failed"] for h in hourly) == 3


def test_messages_are_filtered_by_creation_time(gateway: Gateway, db: Database, acme: int) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, app_id=acme)
        for n, days_ago in enumerate((3, 2, 1)):
            cur.execute(
                "WITH ev AS (INSERT INTO tidings.events (app_id, event_type, event_id, payload)"
                " VALUES (%s, 't', %s, '{}') RETURNING id)"
                " INSERT INTO tidings.messages (event_ref, endpoint_id, event_type, created_at)"
                " SELECT ev.id, %s, 't', now() - %s * interval '1 day' FROM ev",
                (acme, f"e{n}", endpoint, days_ago),
            )
    token = tokens.create_token(db, scope="app_read", application="acme").token
    since = quote((datetime.now(UTC) - timedelta(days=2, hours=12)).isoformat())
    until = quote((datetime.now(UTC) - timedelta(hours=12)).isoformat())
    page = gateway.call("GET", f"/v1/apps/acme/messages?since={since}&until={until}", token=token)
    assert page.status == 200, page.raw
    assert [m["event_id"] for m in page.body["items"]] == ["e2", "e1"]
    naive = gateway.call("GET", "/v1/apps/acme/messages?since=2026-01-01T00:00:00", token=token)
    assert (naive.status, naive.error["field"]) == (422, "since")


def test_the_page_is_served_with_its_security_headers(gateway: Gateway) -> None:
    page = gateway.page("GET", "/portal")
    headers = dict(page.headers)
    assert page.status == 200 and headers["Content-Type"].startswith("text/html")
    policy = headers["Content-Security-Policy"]
    assert "script-src 'self'" in policy and "frame-ancestors 'none'" in policy
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert "Set-Cookie" not in headers
    for asset, kind in (("portal.js", "text/javascript"), ("portal.css", "text/css")):
        answer = gateway.page("GET", f"/portal/{asset}")
        assert answer.status == 200 and dict(answer.headers)["Content-Type"].startswith(kind)
    for path in ("/portal/../openapi.json", "/portal/index.html.bak", "/portal/x"):
        assert gateway.page("GET", path).status == 404, path
    assert gateway.page("POST", "/portal").status == 405


def test_the_producers_origins_may_frame_the_page(database_url: str) -> None:
    from tidings import wiring
    from tidings.local.api_server import Gateway as LocalGateway
    from tidings.local.lambda_env import load_handler

    settings = Settings(
        database_url=database_url,
        portal_frame_ancestors=("https://dashboard.example.com", "https://*.example.org"),
    )
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        gateway = Gateway(
            LocalGateway(
                load_handler("ingest"), load_handler("authorizer"), portal=load_handler("portal")
            )
        )
        headers = dict(gateway.page("GET", "/portal").headers)
    assert headers["Content-Security-Policy"].endswith(
        "frame-ancestors https://dashboard.example.com https://*.example.org"
    )
    assert "X-Frame-Options" not in headers
