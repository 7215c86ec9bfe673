"""Event routes: fan-out, idempotency (also under 16 concurrent duplicates), batches, errors."""

from __future__ import annotations

import base64
import json
import threading
from typing import Any

import pytest

from tests.integration.api.conftest import Api, Reply, api_event, count
from tests.support.seed import make_endpoint
from tidings import wiring
from tidings.api.app import handle
from tidings.dal import ingest as dal_ingest
from tidings.dal.connection import Database
from tidings.logic import events


def endpoints(db: Database, *event_type_sets: list[str]) -> list[int]:
    with db.cursor() as cur:
        return [make_endpoint(cur, event_types=types) for types in event_type_sets]


def message_endpoints(db: Database, message_ids: list[int]) -> list[int]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT endpoint_id FROM tidings.messages WHERE id = ANY(%s) ORDER BY endpoint_id",
            (message_ids,),
        )
        return [row[0] for row in cur.fetchall()]


def test_event_fans_out_and_a_repeat_answers_200_with_the_same_ids(api: Api, db: Database) -> None:
    paid, every, _other = endpoints(db, ["order.paid"], ["*"], ["user.new"])
    body = {"event_type": "order.paid", "payload": {"order": 7}, "event_id": "evt-1"}
    first = api.post("/v1/events", body)
    assert first.status == 202, first.raw
    assert first.body["created"] is True
    assert first.body["event_id"] == "evt-1"
    assert message_endpoints(db, first.body["message_ids"]) == [paid, every]

    again = api.post("/v1/events", {**body, "payload": {"order": 8}})
    assert again.status == 200
    assert again.body["created"] is False
    assert again.body["message_ids"] == first.body["message_ids"]
    assert count(db, "events") == 1
    assert count(db, "messages") == 2
    with db.cursor() as cur:
        cur.execute("SELECT payload FROM tidings.events")
        assert cur.fetchone() == ({"order": 7},)


def test_without_event_id_each_call_is_new_and_gets_a_named_id(api: Api, db: Database) -> None:
    endpoints(db, ["*"])
    one = api.post("/v1/events", {"event_type": "t", "payload": [1]})
    two = api.post("/v1/events", {"event_type": "t", "payload": [1]})
    assert (one.status, two.status) == (202, 202)
    assert one.body["event_id"] != two.body["event_id"]
    assert count(db, "messages") == 2


def test_named_endpoints_replace_subscriptions(api: Api, db: Database) -> None:
    _paid, other = endpoints(db, ["order.paid"], ["user.new"])
    reply = api.post(
        "/v1/events", {"event_type": "order.paid", "payload": 1, "endpoint_ids": [other]}
    )
    assert reply.status == 202
    assert message_endpoints(db, reply.body["message_ids"]) == [other]


def test_an_event_nobody_subscribes_to_is_recorded_without_messages(api: Api, db: Database) -> None:
    reply = api.post("/v1/events", {"event_type": "lonely", "payload": {}, "event_id": "a"})
    assert (reply.status, reply.body["message_ids"]) == (202, [])
    repeat = api.post("/v1/events", {"event_type": "lonely", "payload": {}, "event_id": "a"})
    assert (repeat.status, repeat.body["created"]) == (200, False)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"payload": {}}, (422, "missing", "event_type")),
        ({"event_type": "t"}, (422, "missing", "payload")),
        ({"event_type": "t", "payload": None}, (422, None, "payload")),
        ({"event_type": 5, "payload": {}}, (422, "string_type", "event_type")),
        ({"event_type": "", "payload": {}}, (422, "string_too_short", "event_type")),
        ({"event_type": "t" * 201, "payload": {}}, (422, "string_too_long", "event_type")),
        ({"event_type": "t", "payload": {}, "event_id": ""}, (422, "string_too_short", "event_id")),
        ({"event_type": "t\x00", "payload": {}}, (422, "invalid_value", "event_type")),
        ({"event_type": "t", "payload": {"k": "\x00"}}, (422, "invalid_value", "payload")),
        ({"event_type": "t", "payload": {"\ud800": 1}}, (422, "invalid_value", "payload")),
        ({"event_type": "t", "payload": {}, "endpoint_ids": [0]}, (422, None, "endpoint_ids[0]")),
        ({"event_type": "t", "payload": {}, "endpoint_ids": ["x"]}, (422, None, "endpoint_ids[0]")),
        (
            {"event_type": "t", "payload": {}, "endpoint_ids": [424242]},
            (422, "unknown_endpoint", "endpoint_ids"),
        ),
        ({"event_type": "t", "payload": {}, "extra": 1}, (422, "extra_forbidden", "extra")),
        ([1, 2], (422, None, None)),
    ],
)
def test_bad_events_are_refused_and_write_nothing(
    api: Api, db: Database, body: Any, expected: tuple[int, str | None, str | None]
) -> None:
    status, code, field = expected
    endpoints(db, ["*"])
    reply = api.post("/v1/events", body)
    assert reply.status == status, reply.raw
    if code is not None:
        assert reply.error["code"] == code
    assert reply.error.get("field") == field
    assert count(db, "events") == 0


