"""``tidings.client`` against the real API over HTTP, on PostgreSQL: every kind of operation,
typed answers, and refusals carrying the API's reason code and status."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from tests.integration.client.conftest import PUBLIC_URL, LocalApi
from tidings.client import (
    ApiUnreachable,
    Client,
    Conflict,
    CreatedEndpoint,
    EventToSend,
    Forbidden,
    InvalidRequest,
    MessageDetail,
    NotFound,
    Unauthorized,
)
from tidings.dal.connection import Database


@pytest.fixture
def admin(local_api: LocalApi) -> Client:
    with Client(local_api.url, local_api.admin_token) as client:
        yield client


def test_a_producers_round_trip(admin: Client, db: Database) -> None:
    app = admin.create_application("acme", name="Acme Inc.", metadata={"plan": "pro"})
    assert (app.uid, app.name, app.metadata) == ("acme", "Acme Inc.", {"plan": "pro"})
    assert app.created_at.tzinfo is not None
    acme = admin.in_app("acme")
    endpoint = acme.create_endpoint(PUBLIC_URL, event_types=["order.paid"], max_in_flight=3)
    assert isinstance(endpoint, CreatedEndpoint)
    assert endpoint.secret.startswith("whsec_") and endpoint.max_in_flight == 3

    sent = acme.send_event("order.paid", {"id": 42}, event_id="order-42")
    assert sent.created and len(sent.message_ids) == 1
    again = acme.send_event("order.paid", {"id": 42}, event_id="order-42")
    assert (again.created, again.message_ids) == (False, sent.message_ids)
    batch = acme.send_events(
        [EventToSend("order.paid", {"id": n}, f"order-{n}") for n in (43, 44)]
        + [EventToSend("nobody.listens", [1, 2])]
    )
    assert [r.created for r in batch] == [True, True, True]
    assert batch[2].message_ids == []

    message = acme.get_message(sent.message_ids[0])
    assert isinstance(message, MessageDetail)
    assert (message.payload, message.status, message.endpoint_id) == (
        {"id": 42},
        "pending",
        endpoint.id,
    )
    assert message.waiting_for.explanation
    listed = list(acme.iter_messages(endpoint_id=endpoint.id))
    assert [m.id for m in listed] == sorted((m.id for m in listed), reverse=True)
    assert len(listed) == 3
    page = acme.list_messages(event_type="order.paid", limit=2)
    assert len(page.items) == 2 and page.next_cursor is not None
    assert admin.list_messages().items == []  # the default application has none

    shown = acme.get_endpoint(endpoint.id)
    assert shown.url == PUBLIC_URL and shown.lane in ("fast", "slow")
    assert [e.id for e in acme.iter_endpoints()] == [endpoint.id]
    health = acme.endpoint_health(endpoint.id)
    assert health.endpoint_id == endpoint.id and health.counts["pending"] == 3
    rotated = acme.rotate_secret(endpoint.id)
    assert rotated.secret != endpoint.secret
    assert acme.reveal_secret(endpoint.id).secret == rotated.secret
    changed = acme.update_endpoint(
        endpoint.id, url="https://93.184.215.14/moved", max_in_flight=None, enabled=False
    )
    assert (changed.url, changed.max_in_flight, changed.enabled) == (
        "https://93.184.215.14/moved",
        None,
        False,
    )
    assert acme.update_endpoint(endpoint.id, enabled=True).enabled

    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 5, last_error = 'http_500', last_status_code = 500 WHERE id = %s",
            (sent.message_ids[0],),
        )
    report = admin.application_dead_letters("acme", window_s=3600)
    assert report.total == 1 and report.endpoints[0].pattern == "slow_accumulation"
    assert admin.deployment_dead_letters().total == 1
    status = admin.application_status("acme")
    assert (status.application, status.summary.dead_letters) == ("acme", 1)
    assert admin.deployment_status().application is None
    assert acme.replay_dead_letters(endpoint_id=endpoint.id).requeued == 1
    since = datetime.now(UTC) - timedelta(hours=1)
    rounds = list(acme.recover_endpoint_fully(endpoint.id, since=since))
    assert rounds[-1].complete and rounds[-1].matched == 0

    link = acme.create_portal_link(read_only=True, expires_in_s=600)
    assert link.application == "acme" and "#link=" in link.url
    with Client(admin.api_url, link.url.split("#link=", 1)[1]) as portal:
        session = portal.open_portal_session()
    assert (session.read_only, session.application.uid) == (True, "acme")
    with Client(admin.api_url, session.token, app="acme") as reader:
        assert reader.get_endpoint(endpoint.id).id == endpoint.id
        with pytest.raises(Forbidden):
            reader.delete_endpoint(endpoint.id)

    acme.delete_endpoint(endpoint.id)
    with pytest.raises(NotFound) as gone:
        acme.get_endpoint(endpoint.id)
    assert (gone.value.status, gone.value.code) == (404, "endpoint_not_found")
    admin.delete_application("acme")
    with pytest.raises(NotFound):
        admin.get_application("acme")


def test_tokens_and_applications_are_managed(admin: Client) -> None:
    admin.create_application("globex")
    renamed = admin.update_application("globex", name="Globex", default_payload_format="envelope")
    assert (renamed.name, renamed.default_payload_format) == ("Globex", "envelope")
    assert (
        admin.update_application("globex", default_payload_format=None).default_payload_format
        is None
    )
    assert [a.uid for a in admin.iter_applications()] == [
        "default",
        "tidings-operational",
        "globex",
    ]

    expires = datetime.now(UTC) + timedelta(days=1)
    made = admin.create_token("app", application="globex", description="g", expires_at=expires)
    assert made.token.startswith("tdg_") and made.application == "globex"
    assert admin.get_token(made.id).prefix == made.prefix
    assert made.id in [t.id for t in admin.iter_tokens()]
    with Client(admin.api_url, made.token) as globex:
        assert globex.get_application("globex").uid == "globex"
        # Another application does not exist for it, whichever way it is named.
        for other in ("default", "1", "nobody"):
            with pytest.raises(NotFound) as unknown:
                globex.application_status(other)
            assert unknown.value.code == "application_not_found"
        with pytest.raises(NotFound):
            globex.list_endpoints()  # the default application's
        with pytest.raises(Forbidden) as refused:
            globex.deployment_status()
        assert (refused.value.status, refused.value.code) == (403, "forbidden")
        assert admin.revoke_token(made.id).revoked_at is not None
        with pytest.raises(Unauthorized) as revoked:
            globex.get_application("globex")
        assert (revoked.value.status, revoked.value.code) == (401, "unauthorized")


def test_refusals_carry_the_reason_code_the_status_and_the_field(admin: Client) -> None:
    with pytest.raises(InvalidRequest) as invalid:
        admin.create_endpoint("ftp://example.com/hook")
    assert invalid.value.status == 422 and invalid.value.field == "url"
    assert "[" in str(invalid.value) and "HTTP 422" in str(invalid.value)
    with pytest.raises(InvalidRequest) as unknown:
        admin.send_event("order.paid", {}, endpoint_ids=[424242])
    assert unknown.value.code == "unknown_endpoint"
    with pytest.raises(NotFound) as missing:
        admin.get_message(999_999)
    assert (missing.value.code, missing.value.status) == ("message_not_found", 404)
    endpoint = admin.create_endpoint(PUBLIC_URL)
    sent = admin.send_event("order.paid", {"n": 1})
    assert sent.message_ids
    with pytest.raises(Conflict) as conflict:
        admin.resend_message(sent.message_ids[0])
    assert (conflict.value.status, conflict.value.code) == (409, "message_not_finished")
    with pytest.raises(InvalidRequest) as window:
        admin.deployment_dead_letters(window_s=0)
    assert window.value.field == "window_s"
    with pytest.raises(ValueError, match="time zone"):
        admin.recover_endpoint(endpoint.id, since=datetime(2026, 1, 1))
    producer = Client(admin.api_url, admin.create_token("producer").token)
    with pytest.raises(Forbidden):
        producer.create_endpoint(PUBLIC_URL)
    forged = Client(admin.api_url, "tdg_" + "A" * 43)
    with pytest.raises(Unauthorized):
        forged.list_messages()


def test_an_api_out_of_reach_is_named(local_api: LocalApi) -> None:
    away = Client("http://127.0.0.1:9", local_api.admin_token, retries=1, backoff_s=0.01)
    with pytest.raises(
        ApiUnreachable, match=re.escape("cannot reach the API at http://127.0.0.1:9")
    ):
        away.list_endpoints()
