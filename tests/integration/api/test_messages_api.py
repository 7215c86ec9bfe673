"""Message routes (one with its attempts, filtered pages) and dead-letter replay."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest

from tests.integration.api.conftest import Api, count
from tests.support.seed import make_endpoint, seed_messages
from tidings.dal.connection import Database
from tidings.logic import replay


def dead_letter(db: Database, message_ids: list[int], at: datetime | None = None) -> None:
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', attempts = 5,"
            " dead_lettered_at = coalesce(%s, now()), last_error = 'http_500' WHERE id = ANY(%s)",
            (at, message_ids),
        )


def add_attempts(db: Database, message_id: int, endpoint_id: int, codes: list[int]) -> None:
    with db.cursor() as cur:
        for number, code in enumerate(codes, start=1):
            cur.execute(
                "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number,"
                " status_code, response_ms, error_class, attempted_at)"
                " VALUES (%s, %s, %s, %s, 40, 'http_status', now() - %s * interval '1 minute')",
                (message_id, endpoint_id, number, code, len(codes) - number),
            )


def send(api: Api, event_type: str = "order.paid", **extra) -> list[int]:
    reply = api.post("/v1/events", {"event_type": event_type, "payload": {"x": 1}, **extra})
    assert reply.status == 202, reply.raw
    return list(reply.body["message_ids"])


def test_message_with_payload_and_attempts(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    [message_id] = send(api, event_id="e-1")
    add_attempts(db, message_id, endpoint, [500, 503])
    reply = api.get(f"/v1/messages/{message_id}")
    assert reply.status == 200, reply.raw
    body = reply.body
    assert (body["id"], body["endpoint_id"], body["event_id"]) == (message_id, endpoint, "e-1")
    assert body["payload"] == {"x": 1}
    assert body["status"] == "pending"
    assert [(a["attempt_number"], a["status_code"]) for a in body["attempt_history"]] == [
        (1, 500),
        (2, 503),
    ]
    missing = api.get("/v1/messages/987654")
    assert (missing.status, missing.error["code"]) == (404, "message_not_found")


def test_message_pages_filter_and_follow_the_cursor(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        first = make_endpoint(cur)
        second = make_endpoint(cur, event_types=["user.new"])
    paid = [send(api)[0] for _ in range(5)]
    send(api, "user.new")
    dead_letter(db, [paid[1]])

    seen: list[int] = []
    query = {"endpoint_id": str(first), "limit": "2"}
    while True:
        page = api.get("/v1/messages", query)
        assert page.status == 200, page.raw
        seen += [m["id"] for m in page.body["items"]]
        if page.body["next_cursor"] is None:
            break
        query = {**query, "cursor": page.body["next_cursor"]}
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages WHERE endpoint_id = %s", (first,))
        expected = sorted((r[0] for r in cur.fetchall()), reverse=True)
    assert len(expected) == 6 and set(paid) < set(expected)
    assert seen == expected

    dead = api.get("/v1/messages", {"status": "dead_letter"}).body["items"]
    assert [m["id"] for m in dead] == [paid[1]]
    by_type = api.get("/v1/messages", {"event_type": "user.new", "endpoint_id": str(second)})
    assert [m["endpoint_id"] for m in by_type.body["items"]] == [second]
    assert api.get("/v1/messages", {"event_type": "none"}).body == {
        "items": [],
        "next_cursor": None,
    }


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"status": "lost"}, "status"),
        ({"endpoint_id": "-1"}, "endpoint_id"),
        ({"limit": "1000"}, "limit"),
        ({"cursor": "!!"}, "cursor"),
        ({"event_type": ""}, "event_type"),
    ],
)
def test_bad_message_queries(api: Api, query: dict[str, str], field: str) -> None:
    reply = api.get("/v1/messages", query)
    assert reply.status == 422, reply.raw
    assert reply.error["field"] == field


def test_replay_by_ids_keeps_history_and_resets_attempts(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    ids = [send(api)[0] for _ in range(3)]
    dead_letter(db, ids)
    add_attempts(db, ids[0], endpoint, [500] * 5)
    reply = api.post("/v1/dead-letters/replay", {"message_ids": ids[:2]})
    assert (reply.status, reply.body) == (200, {"requeued": 2})
    with db.cursor() as cur:
        cur.execute(
            "SELECT id, status, attempts, dead_lettered_at, next_attempt_at <= now()"
            " FROM tidings.messages ORDER BY id"
        )
        rows = cur.fetchall()
    assert [r[1:3] for r in rows[:2]] == [("pending", 0), ("pending", 0)]
    assert all(r[3] is None and r[4] for r in rows[:2])
    assert rows[2][1] == "dead_letter"
    assert count(db, "attempts") == 5
    history = api.get(f"/v1/messages/{ids[0]}").body["attempt_history"]
    assert len(history) == 5
    again = api.post("/v1/dead-letters/replay", {"message_ids": ids[:2]})
    assert again.body == {"requeued": 0}


def test_replay_by_endpoint_and_by_time_range(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        one = make_endpoint(cur)
        two = make_endpoint(cur)
        seed_messages(cur, one, 3)
        seed_messages(cur, two, 2)
        cur.execute("SELECT id FROM tidings.messages WHERE endpoint_id = %s ORDER BY id", (one,))
        ones = [r[0] for r in cur.fetchall()]
        cur.execute("SELECT id FROM tidings.messages WHERE endpoint_id = %s ORDER BY id", (two,))
        twos = [r[0] for r in cur.fetchall()]
    now = datetime.now(UTC)
    dead_letter(db, ones)
    dead_letter(db, twos[:1], now - timedelta(hours=3))
    dead_letter(db, twos[1:], now - timedelta(hours=1))

    by_endpoint = api.post("/v1/dead-letters/replay", {"endpoint_id": one})
    assert by_endpoint.body == {"requeued": 3}
    window = {
        "since": (now - timedelta(hours=2)).isoformat(),
        "until": (now - timedelta(minutes=30)).isoformat(),
    }
    by_time = api.post("/v1/dead-letters/replay", window)
    assert by_time.body == {"requeued": 1}
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages WHERE status = 'dead_letter'")
        assert [r[0] for r in cur.fetchall()] == twos[:1]


def test_large_replays_go_in_bounded_batches(db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        seed_messages(cur, endpoint, 25)
        cur.execute("SELECT array_agg(id) FROM tidings.messages")
        row = cur.fetchone()
    assert row is not None
    dead_letter(db, row[0])
    result = replay.replay_dead_letters(db, endpoint_id=endpoint, batch_size=7)
    assert result.requeued == 25
    assert count(db, "messages") == 25


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, None),
        ({"message_ids": []}, "message_ids"),
        ({"message_ids": [0]}, "message_ids[0]"),
        ({"since": "2026-01-01T00:00:00"}, "since"),
        ({"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"}, "since"),
        ({"endpoint_id": "x"}, "endpoint_id"),
    ],
)
def test_bad_replay_requests(api: Api, body: dict, field: str | None) -> None:
    reply = api.post("/v1/dead-letters/replay", body)
    assert reply.status == 422, reply.raw
    assert reply.error.get("field") == field


def test_replay_skips_deleted_endpoints(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        seed_messages(cur, endpoint, 2)
        cur.execute("SELECT array_agg(id) FROM tidings.messages")
        row = cur.fetchone()
    assert row is not None
    dead_letter(db, row[0])
    assert api.delete(f"/v1/endpoints/{endpoint}").status == 204
    reply = api.post("/v1/dead-letters/replay", {"message_ids": row[0]})
    assert reply.body == {"requeued": 0}


def test_a_replay_waits_for_dead_letters_another_transaction_holds(
    db: Database, database_url: str
) -> None:
    """The scheduled dead-letter report holds the rows it claimed while it publishes: a replay
    at that moment must still requeue them, not skip them."""
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        seed_messages(cur, endpoint, 3)
        cur.execute("SELECT array_agg(id ORDER BY id) FROM tidings.messages")
        row = cur.fetchone()
    assert row is not None
    ids = row[0]
    dead_letter(db, ids)
    holder = psycopg2.connect(database_url)
    with holder.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages WHERE id = %s FOR UPDATE", (ids[1],))
    releaser = threading.Timer(1.0, holder.commit)
    releaser.start()
    try:
        result = replay.replay_dead_letters(db, endpoint_id=endpoint)
    finally:
        releaser.join()
        holder.close()
    assert result.requeued == 3
    assert count(db, "messages WHERE status = 'pending'") == 3


def test_a_message_says_what_it_waits_for(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    [message_id] = send(api, event_id="w-1")

    def waiting_for() -> dict:
        reply = api.get(f"/v1/messages/{message_id}")
        assert reply.status == 200, reply.raw
        return reply.body["waiting_for"]

    assert waiting_for()["reason"] == "due"
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET state = 'open', opened_at = now(),"
            " cooldown_s = 120 WHERE endpoint_id = %s RETURNING opened_at",
            (endpoint,),
        )
        row = cur.fetchone()
    assert row is not None
    opened_at = row[0]
    wait = waiting_for()
    assert wait["reason"] == "circuit_open"
    assert datetime.fromisoformat(wait["until"]) == opened_at + timedelta(seconds=120)
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoints SET enabled = false, disabled_reason = '410 Gone'"
            " WHERE id = %s",
            (endpoint,),
        )
    wait = waiting_for()
    assert (wait["reason"], wait["until"]) == ("endpoint_disabled", None)
    assert "410 Gone" in wait["explanation"]
    dead_letter(db, [message_id])
    assert waiting_for()["reason"] == "dead_letter"


def test_a_due_message_of_a_slow_endpoint_at_its_cap_says_so(api: Api, db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    [message_id] = send(api, event_id="slow-1")
    with db.cursor() as cur:
        # Ten others of the endpoint leased (the slow lane's cap), and an answer that took long.
        seed_messages(cur, endpoint, 10, status="in_flight")
        cur.execute(
            "UPDATE tidings.messages SET next_attempt_at = now() + interval '5 minutes'"
            " WHERE endpoint_id = %s AND status = 'in_flight'",
            (endpoint,),
        )
        cur.execute(
            "UPDATE tidings.endpoint_health SET last_success_at = now(),"
            " slow_until = now() + interval '10 minutes' WHERE endpoint_id = %s",
            (endpoint,),
        )

    def waiting_for() -> dict:
        reply = api.get(f"/v1/messages/{message_id}")
        assert reply.status == 200, reply.raw
        return reply.body["waiting_for"]

    wait = waiting_for()
    assert (wait["reason"], wait["until"]) == ("in_flight_limit", None)
    assert "in the slow lane (answers took ≥ 1 s or timed out; until " in wait["explanation"]
    assert "has 10 deliveries in flight, its limit" in wait["explanation"]
    # Its own cap cannot lift it past the lane's (an application's token sets it).
    assert api.patch(f"/v1/endpoints/{endpoint}", {"max_in_flight": 11}).status == 200
    wait = waiting_for()
    assert wait["reason"] == "in_flight_limit"
    # It may lower it.
    assert api.patch(f"/v1/endpoints/{endpoint}", {"max_in_flight": 5}).status == 200
    wait = waiting_for()
    assert wait["reason"] == "in_flight_limit"
    assert "its limit (max_in_flight 5)" in wait["explanation"]
    # Once the hold has passed, the fast lane has no cap.
    assert api.patch(f"/v1/endpoints/{endpoint}", {"max_in_flight": None}).status == 200
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET slow_until = now() - interval '1 second'"
            " WHERE endpoint_id = %s",
            (endpoint,),
        )
    wait = waiting_for()
    assert wait["reason"] == "due" and "slow lane" not in wait["explanation"]