def test_payload_over_the_limit_is_413(api: Api, db: Database, settings) -> None:
    limit = settings.max_payload_bytes
    just_fits = {"event_type": "t", "payload": "x" * (limit - 2)}
    assert api.post("/v1/events", just_fits).status == 202
    too_big = api.post("/v1/events", {"event_type": "t", "payload": "x" * (limit - 1)})
    assert too_big.status == 413
    assert (too_big.error["code"], too_big.error["field"]) == ("payload_too_large", "payload")
    assert count(db, "events") == 1


def test_the_sql_functions_refusing_a_payload_size_is_413_too(api: Api, db: Database) -> None:
    # The SQL functions hold every path to the limit; should they refuse a payload the API let
    # through (a number jsonb writes out in full can make its text longer), the answer is the
    # same 413, naming the field, and nothing is written.
    endpoints(db, ["*"])
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.settings SET value = 100 WHERE name = 'max_payload_bytes'")
    batch = {
        "events": [{"event_type": "t", "payload": 1}, {"event_type": "t", "payload": "x" * 200}]
    }
    reply = api.post("/v1/events/batch", batch)
    assert reply.status == 413, reply.raw
    assert (reply.error["code"], reply.error["field"]) == ("payload_too_large", "events[1].payload")
    assert count(db, "events") == 0


def test_malformed_bodies_are_400(api: Api, db: Database) -> None:
    not_json = api.post("/v1/events", raw_body='{"event_type": ')
    assert (not_json.status, not_json.error["code"]) == (400, "invalid_json")
    not_utf8 = api.post(
        "/v1/events",
        raw_body=base64.b64encode(b'{"event_type": "\xff\xfe"}').decode(),
        base64_encoded=True,
    )
    assert (not_utf8.status, not_utf8.error["code"]) == (400, "invalid_encoding")
    bad_base64 = api.post("/v1/events", raw_body="%%%", base64_encoded=True)
    assert bad_base64.status == 400
    deep = api.post(
        "/v1/events",
        raw_body='{"event_type": "t", "payload": ' + "[" * 100_000 + "]" * 100_000 + "}",
    )
    assert deep.status in (400, 422)
    huge_int = api.post("/v1/events", raw_body='{"event_type": "t", "payload": ' + "9" * 5000 + "}")
    assert huge_int.status == 400
    nan = api.post("/v1/events", raw_body='{"event_type": "t", "payload": NaN}')
    assert nan.status == 422
    wrong_type = api.post(
        "/v1/events", raw_body="x=1", content_type="application/x-www-form-urlencoded"
    )
    assert (wrong_type.status, wrong_type.error["code"]) == (415, "unsupported_media_type")
    assert count(db, "events") == 0


def test_request_over_10_mib_is_413(api: Api) -> None:
    reply = api.post("/v1/events", raw_body=" " * (10 * 1024 * 1024 + 1))
    assert (reply.status, reply.error["code"]) == (413, "request_too_large")


def test_nesting_deeper_than_the_limit_is_refused(api: Api, db: Database) -> None:
    deep: Any = 1
    for _ in range(80):
        deep = [deep]
    reply = api.post("/v1/events", {"event_type": "t", "payload": deep})
    assert (reply.status, reply.error["field"]) == (422, "payload")
    assert count(db, "events") == 0


