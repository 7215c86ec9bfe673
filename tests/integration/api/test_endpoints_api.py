"""Endpoint routes: create (SSRF-checked, secret shown once), read, page, change, delete, rotate,
health."""

from __future__ import annotations

import socket
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.api.conftest import PUBLIC_URL, Api
from tests.support.secrets import stored_secrets
from tests.support.seed import seed_messages
from tidings.dal.connection import Database


def test_create_returns_the_secret_once_and_never_again(api: Api, db: Database) -> None:
    created = api.create_endpoint(description="orders", event_types=["order.paid", "order.new"])
    assert created["secret"].startswith("whsec_")
    assert created["event_types"] == ["order.new", "order.paid"]
    assert created["url"] == PUBLIC_URL
    with db.cursor() as cur:
        assert stored_secrets(cur, created["id"]) == [created["secret"]]

    fetched = api.get(f"/v1/endpoints/{created['id']}")
    assert fetched.status == 200
    assert "whsec_" not in fetched.raw
    assert '"secret"' not in fetched.raw
    assert fetched.body == {k: v for k, v in created.items() if k != "secret"}
    listed = api.get("/v1/endpoints")
    assert listed.status == 200
    assert "whsec_" not in listed.raw
    assert [e["id"] for e in listed.body["items"]] == [created["id"]]


def test_the_scheme_is_stored_in_lower_case(api: Api) -> None:
    created = api.create_endpoint(url="HTTPS://93.184.215.14/Path?Q=1")
    assert created["url"] == "https://93.184.215.14/Path?Q=1"


def test_defaults_subscribe_to_everything(api: Api) -> None:
    created = api.create_endpoint()
    assert created["event_types"] == ["*"]
    assert created["max_attempts"] is None
    assert created["enabled"] is True


@pytest.mark.parametrize(
    ("url", "code"),
    [
        ("ftp://93.184.215.14/hook", "invalid_url"),
        ("https://user:pw@93.184.215.14/hook", "invalid_url"),
        ("https:///nohost", "invalid_url"),
        ("https://10.0.0.7/hook", "blocked_url"),
        ("http://169.254.169.254/latest/meta-data", "blocked_url"),
        ("http://[::1]:8080/", "blocked_url"),
        ("http://127.0.0.1:9000/", "blocked_url"),
    ],
)
def test_urls_refused_at_creation(api: Api, db: Database, url: str, code: str) -> None:
    reply = api.post("/v1/endpoints", {"url": url})
    assert reply.status == 422
    assert reply.error["code"] == code
    assert reply.error["field"] == "url"
    from tests.integration.api.conftest import count

    assert count(db, "endpoints") == 0


def test_host_names_are_resolved_and_judged_by_their_addresses(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    answers = {
        "internal.example": "10.1.2.3",
        "public.example": "93.184.215.14",
    }

    def resolver(host: str, port: int, family: int = 0, type: int = 0):
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "unknown")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    assert api.post("/v1/endpoints", {"url": "https://public.example/h"}).status == 201
    blocked = api.post("/v1/endpoints", {"url": "https://internal.example/h"})
    assert (blocked.status, blocked.error["code"]) == (422, "blocked_url")
    unknown = api.post("/v1/endpoints", {"url": "https://nowhere.example/h"})
    assert (unknown.status, unknown.error["code"]) == (422, "blocked_url")


