"""Content filters and channels through the API: endpoints carry them, a bad filter is refused
naming the clause and operator with nothing written, /v1/filters/test answers any token, events
carry channels, and events sent over SQL are routed exactly as those sent over HTTP."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.api.conftest import Api, count
from tidings.dal.connection import Database
from tidings.logic.access import Principal, Scope

PAID_AND_BIG = {"$event_type": "order.paid", "total": {"$gte": 100}}


def test_an_endpoint_keeps_its_filter_and_channels(api: Api, db: Database) -> None:
    created = api.create_endpoint(filter=PAID_AND_BIG, channels=["eu", "acme"])
    assert created["filter"] == PAID_AND_BIG
    assert created["channels"] == ["acme", "eu"]
    path = f"/v1/endpoints/{created['id']}"
    shown = api.get(path).body
    assert (shown["filter"], shown["channels"]) == (PAID_AND_BIG, ["acme", "eu"])
    listed = api.get("/v1/endpoints").body["items"][0]
    assert (listed["filter"], listed["channels"]) == (PAID_AND_BIG, ["acme", "eu"])
    with db.cursor() as cur:
        cur.execute(
            "SELECT filter_path::text FROM tidings.endpoints WHERE id = %s", (created["id"],)
        )
        stored = cur.fetchone()
    assert stored is not None and '$"event_type"' in stored[0]

    # Another field changed: both stay.
    kept = api.patch(path, {"description": "x"}).body
    assert (kept["filter"], kept["channels"]) == (PAID_AND_BIG, ["acme", "eu"])
    changed = api.patch(path, {"filter": {"total": 1}, "channels": ["us"]}).body
    assert (changed["filter"], changed["channels"]) == ({"total": 1}, ["us"])
    removed = api.patch(path, {"filter": None, "channels": []}).body
    assert (removed["filter"], removed["channels"]) == (None, [])
    with db.cursor() as cur:
        cur.execute(
            "SELECT filter, filter_path, channels FROM tidings.endpoints WHERE id = %s",
            (created["id"],),
        )
        assert cur.fetchone() == (None, None, None)


def test_an_endpoint_without_them_shows_none(api: Api) -> None:
    created = api.create_endpoint()
    assert (created["filter"], created["channels"]) == (None, [])


@pytest.mark.parametrize(
    "case",
    [
        ({"total": {"$regex": "^1"}}, "/total/$regex", "$regex", "unsupported_operator"),
        ({"$or": [{"a": 1}, {"b": {"$gt": [1]}}]}, "/$or/1/b/$gt", "$gt", "invalid_value"),
        ({"a": {"$foo": 1}}, "/a/$foo", "$foo", "unknown_operator"),
    ],
)
def test_a_bad_filter_is_refused_naming_the_clause_and_nothing_is_written(
    api: Api, db: Database, case: tuple[Any, str, str, str]
) -> None:
    document, path, operator, code = case
    created = api.create_endpoint()
    before = count(db, "endpoints")
    refused = api.post("/v1/endpoints", {"url": "https://93.184.215.14/x", "filter": document})
    assert refused.status == 422, refused.raw
    assert refused.error == {
        "code": code,
        "message": refused.error["message"],
        "field": "filter",
        "path": path,
        "operator": operator,
    }
    assert count(db, "endpoints") == before
    patched = api.patch(f"/v1/endpoints/{created['id']}", {"filter": document, "description": "x"})
    assert (patched.status, patched.error["path"]) == (422, path)
    assert api.get(f"/v1/endpoints/{created['id']}").body["description"] == ""


@pytest.mark.parametrize(
    "channels", [["bad name"], ["-x"], [f"c{i}" for i in range(11)], "eu", [1]]
)
def test_bad_channels_are_refused(api: Api, db: Database, channels: Any) -> None:
    refused = api.post("/v1/endpoints", {"url": "https://93.184.215.14/x", "channels": channels})
    assert refused.status == 422, refused.raw
    assert refused.error["field"].startswith("channels")
    sent = api.post(
        "/v1/events/batch",
        {
            "events": [
                {"event_type": "t", "payload": 1},
                {"event_type": "t", "payload": 1, "channels": channels},
            ]
        },
    )
    assert sent.status == 422, sent.raw
    assert sent.error["field"].startswith("events[1].channels")
    assert count(db, "events") == 0
    assert count(db, "endpoints") == 0


def test_trying_a_filter(api: Api) -> None:
    body = {"filter": PAID_AND_BIG, "payload": {"total": 150}, "event_type": "order.paid"}
    matched = api.post("/v1/filters/test", body)
    assert matched.status == 200, matched.raw
    assert matched.body["matches"] is True and matched.body["failed"] is None
    assert matched.body["jsonpath"].startswith('(exists($"event_type"')
    missed = api.post("/v1/filters/test", {**body, "payload": {"total": 99}})
    assert (missed.body["matches"], missed.body["failed"]) == (
        False,
        {"path": "/total/$gte", "operator": "$gte"},
    )
    refused = api.post("/v1/filters/test", {**body, "filter": {"a": {"$regex": "x"}}})
    assert (refused.status, refused.error["path"]) == (422, "/a/$regex")


def test_a_payload_no_event_could_carry_is_not_tried(api: Api, settings: Any) -> None:
    # The reference evaluator's time grows with the payload: one over the deployment's limit
    # is refused as an event's would be, before any of it is evaluated.
    limit = settings.max_payload_bytes
    body = {"filter": {"i": {"$ne": -1}}, "event_type": "t"}
    fits = api.post("/v1/filters/test", {**body, "payload": {"i": "x" * (limit - 10)}})
    assert fits.status == 200, fits.raw
    too_big = api.post("/v1/filters/test", {**body, "payload": {"i": [0] * limit}})
    assert too_big.status == 413, too_big.raw
    assert (too_big.error["code"], too_big.error["field"]) == ("payload_too_large", "payload")


@pytest.mark.parametrize(
    "principal",
    [
        Principal(Scope.PRODUCER, token_id=2),
        Principal(Scope.APP, app_id=1, token_id=3),
        Principal(Scope.APP_READ, app_id=1, token_id=4),
        Principal(Scope.APP_READ, app_id=1, token_id=5, portal_session=True),
    ],
)
def test_any_token_may_try_a_filter(api: Api, principal: Principal) -> None:
    reply = api.as_(principal).post(
        "/v1/filters/test", {"filter": {"a": 1}, "payload": {"a": 1}, "event_type": "t"}
    )
    assert (reply.status, reply.body) == (
        200,
        {"matches": True, "failed": None, "jsonpath": 'exists($."a" ? (@ == 1))'},
    )


def test_a_portal_link_may_not_try_a_filter(api: Api) -> None:
    reply = api.as_(Principal(Scope.PORTAL_LINK, app_id=1, token_id=6)).post(
        "/v1/filters/test", {"filter": {}, "payload": {}, "event_type": "t"}
    )
    assert reply.status == 403


# Events for the routing comparison: types, payloads and channels that each endpoint below
# treats differently.
_EVENTS = [
    ("order.paid", {"total": 150, "region": "eu"}, None),
    ("order.paid", {"total": 50, "items": [{"sku": "A"}]}, ["eu"]),
    ("order.refunded", {"total": 150}, ["us", "eu"]),
    ("order.paid", {"total": "150"}, ["apac"]),
    ("order.paid", [{"total": 150}], None),
]
_ENDPOINTS: list[dict[str, Any]] = [
    {},
    {"filter": PAID_AND_BIG},
    {"filter": {"items.sku": {"$in": ["A", "B"]}}},
    {"channels": ["eu"]},
    {"channels": ["us", "apac"], "filter": {"total": {"$ne": 50}}},
    {"event_types": ["order.paid"], "filter": {"$not": {"region": {"$exists": True}}}},
]


def _routes(db: Database, message_ids: list[list[int]]) -> list[list[int]]:
    """The endpoints (by their place in _ENDPOINTS, among those not deleted) each event's
    messages went to."""
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.endpoints WHERE deleted_at IS NULL ORDER BY id")
        order = [row[0] for row in cur.fetchall()]
        found = []
        for ids in message_ids:
            cur.execute("SELECT endpoint_id FROM tidings.messages WHERE id = ANY(%s)", (ids,))
            found.append(sorted(order.index(row[0]) for row in cur.fetchall()))
    return found


def _fresh_endpoints(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoints SET deleted_at = now(), enabled = false")
    for fields in _ENDPOINTS:
        api.create_endpoint(**fields)


def test_events_sent_over_sql_are_routed_as_over_http(api: Api, db: Database) -> None:
    _fresh_endpoints(api, db)
    over_http = []
    for event_type, payload, channels in _EVENTS:
        sent = api.post(
            "/v1/events",
            {"event_type": event_type, "payload": payload}
            | ({"channels": channels} if channels else {}),
        )
        assert sent.status == 202, sent.raw
        over_http.append(sent.body["message_ids"])
    batch = api.post(
        "/v1/events/batch",
        {
            "events": [
                {"event_type": t, "payload": p} | ({"channels": c} if c else {})
                for t, p, c in _EVENTS
            ]
        },
    )
    assert batch.status == 202, batch.raw
    http_routes = _routes(db, over_http)
    assert _routes(db, [r["message_ids"] for r in batch.body["results"]]) == http_routes

    # The same events from a producer's own transaction: tidings.enqueue for those without
    # channels (it takes none), tidings.enqueue_batch for every one.
    _fresh_endpoints(api, db)
    with db.transaction() as cur:
        over_sql = []
        for event_type, payload, channels in _EVENTS:
            if channels:
                cur.execute(
                    "SELECT message_ids FROM tidings.enqueue_batch(%s::jsonb)",
                    (
                        json.dumps(
                            [{"event_type": event_type, "payload": payload, "channels": channels}]
                        ),
                    ),
                )
                over_sql.append(list(cur.fetchone()[0]))
            else:
                cur.execute(
                    "SELECT * FROM tidings.enqueue(%s, %s::jsonb)",
                    (event_type, json.dumps(payload)),
                )
                over_sql.append([row[0] for row in cur.fetchall()])
    sql_routes = _routes(db, over_sql)
    assert sql_routes == http_routes
    assert http_routes == [[0, 1], [0, 2, 3, 5], [0, 3, 4], [0, 4, 5], [0, 1, 5]]


def test_a_message_shows_its_events_channels(api: Api) -> None:
    api.create_endpoint()
    sent = api.post("/v1/events", {"event_type": "t", "payload": 1, "channels": ["eu", "acme"]})
    plain = api.post("/v1/events", {"event_type": "t", "payload": 2})
    shown = api.get(f"/v1/messages/{sent.body['message_ids'][0]}").body
    assert shown["channels"] == ["eu", "acme"]
    assert api.get(f"/v1/messages/{plain.body['message_ids'][0]}").body["channels"] == []
