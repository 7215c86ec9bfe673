"""An endpoint's payload format through the API: asked for, else its application's default for
new endpoints, else the deployment's; shown on every read; refused when it names no format."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import PUBLIC_URL, Api, count
from tidings import wiring
from tidings.config import Settings
from tidings.dal.connection import Database


def _stored(db: Database, endpoint_id: int) -> str:
    with db.cursor() as cur:
        cur.execute("SELECT payload_format FROM tidings.endpoints WHERE id = %s", (endpoint_id,))
        row = cur.fetchone()
    assert row is not None
    return str(row[0])


def test_an_endpoint_is_sent_the_raw_payload_unless_it_asks(api: Api, db: Database) -> None:
    created = api.create_endpoint()
    assert created["payload_format"] == "raw"
    enveloped = api.create_endpoint(payload_format="envelope")
    assert enveloped["payload_format"] == "envelope"
    assert _stored(db, enveloped["id"]) == "envelope"
    assert api.get(f"/v1/endpoints/{enveloped['id']}").body["payload_format"] == "envelope"
    listed = {e["id"]: e["payload_format"] for e in api.get("/v1/endpoints").body["items"]}
    assert listed == {created["id"]: "raw", enveloped["id"]: "envelope"}


def test_update_changes_the_format_and_nothing_else(api: Api) -> None:
    created = api.create_endpoint(description="kept", retry_schedule=[60])
    path = f"/v1/endpoints/{created['id']}"
    changed = api.patch(path, {"payload_format": "envelope"})
    assert changed.status == 200, changed.raw
    assert changed.body["payload_format"] == "envelope"
    assert (changed.body["description"], changed.body["retry_schedule"]) == ("kept", [60])
    # Changing something else leaves the format as it is.
    assert api.patch(path, {"description": "other"}).body["payload_format"] == "envelope"
    assert api.patch(path, {"payload_format": "raw"}).body["payload_format"] == "raw"


def test_the_deployment_setting_is_the_default_of_defaults(database_url: str) -> None:
    settings = Settings(database_url=database_url, payload_format="envelope")
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        api = Api()
        assert api.create_endpoint()["payload_format"] == "envelope"
        assert api.create_endpoint(payload_format="raw")["payload_format"] == "raw"


def test_an_applications_default_wins_over_the_deployments_for_its_new_endpoints(
    api: Api, db: Database
) -> None:
    app = api.post("/v1/apps", {"uid": "acme", "default_payload_format": "envelope"})
    assert app.status == 201, app.raw
    assert app.body["default_payload_format"] == "envelope"
    assert api.get("/v1/apps/acme").body["default_payload_format"] == "envelope"
    first = api.post("/v1/apps/acme/endpoints", {"url": PUBLIC_URL})
    assert first.status == 201, first.raw
    assert first.body["payload_format"] == "envelope"
    # The request's own choice wins over the application's.
    raw = api.post("/v1/apps/acme/endpoints", {"url": PUBLIC_URL, "payload_format": "raw"})
    assert raw.body["payload_format"] == "raw"
    # Another application, and 'default', follow the deployment's.
    assert api.create_endpoint()["payload_format"] == "raw"

    # Back to the deployment's: new endpoints get raw; existing ones keep theirs.
    cleared = api.patch("/v1/apps/acme", {"default_payload_format": None})
    assert cleared.status == 200, cleared.raw
    assert cleared.body["default_payload_format"] is None
    later = api.post("/v1/apps/acme/endpoints", {"url": PUBLIC_URL}).body
    assert later["payload_format"] == "raw"
    assert _stored(db, first.body["id"]) == "envelope"
    # A change of the name alone leaves the default as it is.
    api.patch("/v1/apps/acme", {"default_payload_format": "envelope"})
    assert api.patch("/v1/apps/acme", {"name": "Acme"}).body["default_payload_format"] == (
        "envelope"
    )


@pytest.mark.parametrize("value", ["json", "RAW", "", 1, ["raw"], True])
def test_a_format_that_is_not_one_is_refused_and_nothing_is_written(
    api: Api, db: Database, value: Any
) -> None:
    reply = api.post("/v1/endpoints", {"url": PUBLIC_URL, "payload_format": value})
    assert reply.status == 422, reply.raw
    assert reply.error["field"] == "payload_format"
    assert reply.error["code"]
    assert count(db, "endpoints") == 0

    created = api.create_endpoint(payload_format="envelope")
    refused = api.patch(f"/v1/endpoints/{created['id']}", {"payload_format": value})
    assert refused.status == 422, refused.raw
    assert refused.error["field"] == "payload_format"
    assert _stored(db, created["id"]) == "envelope"

    app = api.post("/v1/apps", {"uid": "acme", "default_payload_format": value})
    assert app.status == 422, app.raw
    assert app.error["field"] == "default_payload_format"
    assert count(db, "applications") == 2  # 'default' and the operational application


def test_an_endpoints_format_cannot_be_cleared_to_null(api: Api, db: Database) -> None:
    created = api.create_endpoint(payload_format="envelope")
    refused = api.patch(f"/v1/endpoints/{created['id']}", {"payload_format": None})
    assert refused.status == 422, refused.raw
    assert (refused.error["code"], refused.error["field"]) == ("invalid_value", "payload_format")
    assert _stored(db, created["id"]) == "envelope"
