"""``tidings.client`` and ordered delivery against the real API over HTTP, on PostgreSQL: a FIFO
endpoint's options, events with ordering keys, its lines listed a page at a time, and those
paused at a dead letter resumed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.client.conftest import PUBLIC_URL, LocalApi
from tidings.client import Client, EventToSend, InvalidRequest, Line, NotFound
from tidings.dal.connection import Database


@pytest.fixture
def admin(local_api: LocalApi) -> Iterator[Client]:
    with Client(local_api.url, local_api.admin_token) as client:
        yield client


def _start_lines(db: Database) -> None:
    """What the claimer does first: the lines of new waiting messages made, their heads due."""
    with db.cursor() as cur:
        cur.execute("SELECT tidings.advance_noted_lines_v1(1000)")


def _pause_at_head(db: Database, endpoint_id: int, key: str) -> None:
    """The line's head dead-lettered, and the line moved on as the sender moves it."""
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages m SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 5 FROM tidings.fifo_lines f"
            " WHERE f.endpoint_id = %(e)s AND f.ordering_key = %(k)s"
            " AND m.endpoint_id = f.endpoint_id AND m.line_key = f.ordering_key"
            " AND m.line_seq = f.head_seq",
            {"e": endpoint_id, "k": key},
        )
        cur.execute(
            "SELECT * FROM tidings.advance_lines_v1(ARRAY[%s]::bigint[], ARRAY[%s]::text[],"
            " NULL, false, true)",
            (endpoint_id, key),
        )


def test_a_fifo_endpoints_lines_listed_and_resumed(admin: Client, db: Database) -> None:
    admin.create_application("acme")
    acme = admin.in_app("acme")
    endpoint = acme.create_endpoint(
        PUBLIC_URL, ordering="fifo", fifo_batch_size=5, fifo_on_dead_letter="pause"
    )
    assert (endpoint.ordering, endpoint.fifo_batch_size, endpoint.fifo_on_dead_letter) == (
        "fifo",
        5,
        "pause",
    )
    assert endpoint.paused_lines == 0

    first = acme.send_event("order.paid", {"n": 1}, ordering_key="cus_1")
    acme.send_events(
        [
            EventToSend("order.paid", {"n": 2}, ordering_key="cus_1"),
            EventToSend("order.paid", {"n": 3}, ordering_key="cus_2"),
            EventToSend("order.paid", {"n": 4}),
        ]
    )
    (head,) = first.message_ids
    message = acme.get_message(head)
    assert (message.ordering_key, message.status) == ("cus_1", "waiting")
    assert [m.status for m in acme.iter_messages(status="waiting")] == ["waiting"] * 4
    _start_lines(db)

    page = acme.list_lines(endpoint.id, limit=2)
    assert [line.ordering_key for line in page.items] == [None, "cus_1"]
    assert page.next_cursor is not None
    rest = acme.list_lines(endpoint.id, cursor=page.next_cursor, limit=2)
    assert ([line.ordering_key for line in rest.items], rest.next_cursor) == (["cus_2"], None)
    lines = {line.ordering_key: line for line in acme.iter_lines(endpoint.id)}
    assert all(isinstance(line, Line) for line in lines.values())
    assert (lines["cus_1"].head_message_id, lines["cus_1"].head_status) == (head, "pending")
    assert (lines["cus_1"].waiting, lines["cus_2"].waiting, lines[None].waiting) == (1, 0, 0)
    assert acme.list_lines(endpoint.id, paused=True).items == []

    _pause_at_head(db, endpoint.id, "cus_1")
    _pause_at_head(db, endpoint.id, "")
    assert acme.get_endpoint(endpoint.id).paused_lines == 2
    paused = acme.list_lines(endpoint.id, paused=True).items
    assert [(line.ordering_key, line.head_status) for line in paused] == [
        (None, "dead_letter"),
        ("cus_1", "dead_letter"),
    ]
    assert all(line.paused_at is not None for line in paused)

    # A line that is not paused is left alone; None names the keyless line.
    resumed = acme.resume_lines(endpoint.id, ordering_keys=["cus_1", "cus_2"])
    assert (resumed.endpoint_id, resumed.resumed) == (endpoint.id, ["cus_1"])
    assert acme.resume_lines(endpoint.id, ordering_keys=[None]).resumed == [None]
    assert acme.resume_lines(endpoint.id).resumed == []
    assert acme.get_endpoint(endpoint.id).paused_lines == 0

    changed = acme.update_endpoint(endpoint.id, fifo_batch_size=None, fifo_on_dead_letter=None)
    assert (changed.fifo_batch_size, changed.fifo_on_dead_letter) == (1, "continue")
    assert acme.update_endpoint(endpoint.id, ordering="none").ordering == "none"


def test_refusals_of_the_line_operations(admin: Client) -> None:
    with pytest.raises(NotFound) as missing:
        admin.list_lines(424242)
    assert (missing.value.status, missing.value.code) == (404, "endpoint_not_found")
    with pytest.raises(NotFound):
        admin.resume_lines(424242)
    with pytest.raises(InvalidRequest) as size:
        admin.create_endpoint(PUBLIC_URL, ordering="fifo", fifo_batch_size=101)
    assert size.value.field == "fifo_batch_size"
    with pytest.raises(InvalidRequest) as key:
        admin.send_event("order.paid", {}, ordering_key="")
    assert key.value.field == "ordering_key"
    endpoint = admin.create_endpoint(PUBLIC_URL, ordering="fifo")
    # At most 100 keys a request.
    with pytest.raises(InvalidRequest) as many:
        admin.resume_lines(endpoint.id, ordering_keys=[f"k{n}" for n in range(101)])
    assert many.value.status == 422