def test_a_name_that_does_not_resolve_and_one_that_resolves_privately_look_the_same(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Else any token holder could map a private DNS zone through the API's resolver."""
    _resolving(monkeypatch, {"vault.internal.example": "10.9.8.7"})
    existing = api.post("/v1/endpoints", {"url": "https://vault.internal.example/h"})
    missing = api.post("/v1/endpoints", {"url": "https://nothing.internal.example/h"})
    assert existing.status == missing.status == 422
    assert existing.error == missing.error
    assert existing.error["code"] == "blocked_url"
    assert existing.error["message"] == "the URL's host does not resolve to a public address"


def test_an_address_written_in_the_url_is_refused_with_its_kind(api: Api) -> None:
    # No resolver is asked: the answer tells the caller nothing it did not write.
    refused = api.post("/v1/endpoints", {"url": "https://10.0.0.7/hook"})
    assert (refused.error["code"], refused.error["message"]) == (
        "blocked_url",
        "10.0.0.7 is not allowed as a target: it is a private address",
    )


def test_allowed_networks_permit_loopback(api: Api, settings, database_url: str) -> None:
    from tidings import wiring

    wiring.override(
        settings=settings.replace(allowed_networks=("127.0.0.0/8",), endpoint_ports=("9000",))
    )
    reply = api.post("/v1/endpoints", {"url": "http://127.0.0.1:9000/hook"})
    assert reply.status == 201, reply.raw


# --- issue 11: what a receiver's owner can and cannot ask for ---------------------------------


def _resolving(monkeypatch: pytest.MonkeyPatch, answers: dict[str, str]) -> None:
    def resolver(host: str, port: int, family: int = 0, type: int = 0):
        if host not in answers:
            raise socket.gaierror(socket.EAI_NONAME, "unknown")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers[host], port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("localhost", "127.0.0.1"),
        ("db.internal.example", "10.20.30.40"),
        ("metadata.internal.example", "169.254.169.254"),
        ("nat.internal.example", "100.64.7.9"),
    ],
)
def test_a_refused_target_is_explained_without_its_address(
    api: Api, monkeypatch: pytest.MonkeyPatch, host: str, address: str
) -> None:
    _resolving(monkeypatch, {host: address, "public.example": "93.184.215.14"})
    refused = api.post("/v1/endpoints", {"url": f"https://{host}/hook"})
    assert (refused.status, refused.error["code"], refused.error["field"]) == (
        422,
        "blocked_url",
        "url",
    )
    assert address not in refused.raw
    assert refused.error["message"] == "the URL's host does not resolve to a public address"
    created = api.create_endpoint(url="https://public.example/hook")
    changed = api.patch(f"/v1/endpoints/{created['id']}", {"url": f"https://{host}/hook"})
    assert changed.error["code"] == "blocked_url"
    assert address not in changed.raw


@pytest.mark.parametrize(
    "url",
    ["http://93.184.215.14:6379/", "https://93.184.215.14:8443/hook", "http://93.184.215.14:22/"],
)
def test_a_port_the_sender_cannot_open_is_refused_naming_the_allowed_ports(
    api: Api, db: Database, url: str
) -> None:
    reply = api.post("/v1/endpoints", {"url": url})
    assert (reply.status, reply.error["code"], reply.error["field"]) == (
        422,
        "port_not_allowed",
        "url",
    )
    assert "the allowed ports are 80, 443" in reply.error["message"]
    from tests.integration.api.conftest import count

    assert count(db, "endpoints") == 0
    created = api.create_endpoint()
    changed = api.patch(f"/v1/endpoints/{created['id']}", {"url": url})
    assert (changed.status, changed.error["code"]) == (422, "port_not_allowed")
    assert api.get(f"/v1/endpoints/{created['id']}").body["url"] == PUBLIC_URL


def test_the_allowed_ports_are_the_deployments(api: Api, settings) -> None:
    from tidings import wiring

    wiring.override(settings=settings.replace(endpoint_ports=("443", "8000-8999")))
    for url in (
        "https://93.184.215.14/",
        "https://93.184.215.14:8443/",
        "http://93.184.215.14:8000/",
    ):
        assert api.post("/v1/endpoints", {"url": url}).status == 201, url
    refused = api.post("/v1/endpoints", {"url": "http://93.184.215.14/"})
    assert refused.error["code"] == "port_not_allowed"
    assert "the allowed ports are 443, 8000-8999" in refused.error["message"]


@pytest.mark.parametrize("rate", [1e-300, 0.01, 1 / 61, 0.0166])
def test_a_rate_limit_below_one_request_a_minute_is_refused(api: Api, rate: float) -> None:
    reply = api.post("/v1/endpoints", {"url": PUBLIC_URL, "rate_limit_per_s": rate})
    assert (reply.status, reply.error["field"]) == (422, "rate_limit_per_s"), reply.raw
    created = api.create_endpoint()
    changed = api.patch(f"/v1/endpoints/{created['id']}", {"rate_limit_per_s": rate})
    assert (changed.status, changed.error["field"]) == (422, "rate_limit_per_s")


@pytest.mark.parametrize("rate", [1 / 60, 0.5, 22.0, 1_000_000])
def test_a_rate_limit_of_one_request_a_minute_or_more_is_kept(api: Api, rate: float) -> None:
    created = api.create_endpoint(rate_limit_per_s=rate)
    assert created["rate_limit_per_s"] == rate


