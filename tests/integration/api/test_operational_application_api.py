"""The operational application through the API: an admin subscribes endpoints there like
anywhere else; another application's token can neither read it nor subscribe to it (nor, so, its
portal show another customer's operational events); nobody deletes it or sends it events."""

from __future__ import annotations

import pytest

from tests.integration.api.conftest import Gateway
from tests.support.seed import make_application, make_endpoint, seed_messages
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.logic import tokens

OPERATIONAL = Settings().operational_application
HOOK = "https://93.184.215.14/ops-hook"


@pytest.fixture
def acme_token(db: Database) -> str:
    with db.cursor() as cur:
        make_application(cur, "acme")
    return tokens.create_token(db, scope="app", application="acme").token


@pytest.fixture
def admin_token(db: Database) -> str:
    return tokens.create_token(db, scope="admin").token


def test_an_admin_subscribes_an_operational_endpoint_like_any_other(
    gateway: Gateway, admin_token: str
) -> None:
    created = gateway.call(
        "POST",
        f"/v1/apps/{OPERATIONAL}/endpoints",
        {"url": HOOK, "event_types": ["endpoint.disabled", "message.attempt.exhausted"]},
        token=admin_token,
    )
    assert created.status == 201, created.raw
    listed = gateway.call("GET", f"/v1/apps/{OPERATIONAL}/endpoints", token=admin_token)
    assert [e["id"] for e in listed.body["items"]] == [created.body["id"]]


def test_another_applications_token_cannot_read_or_subscribe_to_the_operational_application(
    gateway: Gateway, db: Database, acme_token: str, admin_token: str
) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.applications WHERE uid = %s", (OPERATIONAL,))
        operational_id = cur.fetchone()[0]  # type: ignore[index]
        endpoint_id = make_endpoint(cur, HOOK, app_id=operational_id)
        seed_messages(cur, endpoint_id, 1, event_type="endpoint.disabled")
    for app in (OPERATIONAL, str(operational_id)):
        for method, path, body in (
            ("GET", f"/v1/apps/{app}", None),
            ("GET", f"/v1/apps/{app}/endpoints", None),
            ("GET", f"/v1/apps/{app}/endpoints/{endpoint_id}", None),
            ("GET", f"/v1/apps/{app}/messages", None),
            ("POST", f"/v1/apps/{app}/endpoints", {"url": HOOK}),
            ("POST", f"/v1/apps/{app}/portal-links", {}),
        ):
            reply = gateway.call(method, path, body, token=acme_token)
            assert reply.status == 404, (method, path, reply.raw)
    # acme's own lists hold none of it.
    messages = gateway.call("GET", "/v1/apps/acme/messages", token=acme_token)
    assert messages.status == 200 and messages.body["items"] == []
    # Nothing was made.
    endpoints = gateway.call("GET", f"/v1/apps/{OPERATIONAL}/endpoints", token=admin_token)
    assert [e["id"] for e in endpoints.body["items"]] == [endpoint_id]


def test_the_operational_application_cannot_be_deleted(gateway: Gateway, admin_token: str) -> None:
    reply = gateway.call("DELETE", f"/v1/apps/{OPERATIONAL}", token=admin_token)
    assert (reply.status, reply.error["code"]) == (409, "operational_application")
    assert gateway.call("GET", f"/v1/apps/{OPERATIONAL}", token=admin_token).status == 200


def test_nobody_sends_events_to_the_operational_application(
    gateway: Gateway, db: Database, admin_token: str
) -> None:
    producer = tokens.create_token(db, scope="producer").token
    for token in (producer, admin_token):
        for path, body in (
            (f"/v1/apps/{OPERATIONAL}/events", {"event_type": "endpoint.disabled", "payload": {}}),
            (
                f"/v1/apps/{OPERATIONAL}/events/batch",
                {"events": [{"event_type": "endpoint.disabled", "payload": {}}]},
            ),
        ):
            reply = gateway.call("POST", path, body, token=token)
            assert (reply.status, reply.error["code"]) == (409, "operational_application")
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.events")
        assert cur.fetchone() == (0,)


def test_an_operational_endpoint_naming_one_applications_channel_hears_of_it_alone(
    gateway: Gateway, db: Database, admin_token: str
) -> None:
    """As the README's worked example has it: every operational event is on the channel of the
    application it is about, so an operational endpoint naming acme's hears nothing of globex."""
    created = gateway.call(
        "POST",
        f"/v1/apps/{OPERATIONAL}/endpoints",
        {"url": HOOK, "event_types": ["endpoint.created"], "channels": ["acme"]},
        token=admin_token,
    )
    assert created.status == 201, created.raw
    with db.cursor() as cur:
        for uid in ("acme", "globex"):
            make_application(cur, uid)
    for uid in ("acme", "globex"):
        made = gateway.call(
            "POST",
            f"/v1/apps/{uid}/endpoints",
            {"url": f"https://93.184.215.14/{uid}"},
            token=admin_token,
        )
        assert made.status == 201, made.raw
    with db.cursor() as cur:
        cur.execute(
            "SELECT ev.payload ->> 'application_uid' FROM tidings.messages m"
            " JOIN tidings.events ev ON ev.id = m.event_ref WHERE m.endpoint_id = %s",
            (created.body["id"],),
        )
        assert cur.fetchall() == [("acme",)]
        cur.execute("SELECT count(*) FROM tidings.events WHERE event_type = 'endpoint.created'")
        assert cur.fetchone() == (2,)


def test_the_operational_application_the_database_names_cannot_be_deleted(db: Database) -> None:
    """The database holds which application is the operational one (the migrator writes it from
    the deployment's TIDINGS_OPERATIONAL_APPLICATION): an operator's CLI without that variable
    set must not delete it, which would silence every operational event."""
    from tidings.dal import schema as schema_dal
    from tidings.logic import applications
    from tidings.logic.errors import Conflict

    with db.cursor() as cur:
        schema_dal.store_operational_settings(cur, application="ops-events", failing_attempt=4)
    found = applications.find(db, "ops-events")
    assert found is not None
    with pytest.raises(Conflict):
        applications.delete_application(db, found, settings=Settings())
    assert applications.find(db, "ops-events") is not None


def test_events_for_the_operational_application_the_database_names_are_refused(
    db: Database,
) -> None:
    """A process whose TIDINGS_OPERATIONAL_APPLICATION names another application (or none of
    them) still cannot send events to the one the database holds: enqueue_batch refuses them,
    and the refusal is the same Conflict the API answers with 409."""
    from tidings.dal import schema as schema_dal
    from tidings.logic import events
    from tidings.logic.errors import Conflict

    with db.cursor() as cur:
        make_application(cur, "ops-events")
        schema_dal.store_operational_settings(cur, application="ops-events", failing_attempt=4)
    with pytest.raises(Conflict) as refused:
        events.send_event(db, event_type="endpoint.disabled", payload={}, application="ops-events")
    assert (refused.value.code, refused.value.field) == ("operational_application", "application")
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.events")
        assert cur.fetchone() == (0,)
