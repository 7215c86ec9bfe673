"""Ordered delivery through the API: a FIFO endpoint's options, events with ordering keys, what a
waiting message says it waits for, a paused line listed and resumed, replay to the end of a
line, switching an endpoint's ordering, and all of it closed to other applications' tokens."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.api.conftest import Api
from tests.support.seed import make_application
from tidings.dal.connection import Database
from tidings.logic.access import Principal, Scope


def _statuses(db: Database, ids: list[int]) -> list[str]:
    with db.cursor() as cur:
        cur.execute("SELECT id, status::text FROM tidings.messages WHERE id = ANY (%s)", (ids,))
        found = dict(cur.fetchall())
    return [found[i] for i in ids]


def _send(api: Api, keys: list[str | None], prefix: str = "e") -> list[int]:
    events: list[dict[str, Any]] = []
    for n, key in enumerate(keys):
        event: dict[str, Any] = {
            "event_type": "ledger.entry",
            "event_id": f"{prefix}{n}",
            "payload": {"n": n},
        }
        if key is not None:
            event["ordering_key"] = key
        events.append(event)
    reply = api.post("/v1/events/batch", {"events": events})
    assert reply.status == 202, reply.raw
    return [r["message_ids"][0] for r in reply.body["results"]]


def _claimer_moves_lines(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT tidings.advance_noted_lines_v1(1000)")


def _dead_letter_head(db: Database, message_id: int, endpoint_id: int, key: str) -> None:
    """The head's last attempt failed for good, and its line moved on from it (as the sender's
    record and advance do)."""
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 1, last_error = 'http_400' WHERE id = %s",
            (message_id,),
        )
        cur.execute(
            "SELECT count(*) FROM tidings.advance_lines_v1(ARRAY[%s]::bigint[], ARRAY[%s],"
            " NULL, false, true)",
            (endpoint_id, key),
        )


def test_a_fifo_endpoint_keeps_its_options(api: Api) -> None:
    created = api.create_endpoint(ordering="fifo", fifo_batch_size=10, fifo_on_dead_letter="pause")
    assert (created["ordering"], created["fifo_batch_size"], created["fifo_on_dead_letter"]) == (
        "fifo",
        10,
        "pause",
    )
    assert created["paused_lines"] == 0
    plain = api.create_endpoint()
    assert (plain["ordering"], plain["fifo_batch_size"], plain["fifo_on_dead_letter"]) == (
        "none",
        1,
        "continue",
    )
    changed = api.patch(f"/v1/endpoints/{created['id']}", {"fifo_batch_size": None})
    assert changed.status == 200, changed.raw
    assert changed.body["fifo_batch_size"] == 1
    assert api.get(f"/v1/endpoints/{created['id']}").body["fifo_on_dead_letter"] == "pause"


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"ordering": "lifo"}, "ordering"),
        ({"fifo_batch_size": 0}, "fifo_batch_size"),
        ({"fifo_batch_size": 101}, "fifo_batch_size"),
        ({"fifo_batch_size": True}, "fifo_batch_size"),
        ({"fifo_on_dead_letter": "stop"}, "fifo_on_dead_letter"),
    ],
)
def test_bad_ordering_options_are_refused_naming_the_field(
    api: Api, db: Database, fields: dict[str, Any], field: str
) -> None:
    reply = api.post("/v1/endpoints", {"url": "https://93.184.215.14/hook", **fields})
    assert reply.status == 422, reply.raw
    assert field in reply.raw
    endpoint = api.create_endpoint()
    reply = api.patch(f"/v1/endpoints/{endpoint['id']}", fields)
    assert reply.status == 422, reply.raw
    assert api.get(f"/v1/endpoints/{endpoint['id']}").body["ordering"] == "none"


@pytest.mark.parametrize("key", ["", "k" * 201, 7])
def test_a_bad_ordering_key_refuses_the_whole_batch(api: Api, db: Database, key: Any) -> None:
    api.create_endpoint(ordering="fifo")
    reply = api.post(
        "/v1/events/batch",
        {
            "events": [
                {"event_type": "t", "payload": {}, "ordering_key": "ok"},
                {"event_type": "t", "payload": {}, "ordering_key": key},
            ]
        },
    )
    assert reply.status == 422, reply.raw
    assert "ordering_key" in reply.raw
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.events WHERE event_type = 't'")
        assert cur.fetchone() == (0,)


def test_a_waiting_message_says_whom_it_waits_behind(api: Api, db: Database) -> None:
    endpoint = api.create_endpoint(ordering="fifo")
    first, second = _send(api, ["cus_1", "cus_1"])
    before = api.get(f"/v1/messages/{second}").body
    assert before["status"] == "waiting"
    assert before["ordering_key"] == "cus_1"
    assert before["waiting_for"]["reason"] == "in_line"
    _claimer_moves_lines(db)
    assert _statuses(db, [first, second]) == ["pending", "waiting"]
    detail = api.get(f"/v1/messages/{second}").body
    assert detail["waiting_for"]["reason"] == "in_line"
    assert f"message {first} (pending)" in detail["waiting_for"]["explanation"]
    assert "'cus_1'" in detail["waiting_for"]["explanation"]
    listed = api.get("/v1/messages", {"status": "waiting"}).body["items"]
    assert [m["id"] for m in listed] == [second]
    assert api.get(f"/v1/endpoints/{endpoint['id']}/lines").body["items"] == [
        {
            "ordering_key": "cus_1",
            "paused_at": None,
            "head_message_id": first,
            "head_status": "pending",
            "head_attempts": 0,
            "head_next_attempt_at": api.get(f"/v1/messages/{first}").body["next_attempt_at"],
            "waiting": 1,
        }
    ]


def test_a_paused_line_is_listed_and_resumed(api: Api, db: Database) -> None:
    endpoint = api.create_endpoint(ordering="fifo", fifo_on_dead_letter="pause")["id"]
    ids = _send(api, [None, None, None, "other"])
    _claimer_moves_lines(db)
    _dead_letter_head(db, ids[0], endpoint, "")

    assert api.get(f"/v1/endpoints/{endpoint}").body["paused_lines"] == 1
    paused = api.get(f"/v1/endpoints/{endpoint}/lines", {"paused": "true"}).body["items"]
    assert [
        (line["ordering_key"], line["head_message_id"], line["waiting"]) for line in paused
    ] == [(None, ids[0], 2)]
    assert paused[0]["paused_at"] is not None
    waiting = api.get(f"/v1/messages/{ids[1]}").body["waiting_for"]
    assert waiting["reason"] == "line_paused"
    assert "events without an ordering key" in waiting["explanation"]
    assert (
        "paused its FIFO line"
        in api.get(f"/v1/messages/{ids[0]}").body["waiting_for"]["explanation"]
    )
    # The other key's line is not held by this one.
    assert _statuses(db, ids) == ["dead_letter", "waiting", "waiting", "pending"]

    resumed = api.post(f"/v1/endpoints/{endpoint}/lines/resume", {})
    assert resumed.status == 200, resumed.raw
    assert resumed.body == {"endpoint_id": endpoint, "resumed": [None]}
    assert _statuses(db, ids) == ["dead_letter", "pending", "waiting", "pending"]
    assert api.post(f"/v1/endpoints/{endpoint}/lines/resume", {}).body["resumed"] == []


def test_replaying_the_dead_letter_that_paused_its_line_puts_it_back_at_the_head(
    api: Api, db: Database
) -> None:
    endpoint = api.create_endpoint(ordering="fifo", fifo_on_dead_letter="pause")["id"]
    ids = _send(api, [None, None, None])
    _claimer_moves_lines(db)
    _dead_letter_head(db, ids[0], endpoint, "")

    reply = api.post("/v1/dead-letters/replay", {"message_ids": [ids[0]]})
    assert reply.status == 200, reply.raw
    assert _statuses(db, ids) == ["pending", "waiting", "waiting"]
    assert api.get(f"/v1/endpoints/{endpoint}").body["paused_lines"] == 0


def test_replay_and_resend_go_to_the_end_of_their_line_in_their_order(
    api: Api, db: Database
) -> None:
    endpoint = api.create_endpoint(ordering="fifo")["id"]
    ids = _send(api, ["k", "k", "k", "k"])
    _claimer_moves_lines(db)
    # Messages 0 and 1 ended as dead letters, the line went on to 2, and 3 waits.
    _dead_letter_head(db, ids[0], endpoint, "k")
    _dead_letter_head(db, ids[1], endpoint, "k")
    assert _statuses(db, ids) == ["dead_letter", "dead_letter", "pending", "waiting"]

    reply = api.post("/v1/dead-letters/replay", {"endpoint_id": endpoint})
    assert reply.status == 200, reply.raw
    assert _statuses(db, ids) == ["waiting", "waiting", "pending", "waiting"]
    with db.cursor() as cur:
        cur.execute(
            "SELECT id FROM tidings.messages WHERE endpoint_id = %s ORDER BY line_seq", (endpoint,)
        )
        assert [row[0] for row in cur.fetchall()] == [ids[2], ids[3], ids[0], ids[1]]

    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'delivered', delivered_at = now() WHERE id = %s",
            (ids[2],),
        )
        cur.execute(
            "SELECT count(*) FROM tidings.advance_lines_v1(ARRAY[%s]::bigint[], ARRAY['k'],"
            " NULL, false, true)",
            (endpoint,),
        )
    resent = api.post(f"/v1/messages/{ids[2]}/resend")
    assert resent.status == 202, resent.raw
    assert resent.body["status"] == "waiting"


def test_switching_ordering_moves_unattempted_messages_into_and_out_of_lines(
    api: Api, db: Database
) -> None:
    endpoint = api.create_endpoint()["id"]
    ids = _send(api, ["a", "a", "b"])
    assert _statuses(db, ids) == ["pending", "pending", "pending"]

    assert api.patch(f"/v1/endpoints/{endpoint}", {"ordering": "fifo"}).status == 200
    assert _statuses(db, ids) == ["pending", "waiting", "pending"]

    assert api.patch(f"/v1/endpoints/{endpoint}", {"ordering": "none"}).status == 200
    assert _statuses(db, ids) == ["pending", "pending", "pending"]
    assert api.get(f"/v1/endpoints/{endpoint}/lines").body["items"] == []


def test_another_applications_token_finds_no_line(api: Api, db: Database) -> None:
    endpoint = api.create_endpoint(ordering="fifo", fifo_on_dead_letter="pause")["id"]
    ids = _send(api, [None, None])
    _claimer_moves_lines(db)
    _dead_letter_head(db, ids[0], endpoint, "")
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
    intruder = api.as_(Principal(Scope.APP, app_id=acme, token_id=9))
    for path in (f"/v1/apps/acme/endpoints/{endpoint}/lines", f"/v1/endpoints/{endpoint}/lines"):
        assert intruder.get(path).status in (403, 404), path
        assert intruder.post(path + "/resume", {}).status in (403, 404), path
    reader = api.as_(Principal(Scope.APP_READ, app_id=1, token_id=10))
    assert reader.post(f"/v1/endpoints/{endpoint}/lines/resume", {}).status == 403
    assert _statuses(db, ids) == ["dead_letter", "waiting"]


def test_recovering_a_retrying_head_keeps_it_at_the_head(api: Api, db: Database) -> None:
    endpoint = api.create_endpoint(ordering="fifo")["id"]
    ids = _send(api, ["k", "k", "k"])
    _claimer_moves_lines(db)
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'failed', attempts = 1,"
            " next_attempt_at = now() + interval '1 hour' WHERE id = %s",
            (ids[0],),
        )
    reply = api.post(f"/v1/endpoints/{endpoint}/recover", {"since": "2000-01-01T00:00:00Z"})
    assert reply.status == 200, reply.raw
    assert _statuses(db, ids) == ["pending", "waiting", "waiting"]
    with db.cursor() as cur:
        cur.execute(
            "SELECT id FROM tidings.messages WHERE endpoint_id = %s ORDER BY line_seq", (endpoint,)
        )
        assert [row[0] for row in cur.fetchall()] == ids


def test_a_head_on_its_way_through_a_switch_to_none_and_back_heads_no_line(
    api: Api, db: Database
) -> None:
    endpoint = api.create_endpoint(ordering="fifo", fifo_batch_size=10)["id"]
    ids = _send(api, ["k", "k"])
    _claimer_moves_lines(db)
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET attempts = 1, status = 'failed' WHERE id = %s", (ids[0],)
        )
    assert api.patch(f"/v1/endpoints/{endpoint}", {"ordering": "none"}).status == 200
    assert api.patch(f"/v1/endpoints/{endpoint}", {"ordering": "fifo"}).status == 200
    later = _send(api, ["k", "k"], prefix="f")
    _claimer_moves_lines(db)
    with db.cursor() as cur:
        cur.execute(
            "SELECT id, line_key FROM tidings.messages WHERE id = ANY (%s) ORDER BY id",
            (ids + later,),
        )
        lines = dict(cur.fetchall())
    # The attempted head left its line; the other joined it again, and heads it.
    assert lines[ids[0]] is None
    assert _statuses(db, [ids[1], *later]) == ["pending", "waiting", "waiting"]