@pytest.mark.parametrize("cap", [0, -1, 1001, 2.5, True, "many", [5], {"n": 5}])
def test_a_max_in_flight_outside_1_to_1000_is_refused(api: Api, db: Database, cap: object) -> None:
    reply = api.post("/v1/endpoints", {"url": PUBLIC_URL, "max_in_flight": cap})
    assert (reply.status, reply.error["field"]) == (422, "max_in_flight"), reply.raw
    created = api.create_endpoint(max_in_flight=4)
    changed = api.patch(f"/v1/endpoints/{created['id']}", {"max_in_flight": cap})
    assert (changed.status, changed.error["field"]) == (422, "max_in_flight"), changed.raw
    assert api.get(f"/v1/endpoints/{created['id']}").body["max_in_flight"] == 4


def test_max_in_flight_is_set_changed_and_cleared(api: Api, db: Database) -> None:
    created = api.create_endpoint(max_in_flight=1)
    path = f"/v1/endpoints/{created['id']}"
    assert (created["max_in_flight"], created["in_flight_limit"]) == (1, 1)
    assert api.get(path).body["max_in_flight"] == 1
    changed = api.patch(path, {"max_in_flight": 1000})
    assert (changed.status, changed.body["max_in_flight"]) == (200, 1000), changed.raw
    assert api.patch(path, {"description": "kept"}).body["max_in_flight"] == 1000
    cleared = api.patch(path, {"max_in_flight": None})
    assert cleared.body["max_in_flight"] is None
    # Not answered yet: untried, in the slow lane, one delivery at a time.
    assert cleared.body["in_flight_limit"] == 1
    assert api.get(path).body == cleared.body
    with db.cursor() as cur:
        cur.execute("SELECT max_in_flight FROM tidings.endpoints WHERE id = %s", (created["id"],))
        assert cur.fetchone() == (None,)
    listed = api.get("/v1/endpoints").body["items"]
    assert [(e["id"], e["max_in_flight"]) for e in listed] == [(created["id"], None)]


def test_an_endpoint_shows_its_lane(api: Api, db: Database) -> None:
    created = api.create_endpoint()
    path = f"/v1/endpoints/{created['id']}"
    # Never answered: its speed is unknown, so it starts in the slow lane (untried), with no hold.
    assert (created["lane"], created["slow_until"]) == ("slow", None)
    assert (api.get(path).body["lane"], api.get(path).body["slow_until"]) == ("slow", None)
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET last_success_at = now() WHERE endpoint_id = %s",
            (created["id"],),
        )
    fast = api.get(path).body
    assert (fast["lane"], fast["slow_until"], fast["in_flight_limit"]) == ("fast", None, None)
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET slow_until = now() + interval '10 minutes'"
            " WHERE endpoint_id = %s RETURNING slow_until",
            (created["id"],),
        )
        row = cur.fetchone()
    assert row is not None
    slow = api.get(path).body
    assert (slow["lane"], slow["in_flight_limit"]) == ("slow", 10)
    assert datetime.fromisoformat(slow["slow_until"]) == row[0]
    assert api.get("/v1/endpoints").body["items"][0]["lane"] == "slow"
    assert api.patch(path, {"max_in_flight": 3}).body["lane"] == "slow"
    assert api.get(path).body["in_flight_limit"] == 3
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET slow_until = now() - interval '1 second'"
            " WHERE endpoint_id = %s",
            (created["id"],),
        )
    passed = api.get(path).body
    # An endpoint's own cap holds in either lane.
    assert (passed["lane"], passed["slow_until"], passed["in_flight_limit"]) == ("fast", None, 3)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "url"),
        ({"url": 5}, "url"),
        ({"url": PUBLIC_URL, "event_types": []}, "event_types"),
        ({"url": PUBLIC_URL, "event_types": "order.paid"}, "event_types"),
        ({"url": PUBLIC_URL, "max_attempts": 0}, "max_attempts"),
        ({"url": PUBLIC_URL, "timeout_ms": 10}, "timeout_ms"),
        ({"url": PUBLIC_URL, "rate_limit_per_s": -1}, "rate_limit_per_s"),
        ({"url": PUBLIC_URL, "max_in_flight": 0}, "max_in_flight"),
        ({"url": PUBLIC_URL, "description": "x" * 1001}, "description"),
        ({"url": PUBLIC_URL, "description": "nul\x00"}, "description"),
        ({"url": PUBLIC_URL, "secret": "whsec_mine"}, "secret"),
    ],
)
def test_bad_endpoint_fields_are_named(api: Api, body: dict, field: str) -> None:
    reply = api.post("/v1/endpoints", body)
    assert reply.status == 422, reply.raw
    assert reply.error["field"] == field


