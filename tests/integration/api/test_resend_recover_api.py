"""Resend a message and recover an endpoint through the API: what starts again, what is refused
and why, and that nothing is half done."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.api.conftest import Api
from tests.integration.maintenance.scheduled_support import make_messages
from tidings.dal.connection import Database


def rows(db: Database, *ids: int) -> list[dict[str, Any]]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT id, status::text, attempts, lease_token, delivered_at, dead_lettered_at,"
            " next_attempt_at <= now() AS due FROM tidings.messages WHERE id = ANY(%s)"
            " ORDER BY id",
            (list(ids),),
        )
        names = [c.name for c in cur.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]


def with_attempts(db: Database, message_id: int, endpoint_id: int, count: int) -> None:
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, status_code)"
            " SELECT %s, %s, n, 500 FROM generate_series(1, %s) n",
            (message_id, endpoint_id, count),
        )


@pytest.mark.parametrize("status", ["delivered", "dead_letter"])
def test_resend_starts_a_new_delivery_keeping_the_history(
    api: Api, db: Database, status: str
) -> None:
    endpoint = api.create_endpoint()["id"]
    now = datetime.now(UTC)
    with db.cursor() as cur:
        (message,) = make_messages(
            cur,
            endpoint,
            1,
            status=status,
            attempts=3,
            delivered_at=now if status == "delivered" else None,
            dead_lettered_at=now if status == "dead_letter" else None,
        )
    with_attempts(db, message, endpoint, 3)

    reply = api.post(f"/v1/messages/{message}/resend")

    assert reply.status == 202, reply.raw
    assert (reply.body["id"], reply.body["status"], reply.body["attempts"]) == (
        message,
        "pending",
        0,
    )
    [row] = rows(db, message)
    assert (row["status"], row["attempts"], row["lease_token"], row["due"]) == (
        "pending",
        0,
        None,
        True,
    )
    assert row["delivered_at"] is None and row["dead_lettered_at"] is None
    detail = api.get(f"/v1/messages/{message}").body
    assert len(detail["attempt_history"]) == 3
    assert detail["waiting_for"]["reason"] == "due"


@pytest.mark.parametrize("status", ["pending", "failed", "in_flight"])
def test_a_message_not_finished_is_not_resent(api: Api, db: Database, status: str) -> None:
    endpoint = api.create_endpoint()["id"]
    with db.cursor() as cur:
        (message,) = make_messages(cur, endpoint, 1, status=status, attempts=1)
    before = rows(db, message)
    reply = api.post(f"/v1/messages/{message}/resend")
    assert reply.status == 409, reply.raw
    assert reply.error["code"] == "message_not_finished"
    assert rows(db, message) == before


def test_resend_refuses_unknown_messages_and_closed_endpoints(api: Api, db: Database) -> None:
    assert api.post("/v1/messages/424242/resend").error["code"] == "message_not_found"
    disabled = api.create_endpoint()["id"]
    deleted = api.create_endpoint()["id"]
    with db.cursor() as cur:
        (held,) = make_messages(
            cur, disabled, 1, status="dead_letter", dead_lettered_at=datetime.now(UTC)
        )
        (gone,) = make_messages(
            cur, deleted, 1, status="dead_letter", dead_lettered_at=datetime.now(UTC)
        )
    api.patch(f"/v1/endpoints/{disabled}", {"enabled": False})
    api.delete(f"/v1/endpoints/{deleted}")
    refused = api.post(f"/v1/messages/{held}/resend")
    assert (refused.status, refused.error["code"]) == (409, "endpoint_disabled")
    refused = api.post(f"/v1/messages/{gone}/resend")
    assert (refused.status, refused.error["code"]) == (409, "endpoint_deleted")
    assert [r["status"] for r in rows(db, held, gone)] == ["dead_letter", "dead_letter"]


def test_recover_sends_again_what_was_not_delivered_in_the_window(api: Api, db: Database) -> None:
    endpoint = api.create_endpoint()["id"]
    other = api.create_endpoint()["id"]
    now = datetime.now(UTC)
    in_window = now - timedelta(hours=1)
    with db.cursor() as cur:
        dead = make_messages(
            cur, endpoint, 3, status="dead_letter", created_at=in_window, dead_lettered_at=now
        )
        failed = make_messages(cur, endpoint, 2, status="failed", created_at=in_window, attempts=2)
        untouched = [
            *make_messages(
                cur,
                endpoint,
                1,
                status="delivered",
                created_at=in_window,
                delivered_at=now,
            ),
            *make_messages(cur, endpoint, 1, status="in_flight", created_at=in_window),
            *make_messages(cur, endpoint, 1, status="pending", created_at=in_window),
            # Before the window, and another endpoint's.
            *make_messages(
                cur,
                endpoint,
                1,
                status="dead_letter",
                created_at=now - timedelta(hours=3),
                dead_lettered_at=now,
            ),
            *make_messages(
                cur, other, 1, status="dead_letter", created_at=in_window, dead_lettered_at=now
            ),
        ]
    before = rows(db, *untouched)
    since = (now - timedelta(hours=2)).isoformat()

    reply = api.post(f"/v1/endpoints/{endpoint}/recover", {"since": since})

    assert reply.status == 200, reply.raw
    assert (reply.body["matched"], reply.body["requeued"], reply.body["complete"]) == (5, 5, True)
    assert datetime.fromisoformat(reply.body["until"]) >= now
    assert {(r["status"], r["attempts"], r["lease_token"]) for r in rows(db, *dead, *failed)} == {
        ("pending", 0, None)
    }
    assert rows(db, *untouched) == before

    # Repeated, it finds nothing left to do.
    again = api.post(
        f"/v1/endpoints/{endpoint}/recover", {"since": since, "until": reply.body["until"]}
    )
    assert (again.body["matched"], again.body["requeued"]) == (0, 0)


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({}, "missing", "since"),
        ({"since": "2026-01-01T00:00:00"}, "timezone_aware", "since"),
        ({"since": "yesterday"}, "datetime_from_date_parsing", "since"),
        (
            {"since": "2026-01-02T00:00:00Z", "until": "2026-01-01T00:00:00Z"},
            "invalid_value",
            "since",
        ),
        ({"since": "2026-01-01T00:00:00Z", "limit": 5}, "extra_forbidden", "limit"),
    ],
)
def test_a_bad_recovery_window_is_refused(
    api: Api, body: dict[str, Any], code: str, field: str
) -> None:
    endpoint = api.create_endpoint()["id"]
    reply = api.post(f"/v1/endpoints/{endpoint}/recover", body)
    assert reply.status == 422, reply.raw
    assert (reply.error["code"], reply.error["field"]) == (code, field)


def test_recover_refuses_unknown_and_disabled_endpoints(api: Api, db: Database) -> None:
    window = {"since": "2026-01-01T00:00:00Z"}
    assert api.post("/v1/endpoints/4242/recover", window).error["code"] == "endpoint_not_found"
    endpoint = api.create_endpoint()["id"]
    with db.cursor() as cur:
        (dead,) = make_messages(
            cur, endpoint, 1, status="dead_letter", dead_lettered_at=datetime.now(UTC)
        )
    api.patch(f"/v1/endpoints/{endpoint}", {"enabled": False})
    refused = api.post(f"/v1/endpoints/{endpoint}/recover", window)
    assert (refused.status, refused.error["code"]) == (409, "endpoint_disabled")
    assert rows(db, dead)[0]["status"] == "dead_letter"