def test_sixteen_concurrent_duplicates_make_one_set_of_rows(
    api: Api, db: Database, database_url: str, settings
) -> None:
    endpoints(db, ["*"], ["*"], ["order.paid"])
    body = {"event_type": "order.paid", "payload": {"n": 1}, "event_id": "same"}
    replies: list[Reply] = []
    lock = threading.Lock()
    start = threading.Barrier(16)

    def send() -> None:
        start.wait()
        try:
            reply = api.post("/v1/events", body)
            with lock:
                replies.append(reply)
        finally:
            wiring.reset_database()

    threads = [threading.Thread(target=send) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(replies) == 16
    assert sorted(r.status for r in replies) == [200] * 15 + [202]
    ids = {tuple(r.body["message_ids"]) for r in replies}
    assert len(ids) == 1 and len(next(iter(ids))) == 3
    assert count(db, "events") == 1
    assert count(db, "messages") == 3


def test_batch_is_all_or_nothing(api: Api, db: Database) -> None:
    paid, _ = endpoints(db, ["order.paid"], ["user.new"])
    events = [
        {"event_type": "order.paid", "payload": {"n": i}, "event_id": f"b{i}"} for i in range(5)
    ]
    bad = [*events[:3], {**events[3], "endpoint_ids": [paid, 424242]}, events[4]]
    refused = api.post("/v1/events/batch", {"events": bad})
    assert refused.status == 422
    assert refused.error == {
        "code": "unknown_endpoint",
        "message": "events[3]: unknown endpoint ids: {424242}",
        "field": "events[3].endpoint_ids",
    }
    assert count(db, "events") == 0

    accepted = api.post("/v1/events/batch", {"events": events})
    assert accepted.status == 202, accepted.raw
    results = accepted.body["results"]
    assert [r["event_id"] for r in results] == [f"b{i}" for i in range(5)]
    assert all(r["created"] and len(r["message_ids"]) == 1 for r in results)
    repeat = api.post("/v1/events/batch", {"events": events})
    assert repeat.status == 200
    assert repeat.body["results"] == [{**r, "created": False} for r in results]
    assert count(db, "events") == 5


def test_batch_field_errors_name_the_position(api: Api, db: Database, settings) -> None:
    ok = {"event_type": "t", "payload": {}}
    cases = [
        ({"events": []}, 422, "events"),
        ({"events": [ok] * 101}, 422, "events"),
        ({"events": [ok, {"payload": {}}]}, 422, "events[1].event_type"),
        (
            {"events": [ok, {**ok, "payload": "x" * settings.max_payload_bytes}]},
            413,
            "events[1].payload",
        ),
        ({"events": [ok, {**ok, "payload": {"a": "\x00"}}]}, 422, "events[1].payload"),
    ]
    for body, status, field in cases:
        reply = api.post("/v1/events/batch", body)
        assert (reply.status, reply.error.get("field")) == (status, field), reply.raw
    assert count(db, "events") == 0


def test_a_key_repeated_inside_a_batch_is_one_event(api: Api, db: Database) -> None:
    endpoints(db, ["*"])
    event = {"event_type": "t", "payload": {"v": 1}, "event_id": "k"}
    reply = api.post("/v1/events/batch", {"events": [event, {**event, "payload": {"v": 2}}]})
    assert reply.status == 202
    first, second = reply.body["results"]
    assert (first["created"], second["created"]) == (True, False)
    assert first["message_ids"] == second["message_ids"]
    assert count(db, "events") == 1


def test_deadlocks_during_ingest_are_retried(
    api: Api, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoints(db, ["*"])
    real = dal_ingest.enqueue_event
    calls: list[int] = []

    def deadlock_twice(cur, event, **options):
        calls.append(1)
        if len(calls) <= 2:
            cur.execute("DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '40P01'; END $$")
        return real(cur, event)

    monkeypatch.setattr(dal_ingest, "enqueue_event", deadlock_twice)
    reply = api.post("/v1/events", {"event_type": "t", "payload": {}, "event_id": "x"})
    assert reply.status == 202, reply.raw
    assert len(calls) == 3
    assert count(db, "messages") == 1


def test_deadlocks_beyond_five_retries_surface(
    api: Api, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def always_deadlocked(cur, event, **options):
        calls.append(1)
        cur.execute("DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '40P01'; END $$")

    monkeypatch.setattr(dal_ingest, "enqueue_event", always_deadlocked)
    reply = api.post("/v1/events", {"event_type": "t", "payload": {}})
    assert (reply.status, reply.error["code"]) == (503, "busy")
    assert "simulated" not in reply.raw
    assert len(calls) == 6  # the first try and five retries
    assert count(db, "events") == 0


def test_constraint_violations_are_reported_at_once(
    api: Api, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []

    def violates(cur, event, **options):
        calls.append(1)
        cur.execute("DO $$ BEGIN RAISE EXCEPTION 'dup' USING ERRCODE = '23505'; END $$")

    monkeypatch.setattr(dal_ingest, "enqueue_event", violates)
    reply = api.post("/v1/events", {"event_type": "t", "payload": {}})
    assert (reply.status, reply.error["code"]) == (409, "conflict")
    assert "dup" not in reply.raw and "DO $$" not in reply.raw
    assert len(calls) == 1


def test_database_rules_refuse_with_422_without_sql_text(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        cur.execute(
            "ALTER TABLE tidings.endpoints ADD CONSTRAINT no_forbidden"
            " CHECK (description <> 'forbidden')"
        )
    reply = api.post("/v1/endpoints", {"url": "https://93.184.215.14/", "description": "forbidden"})
    assert (reply.status, reply.error["code"]) == (422, "constraint_violation")
    assert "no_forbidden" not in reply.raw and "INSERT" not in reply.raw


def test_unexpected_errors_are_a_bare_500(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(cur, event):
        raise RuntimeError("secret internals: SELECT * FROM tidings.events")

    monkeypatch.setattr(dal_ingest, "enqueue_event", broken)
    reply = api.post("/v1/events", {"event_type": "t", "payload": {}})
    assert reply.status == 500
    assert reply.body == {"error": {"code": "internal_error", "message": "internal error"}}


def test_an_unreachable_database_is_503(api: Api, monkeypatch: pytest.MonkeyPatch) -> None:
    from tidings import wiring

    wiring.override(database_factory=lambda: Database("postgresql://nobody@127.0.0.1:9/none"))
    reply = api.post("/v1/events", {"event_type": "t", "payload": {}})
    assert (reply.status, reply.error["code"]) == (503, "database_unavailable")
    assert "127.0.0.1" not in reply.raw


def test_unknown_routes_are_404_and_unknown_methods_405(api: Api) -> None:
    for method, path in (("GET", "/v1/nothing"), ("PUT", "/v1/nothing/1"), ("GET", "/")):
        reply = api.call(method, path)
        assert (reply.status, reply.error["code"]) == (404, "route_not_found")
    for method, path, allowed in (
        ("PUT", "/v1/events", "POST"),
        ("GET", "/v1/events/batch", "POST"),
        ("POST", "/v1/endpoints/7", "DELETE, GET, PATCH"),
        ("HEAD", "/v1/apps/acme/messages", "GET"),
        ("PUT", "/v1/tokens/3", "DELETE, GET"),
    ):
        response = handle(api_event(method, path), None)  # type: ignore[arg-type]
        assert response["statusCode"] == 405, (method, path)
        assert response["multiValueHeaders"]["Allow"] == [allowed]
        assert json.loads(response["body"])["error"]["code"] == "method_not_allowed"


def test_the_sql_error_text_never_leaks(api: Api, db: Database) -> None:
    reply = api.post("/v1/events", {"event_type": "t", "payload": {}, "endpoint_ids": [9]})
    assert reply.status == 422
    assert "CONTEXT" not in reply.raw and "PL/pgSQL" not in reply.raw
    assert json.loads(reply.raw)["error"]["message"] == "unknown endpoint ids: {9}"


def test_overlapping_batches_in_any_order_never_deadlock(database_url: str, db: Database) -> None:
    endpoints(db, ["*"], ["order.paid"])
    keys = [events.EventSpec("order.paid", {"k": k}, f"key-{k}") for k in range(60)]
    outcomes: dict[int, dict[str, tuple[int, ...]]] = {}
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def send(worker: int) -> None:
        mine = keys[worker * 5 :] + keys[: worker * 5]  # same keys, each worker its own order
        worker_db = Database(database_url)
        try:
            start.wait()
            results = events.send_events(worker_db, mine)
            outcomes[worker] = {r.event_id: tuple(r.message_ids) for r in results}
        except BaseException as exc:
            failures.append(exc)
        finally:
            worker_db.close()

    threads = [threading.Thread(target=send, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert len({tuple(sorted(o.items())) for o in outcomes.values()}) == 1
    assert count(db, "events") == 60
    assert count(db, "messages") == 120


def test_the_largest_ids_are_unknown_endpoints_not_errors(api: Api, db: Database) -> None:
    reply = api.post(
        "/v1/events", {"event_type": "t", "payload": {}, "endpoint_ids": [2**63 - 1, 10**18]}
    )
    assert (reply.status, reply.error["code"]) == (422, "unknown_endpoint")
    assert count(db, "events") == 0