def test_patch_changes_only_given_fields(api: Api, db: Database) -> None:
    created = api.create_endpoint(description="a", max_attempts=3, event_types=["x"])
    path = f"/v1/endpoints/{created['id']}"
    reply = api.patch(path, {"description": "b", "event_types": ["y", "z"], "max_attempts": None})
    assert reply.status == 200, reply.raw
    assert reply.body["description"] == "b"
    assert reply.body["event_types"] == ["y", "z"]
    assert reply.body["max_attempts"] is None
    assert reply.body["url"] == PUBLIC_URL
    assert api.get(path).body == reply.body
    with db.cursor() as cur:
        cur.execute(
            "SELECT array_agg(event_type ORDER BY event_type) FROM tidings.subscriptions"
            " WHERE endpoint_id = %s",
            (created["id"],),
        )
        assert cur.fetchone() == (["y", "z"],)

    disabled = api.patch(path, {"enabled": False})
    assert (disabled.body["enabled"], disabled.body["disabled_reason"]) == (
        False,
        "disabled by an operator",
    )
    enabled = api.patch(path, {"enabled": True})
    assert (enabled.body["enabled"], enabled.body["disabled_reason"]) == (True, None)


def test_patch_checks_like_create(api: Api) -> None:
    created = api.create_endpoint()
    path = f"/v1/endpoints/{created['id']}"
    assert api.patch(path, {"url": "http://10.0.0.1/"}).error["code"] == "blocked_url"
    assert api.patch(path, {"url": None}).error["field"] == "url"
    assert api.patch(path, {"enabled": None}).error["field"] == "enabled"
    assert api.patch(path, {"bogus": 1}).status == 422
    assert api.patch("/v1/endpoints/999999", {"description": "x"}).status == 404


def test_delete_is_soft_and_then_404(api: Api, db: Database) -> None:
    created = api.create_endpoint()
    path = f"/v1/endpoints/{created['id']}"
    with db.cursor() as cur:
        seed_messages(cur, created["id"], 3)
        cur.execute(
            "UPDATE tidings.messages SET status = 'delivered', delivered_at = now()"
            " WHERE id = (SELECT min(id) FROM tidings.messages)"
        )
    assert api.delete(path).status == 204
    for reply in (
        api.get(path),
        api.delete(path),
        api.patch(path, {"description": "x"}),
        api.post(f"{path}/rotate-secret"),
        api.get(f"{path}/health"),
    ):
        assert reply.status == 404
        assert reply.error["code"] == "endpoint_not_found"
    assert api.get("/v1/endpoints").body["items"] == []
    with db.cursor() as cur:
        cur.execute(
            "SELECT enabled, deleted_at IS NOT NULL FROM tidings.endpoints WHERE id = %s",
            (created["id"],),
        )
        assert cur.fetchone() == (False, True)
        cur.execute(
            "SELECT status::text, last_error FROM tidings.messages WHERE endpoint_id = %s"
            " ORDER BY id",
            (created["id"],),
        )
        assert cur.fetchall() == [
            ("delivered", None),
            ("dead_letter", "endpoint deleted"),
            ("dead_letter", "endpoint deleted"),
        ]
    events = api.post(
        "/v1/events", {"event_type": "t", "payload": {}, "endpoint_ids": [created["id"]]}
    )
    assert (events.status, events.error["code"]) == (422, "unknown_endpoint")


def test_rotate_keeps_the_old_secret_for_the_overlap(api: Api, db: Database) -> None:
    created = api.create_endpoint()
    before = datetime.now(UTC)
    reply = api.post(f"/v1/endpoints/{created['id']}/rotate-secret")
    assert reply.status == 200, reply.raw
    new_secret = reply.body["secret"]
    assert new_secret.startswith("whsec_") and new_secret != created["secret"]
    expires = datetime.fromisoformat(reply.body["previous_secret_expires_at"])
    assert before + timedelta(hours=24) - timedelta(seconds=5) <= expires
    assert expires <= datetime.now(UTC) + timedelta(hours=24, seconds=5)
    with db.cursor() as cur:
        assert stored_secrets(cur, created["id"]) == [new_secret, created["secret"]]
    fetched = api.get(f"/v1/endpoints/{created['id']}")
    assert "whsec_" not in fetched.raw
    assert fetched.body["previous_secret_expires_at"] == reply.body["previous_secret_expires_at"]


