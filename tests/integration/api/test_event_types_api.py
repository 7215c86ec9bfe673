"""The event-type catalog over the API: writes checked against JSON Schema's meta-schema and
examples against the schema, versions kept, validation on ingest (all or nothing), send-example,
and the catalog shared and read-only to every token but admin ones."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.integration.api.conftest import PUBLIC_URL, Api, count
from tests.support.seed import make_application
from tidings.dal.connection import Database
from tidings.logic.access import Principal, Scope

ORDER_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id", "amount"],
    "properties": {
        "id": {"type": "string"},
        "amount": {"type": "integer", "minimum": 0},
        "lines": {"type": "array", "items": {"$ref": "#/$defs/line"}},
    },
    "$defs": {"line": {"type": "object", "required": ["sku"]}},
}
ORDER_EXAMPLE = {"id": "ord_1", "amount": 1200}


def producer_events(db: Database) -> int:
    """Events of every application but the operational one (where endpoint changes are told)."""
    with db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.events ev"
            " JOIN tidings.applications a ON a.id = ev.app_id"
            " WHERE a.uid <> 'tidings-operational'"
        )
        row = cur.fetchone()
        assert row is not None
        return int(row[0])


def new_application(db: Database, uid: str) -> int:
    with db.cursor() as cur:
        return make_application(cur, uid)


def create_order_paid(api: Api, **fields: Any) -> dict[str, Any]:
    reply = api.post(
        "/v1/event-types",
        {
            "name": "order.paid",
            "description": "An order was paid",
            "schema": ORDER_SCHEMA,
            "examples": [ORDER_EXAMPLE],
            **fields,
        },
    )
    assert reply.status == 201, reply.raw
    return dict(reply.body)


def test_an_event_type_is_created_read_and_listed(api: Api) -> None:
    created = create_order_paid(api)
    assert created["version"] == 1
    assert created["schema"] == ORDER_SCHEMA
    assert created["examples"] == [ORDER_EXAMPLE]
    assert created["validate_payloads"] is False
    assert api.get("/v1/event-types/order.paid").body == created
    listed = api.get("/v1/event-types").body
    assert [t["name"] for t in listed["items"]] == ["order.paid"]
    again = api.post("/v1/event-types", {"name": "order.paid"})
    assert again.status == 409
    assert again.error["code"] == "event_type_exists"
    assert api.get("/v1/event-types/order.unknown").status == 404


def test_a_schema_that_breaks_the_meta_schema_is_refused_naming_where(api: Api) -> None:
    reply = api.post(
        "/v1/event-types",
        {"name": "order.paid", "schema": {"type": "object", "properties": {"id": {"type": 5}}}},
    )
    assert reply.status == 422
    assert reply.error["code"] == "invalid_schema"
    assert reply.error["field"] == "schema"
    assert "/properties/id/type" in reply.error["message"]
    other_draft = api.post(
        "/v1/event-types",
        {"name": "order.paid", "schema": {"$schema": "http://json-schema.org/draft-07/schema#"}},
    )
    assert other_draft.status == 422
    assert "draft 2020-12" in other_draft.error["message"]
    assert api.get("/v1/event-types/order.paid").status == 404


def test_an_example_that_does_not_match_the_schema_is_refused(api: Api) -> None:
    reply = api.post(
        "/v1/event-types",
        {"name": "order.paid", "schema": ORDER_SCHEMA, "examples": [ORDER_EXAMPLE, {"id": 7}]},
    )
    assert reply.status == 422
    assert reply.error["code"] == "example_does_not_match_schema"
    assert reply.error["field"] == "examples[1]"
    assert api.get("/v1/event-types/order.paid").status == 404


def test_a_name_outside_the_catalog_syntax_is_refused(api: Api) -> None:
    for name in ("*", "order paid", "a/b", "x" * 201):
        reply = api.post("/v1/event-types", {"name": name})
        assert reply.status == 422, name


def test_changing_the_schema_makes_a_version_and_keeps_the_earlier_one(api: Api) -> None:
    create_order_paid(api)
    wider = {**ORDER_SCHEMA, "required": ["id"]}
    changed = api.patch("/v1/event-types/order.paid", {"schema": wider, "deprecated": True})
    assert changed.status == 200, changed.raw
    assert changed.body["version"] == 2
    assert changed.body["deprecated"] is True
    assert changed.body["examples"] == [ORDER_EXAMPLE]
    first = api.get("/v1/event-types/order.paid/versions/1").body
    assert first["schema"] == ORDER_SCHEMA
    assert first["version"] == 1
    assert api.get("/v1/event-types/order.paid/versions/2").body["schema"] == wider
    assert api.get("/v1/event-types/order.paid/versions/3").status == 404
    # A plain field changes no version.
    described = api.patch("/v1/event-types/order.paid", {"description": "Paid"})
    assert described.body["version"] == 2


def test_a_new_schema_must_still_match_the_examples(api: Api) -> None:
    create_order_paid(api)
    stricter = {**ORDER_SCHEMA, "required": ["id", "amount", "currency"]}
    reply = api.patch("/v1/event-types/order.paid", {"schema": stricter})
    assert reply.status == 422
    assert reply.error["code"] == "example_does_not_match_schema"
    assert reply.error["keyword"] == "required"
    assert api.get("/v1/event-types/order.paid").body["version"] == 1


def test_archived_types_are_listed_only_when_asked_and_still_delivered(
    api: Api, db: Database
) -> None:
    create_order_paid(api, validate_payloads=True)
    endpoint = api.create_endpoint(event_types=["order.paid"])
    archived = api.patch("/v1/event-types/order.paid", {"archived": True})
    assert archived.body["archived"] is True
    assert api.get("/v1/event-types").body["items"] == []
    every = api.get("/v1/event-types", {"include_archived": "true"}).body["items"]
    assert [t["name"] for t in every] == ["order.paid"]
    sent = api.post("/v1/events", {"event_type": "order.paid", "payload": ORDER_EXAMPLE})
    assert sent.status == 202
    assert len(sent.body["message_ids"]) == 1
    message = api.get(f"/v1/messages/{sent.body['message_ids'][0]}").body
    assert message["endpoint_id"] == endpoint["id"]


def test_ingest_refuses_a_payload_that_does_not_match_with_pointer_and_keyword(
    api: Api, db: Database
) -> None:
    create_order_paid(api, validate_payloads=True)
    api.create_endpoint(event_types=["order.paid"])
    reply = api.post(
        "/v1/events",
        {"event_type": "order.paid", "payload": {"id": "o", "amount": 5, "lines": [{}]}},
    )
    assert reply.status == 422, reply.raw
    assert reply.error["code"] == "payload_does_not_match_schema"
    assert reply.error["field"] == "payload"
    assert reply.error["pointer"] == "/lines/0"
    assert reply.error["keyword"] == "required"
    wrong_type = api.post(
        "/v1/events", {"event_type": "order.paid", "payload": {"id": "o", "amount": "5"}}
    )
    assert wrong_type.error["pointer"] == "/amount"
    assert wrong_type.error["keyword"] == "type"
    assert producer_events(db) == 0
    good = api.post("/v1/events", {"event_type": "order.paid", "payload": ORDER_EXAMPLE})
    assert good.status == 202


def test_a_batch_with_one_bad_payload_records_nothing(api: Api, db: Database) -> None:
    create_order_paid(api, validate_payloads=True)
    api.create_endpoint(event_types=["*"])
    reply = api.post(
        "/v1/events/batch",
        {
            "events": [
                {"event_type": "order.paid", "payload": ORDER_EXAMPLE},
                {"event_type": "other.type", "payload": {"anything": True}},
                {"event_type": "order.paid", "payload": {"id": "o"}},
            ]
        },
    )
    assert reply.status == 422, reply.raw
    assert reply.error["field"] == "events[2].payload"
    assert reply.error["pointer"] == ""
    assert reply.error["keyword"] == "required"
    assert producer_events(db) == 0
    assert count(db, "messages") == 0


def test_the_sql_path_does_not_validate_payloads(api: Api, db: Database) -> None:
    # As documented: a producer recording events in its own transaction is not checked.
    create_order_paid(api, validate_payloads=True)
    api.create_endpoint(event_types=["order.paid"])
    with db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.enqueue('order.paid', %s::jsonb, 'sql-1')",
            ('{"id": 7}',),
        )
        row = cur.fetchone()
    assert row is not None and row[0] == 1
    assert producer_events(db) == 1
    refused = api.post("/v1/events", {"event_type": "order.paid", "payload": {"id": 7}})
    assert refused.status == 422


def test_types_that_do_not_validate_take_any_payload(api: Api) -> None:
    create_order_paid(api)
    reply = api.post("/v1/events", {"event_type": "order.paid", "payload": {"id": 7}})
    assert reply.status == 202


def test_a_schema_change_is_seen_by_the_next_event(api: Api) -> None:
    # The validator in use is the one of the schema the look-up names, never a cached older one.
    create_order_paid(api, validate_payloads=True)
    payload = {"id": "o", "amount": 5, "currency": "EUR"}
    assert api.post("/v1/events", {"event_type": "order.paid", "payload": payload}).status == 202
    closed = {**ORDER_SCHEMA, "additionalProperties": False}
    assert api.patch("/v1/event-types/order.paid", {"schema": closed}).status == 200
    refused = api.post("/v1/events", {"event_type": "order.paid", "payload": payload})
    assert refused.status == 422
    assert refused.error["keyword"] == "additionalProperties"
    assert api.patch("/v1/event-types/order.paid", {"validate_payloads": False}).status == 200
    assert api.post("/v1/events", {"event_type": "order.paid", "payload": payload}).status == 202


def test_validate_payloads_needs_a_schema(api: Api) -> None:
    reply = api.post("/v1/event-types", {"name": "bare", "validate_payloads": True})
    assert reply.status == 422
    assert reply.error["field"] == "validate_payloads"


def test_a_reference_loop_is_refused_on_write_or_on_ingest_never_a_server_error(
    api: Api, db: Database
) -> None:
    endless = api.post("/v1/event-types", {"name": "endless", "schema": {"$ref": "#"}})
    assert endless.status == 422, endless.raw
    assert endless.error["code"] == "invalid_schema"
    # Only payloads holding "loop" meet this one: the schema is taken, such payloads refused.
    schema = {
        "type": "object",
        "properties": {"loop": {"$ref": "#/$defs/again"}},
        "$defs": {"again": {"$ref": "#/$defs/again"}},
    }
    created = api.post(
        "/v1/event-types", {"name": "looping", "schema": schema, "validate_payloads": True}
    )
    assert created.status == 201, created.raw
    assert api.post("/v1/events", {"event_type": "looping", "payload": {"a": 1}}).status == 202
    refused = api.post("/v1/events", {"event_type": "looping", "payload": {"loop": 1}})
    assert refused.status == 422, refused.raw
    assert refused.error["keyword"] == "$ref"
    assert producer_events(db) == 1


@pytest.mark.parametrize("scope", [Scope.APP, Scope.APP_READ, Scope.PRODUCER])
def test_only_admin_tokens_change_the_catalog_and_every_token_reads_it(
    api: Api, db: Database, scope: Scope
) -> None:
    create_order_paid(api)
    app_id = new_application(db, "acme") if scope != Scope.PRODUCER else None
    other = api.as_(Principal(scope, app_id=app_id, token_id=2))
    created = other.post("/v1/event-types", {"name": "mine"})
    assert created.status == 403
    assert other.patch("/v1/event-types/order.paid", {"description": "x"}).status == 403
    assert other.patch("/v1/event-types/order.paid", {"archived": True}).status == 403
    imported = other.post("/v1/event-types/import", {"openapi": "3.1.0", "webhooks": {}})
    assert imported.status == 403
    assert other.get("/v1/event-types/order.paid").status == 200
    assert other.get("/v1/event-types").status == 200
    assert other.get("/v1/event-types/order.paid/versions/1").status == 200
    assert api.get("/v1/event-types/order.paid").body["description"] == "An order was paid"


def test_portal_sessions_read_the_catalog_but_do_not_change_it(api: Api, db: Database) -> None:
    create_order_paid(api)
    app_id = new_application(db, "acme")
    session = api.as_(Principal(Scope.APP, app_id=app_id, token_id=3, portal_session=True))
    assert session.get("/v1/event-types").status == 200
    assert session.patch("/v1/event-types/order.paid", {"archived": True}).status == 403


def test_send_example_delivers_the_first_example_marked_as_one(api: Api, db: Database) -> None:
    create_order_paid(api, examples=[ORDER_EXAMPLE, {"id": "ord_2", "amount": 1}])
    # Not subscribed to the type: the example goes to the endpoint named.
    endpoint = api.create_endpoint(event_types=["something.else"])
    reply = api.post(f"/v1/endpoints/{endpoint['id']}/send-example", {"event_type": "order.paid"})
    assert reply.status == 202, reply.raw
    assert reply.body["event_type"] == "order.paid"
    (message_id,) = reply.body["message_ids"]
    message = api.get(f"/v1/messages/{message_id}").body
    assert message["example"] is True
    assert message["payload"] == ORDER_EXAMPLE
    assert message["endpoint_id"] == endpoint["id"]
    listed = api.get("/v1/messages").body["items"]
    assert [m["example"] for m in listed] == [True]
    ordinary = api.post("/v1/events", {"event_type": "something.else", "payload": {"a": 1}})
    shown = api.get(f"/v1/messages/{ordinary.body['message_ids'][0]}").body
    assert shown["example"] is False


def test_send_example_names_what_is_missing(api: Api, db: Database) -> None:
    endpoint = api.create_endpoint()
    path = f"/v1/endpoints/{endpoint['id']}/send-example"
    unknown_type = api.post(path, {"event_type": "order.paid"})
    assert unknown_type.status == 404
    assert unknown_type.error["code"] == "event_type_not_found"
    assert api.post("/v1/event-types", {"name": "order.paid"}).status == 201
    no_example = api.post(path, {"event_type": "order.paid"})
    assert no_example.status == 422
    assert no_example.error["code"] == "no_example"
    create_order_paid(api, name="order.new")
    unknown_endpoint = api.post("/v1/endpoints/999999/send-example", {"event_type": "order.new"})
    assert unknown_endpoint.status == 404
    assert unknown_endpoint.error["code"] == "endpoint_not_found"
    assert producer_events(db) == 0


def test_send_example_is_refused_in_the_operational_application(api: Api, db: Database) -> None:
    create_order_paid(api)
    app = "/v1/apps/tidings-operational"
    created = api.post(f"{app}/endpoints", {"url": PUBLIC_URL})
    assert created.status == 201, created.raw
    path = f"{app}/endpoints/{created.body['id']}/send-example"
    refused = api.post(path, {"event_type": "order.paid"})
    assert (refused.status, refused.error["code"]) == (409, "operational_application")
    assert producer_events(db) == 0


def test_send_example_stays_inside_the_application(api: Api, db: Database) -> None:
    create_order_paid(api)
    endpoint = api.create_endpoint()
    acme = new_application(db, "acme")
    acme_token = api.as_(Principal(Scope.APP, app_id=acme, token_id=4))
    path = f"/v1/apps/acme/endpoints/{endpoint['id']}/send-example"
    assert acme_token.post(path, {"event_type": "order.paid"}).status == 404
    reader = api.as_(Principal(Scope.APP_READ, app_id=acme, token_id=5))
    assert reader.post(path, {"event_type": "order.paid"}).status == 403
    assert producer_events(db) == 0


def test_concurrent_schema_changes_make_one_version_each(api: Api, database_url: str) -> None:
    create_order_paid(api)
    errors: list[BaseException] = []

    def change(n: int) -> None:
        try:
            schema = {**ORDER_SCHEMA, "title": f"change {n}"}
            reply = api.patch("/v1/event-types/order.paid", {"schema": schema})
            assert reply.status == 200, reply.raw
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=change, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert api.get("/v1/event-types/order.paid").body["version"] == 7
    titles = {
        api.get(f"/v1/event-types/order.paid/versions/{v}").body["schema"].get("title")
        for v in range(2, 8)
    }
    assert titles == {f"change {n}" for n in range(6)}