def test_rotating_again_within_the_overlap_keeps_every_secret_up_to_the_limit(
    api: Api, db: Database
) -> None:
    created = api.create_endpoint()
    secrets = [created["secret"]]
    for _ in range(6):
        reply = api.post(f"/v1/endpoints/{created['id']}/rotate-secret")
        assert reply.status == 200, reply.raw
        secrets.append(reply.body["secret"])
        with db.cursor() as cur:
            kept = stored_secrets(cur, created["id"])
        # Newest first; at most five sign at once, the oldest beyond that dropped at once.
        assert kept == list(reversed(secrets))[:5]
    with db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.endpoint_secrets WHERE endpoint_id = %s", (created["id"],)
        )
        assert cur.fetchone() == (5,)


def test_health_reports_circuit_percentiles_and_counts(api: Api, db: Database) -> None:
    created = api.create_endpoint()
    with db.cursor() as cur:
        seed_messages(cur, created["id"], 3)
        cur.execute(
            "UPDATE tidings.messages SET status = 'delivered', delivered_at = now()"
            " WHERE endpoint_id = %s",
            (created["id"],),
        )
        seed_messages(cur, created["id"], 2)
        cur.execute(
            "UPDATE tidings.endpoint_health SET state = 'open', opened_at = now(),"
            " consecutive_failures = 10, p50_ms = 12, p95_ms = 80, p99_ms = 120, sample_count = 40"
            " WHERE endpoint_id = %s",
            (created["id"],),
        )
    reply = api.get(f"/v1/endpoints/{created['id']}/health")
    assert reply.status == 200, reply.raw
    body = reply.body
    assert body["circuit_state"] == "open"
    assert body["consecutive_failures"] == 10
    assert (body["p50_ms"], body["p95_ms"], body["p99_ms"]) == (12, 80, 120)
    assert body["sample_count"] == 40
    assert body["counts"] == {"delivered": 3, "pending": 2}


def test_endpoint_pages_follow_the_cursor(api: Api) -> None:
    ids = [api.create_endpoint(description=str(i))["id"] for i in range(5)]
    seen: list[int] = []
    query = {"limit": "2"}
    while True:
        page = api.get("/v1/endpoints", query)
        assert page.status == 200
        seen += [e["id"] for e in page.body["items"]]
        if page.body["next_cursor"] is None:
            break
        query = {"limit": "2", "cursor": page.body["next_cursor"]}
    assert seen == ids


@pytest.mark.parametrize(
    ("path", "query", "field"),
    [
        ("/v1/endpoints", {"limit": "0"}, "limit"),
        ("/v1/endpoints", {"limit": "101"}, "limit"),
        ("/v1/endpoints", {"limit": "ten"}, "limit"),
        ("/v1/endpoints", {"cursor": "not-a-cursor"}, "cursor"),
        ("/v1/endpoints/abc", None, "endpoint_id"),
        ("/v1/endpoints/0", None, "endpoint_id"),
        ("/v1/endpoints/99999999999999999999999", None, "endpoint_id"),
    ],
)
def test_bad_paths_and_queries(api: Api, path: str, query, field: str) -> None:
    reply = api.get(path, query)
    assert reply.status == 422, reply.raw
    assert reply.error["field"] == field


def test_without_the_secrets_key_nothing_is_created_and_the_answer_is_503(
    api: Api, db: Database
) -> None:
    from tidings import wiring
    from tidings.secrets.keyring import Keyring
    from tidings.secrets.master_keys import KeyUnavailable, LocalMasterKey

    class Refusing(LocalMasterKey):
        def new_data_key(self, key_id: int) -> tuple[bytes, bytes]:
            raise KeyUnavailable("KMS refused a data key from arn:aws:kms:...: AccessDenied")

    created = api.create_endpoint()
    wiring.override(
        keyring=Keyring(Refusing(bytes(range(5, 37)), "refusing"), data_key_max_age_s=60)
    )
    reply = api.post("/v1/endpoints", {"url": PUBLIC_URL})
    assert (reply.status, reply.error["code"]) == (503, "secrets_key_unavailable")
    assert "arn:aws:kms" not in reply.raw
    rotated = api.post(f"/v1/endpoints/{created['id']}/rotate-secret")
    assert (rotated.status, rotated.error["code"]) == (503, "secrets_key_unavailable")
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.endpoints")
        assert cur.fetchone() == (1,)
        assert stored_secrets(cur, created["id"]) == [created["secret"]]
