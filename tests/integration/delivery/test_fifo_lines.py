"""Ordered delivery (FIFO endpoints): messages of a line go one at a time, in the order their
events were accepted, across retries, dead letters, pauses and batches; lines of different
ordering keys proceed side by side."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from standardwebhooks.webhooks import Webhook

from tests.integration.delivery.delivery_harness import RecordingQueue
from tests.integration.delivery.fifo_harness import (
    fifo_endpoint,
    line_of,
    run_pipelines,
    send_events,
    settled,
    statuses,
)
from tests.support.fifo_receiver import FifoReceiver, running_fifo_receiver
from tests.support.seed import TEST_SECRET
from tidings.dal.connection import Database


@pytest.fixture
def receiver() -> Iterator[FifoReceiver]:
    with running_fifo_receiver() as r:
        yield r


def _run(database_url: str, endpoint_id: int, **options: object) -> float:
    return run_pipelines(
        database_url, RecordingQueue(), lambda db: settled(db, endpoint_id), **options
    )


def test_a_line_is_delivered_in_the_order_its_events_were_accepted(
    db: Database, database_url: str, receiver: FifoReceiver
) -> None:
    endpoint_id = fifo_endpoint(db, receiver.url)
    ids = send_events(db, [(f"e{i}", None) for i in range(12)])
    ids += send_events(db, [(f"f{i}", None) for i in range(8)])
    assert set(statuses(db, endpoint_id).values()) == {"waiting"}

    _run(database_url, endpoint_id, workers=2)

    assert receiver.taken() == ids
    assert receiver.most_in_progress == 1
    assert set(statuses(db, endpoint_id).values()) == {"delivered"}
    assert line_of(db, endpoint_id) == {"head_seq": None, "paused_at": None}


def test_a_failing_message_holds_its_line_until_it_is_delivered(
    db: Database, database_url: str, receiver: FifoReceiver
) -> None:
    endpoint_id = fifo_endpoint(db, receiver.url)
    ids = send_events(db, [(f"e{i}", None) for i in range(6)])
    receiver.fail_times[ids[2]] = 3

    _run(database_url, endpoint_id, workers=3)

    # Every attempt of message 2 came before message 3 arrived at all.
    order = [a.message_ids[0] for a in receiver.arrivals]
    assert order == [ids[0], ids[1], ids[2], ids[2], ids[2], ids[2], ids[3], ids[4], ids[5]]
    assert receiver.taken() == ids


def test_a_dead_letter_lets_its_line_go_on_by_default(
    db: Database, database_url: str, receiver: FifoReceiver
) -> None:
    endpoint_id = fifo_endpoint(db, receiver.url)
    ids = send_events(db, [(f"e{i}", None) for i in range(5)])
    receiver.refuse.add(ids[1])

    _run(database_url, endpoint_id)

    assert receiver.taken() == [ids[0], ids[2], ids[3], ids[4]]
    assert statuses(db, endpoint_id)[ids[1]] == "dead_letter"


def test_pause_stops_the_line_at_a_dead_letter_until_it_is_resumed(
    db: Database, database_url: str, receiver: FifoReceiver
) -> None:
    endpoint_id = fifo_endpoint(db, receiver.url, on_dead_letter="pause")
    ids = send_events(db, [(f"e{i}", None) for i in range(5)])
    receiver.refuse.add(ids[1])

    run_pipelines(
        database_url,
        RecordingQueue(),
        lambda watcher: (line_of(watcher, endpoint_id) or {}).get("paused_at") is not None,
    )
    assert receiver.taken() == [ids[0]]
    assert [statuses(db, endpoint_id)[i] for i in ids] == [
        "delivered",
        "dead_letter",
        "waiting",
        "waiting",
        "waiting",
    ]
    # New events wait behind the paused line too.
    ids += send_events(db, [("e5", None)])

    with db.cursor() as cur:
        cur.execute("SELECT * FROM tidings.resume_lines_v1(%s, NULL)", (endpoint_id,))
        assert [row[0] for row in cur.fetchall()] == [""]
    _run(database_url, endpoint_id)

    assert receiver.taken() == [ids[0], ids[2], ids[3], ids[4], ids[5]]


def test_ordering_keys_make_lines_that_run_side_by_side_each_in_order(
    db: Database, database_url: str
) -> None:
    with running_fifo_receiver(latency_ms=30) as receiver:
        endpoint_id = fifo_endpoint(db, receiver.url)
        keys = [f"cus_{k}" for k in range(4)]
        ids = send_events(db, [(f"e{i}", keys[i % 4]) for i in range(24)])

        _run(database_url, endpoint_id, workers=4)

        taken = receiver.taken()
        for k in range(4):
            assert [i for i in taken if i in ids[k::4]] == ids[k::4]
        # Lines of different keys were in flight together.
        assert receiver.most_in_progress > 1


def test_a_batch_carries_the_next_messages_of_its_line_in_one_signed_request(
    db: Database, database_url: str, receiver: FifoReceiver
) -> None:
    endpoint_id = fifo_endpoint(db, receiver.url, batch_size=4)
    ids = send_events(db, [(f"e{i}", "cus_1") for i in range(10)])

    _run(database_url, endpoint_id)

    assert receiver.taken() == ids
    assert [len(a.message_ids) for a in receiver.arrivals] == [4, 4, 2]
    first = receiver.arrivals[0]
    assert first.headers["webhook-id"] == f"batch_{ids[0]}_{ids[3]}"
    assert first.headers["webhook-event-type"] == "ledger.entry"
    verified = Webhook(TEST_SECRET).verify(first.body, first.headers)
    assert [element["id"] for element in verified] == [f"msg_{i}" for i in ids[:4]]
    assert verified[0]["type"] == "ledger.entry"
    assert verified[0]["ordering_key"] == "cus_1"
    assert verified[0]["data"] == {"entry": "e0", "key": "cus_1"}
    assert set(verified[0]) == {"id", "type", "timestamp", "ordering_key", "data"}


def test_a_failed_batch_is_retried_whole_and_keeps_its_id(
    db: Database, database_url: str, receiver: FifoReceiver
) -> None:
    endpoint_id = fifo_endpoint(db, receiver.url, batch_size=3)
    ids = send_events(db, [(f"e{i}", None) for i in range(3)])
    receiver.fail_times[ids[1]] = 2
    queue = RecordingQueue()
    run_pipelines(database_url, queue, lambda watcher: len(receiver.arrivals) >= 1)
    # Recorded after the batch's first attempt: not one of its messages.
    ids += send_events(db, [("e3", None)])

    run_pipelines(database_url, queue, lambda watcher: settled(watcher, endpoint_id))

    batches = [(a.message_ids, a.headers["webhook-id"], a.status) for a in receiver.arrivals]
    batch_id = f"batch_{ids[0]}_{ids[2]}"
    assert batches == [
        (tuple(ids[:3]), batch_id, 500),
        (tuple(ids[:3]), batch_id, 500),
        (tuple(ids[:3]), batch_id, 200),
        ((ids[3],), f"batch_{ids[3]}_{ids[3]}", 200),
    ]
    with db.cursor() as cur:
        cur.execute(
            "SELECT message_id, count(*) FROM tidings.attempts WHERE message_id = ANY (%s)"
            " GROUP BY message_id ORDER BY message_id",
            (ids[:3],),
        )
        assert cur.fetchall() == [(i, 3) for i in ids[:3]]
    assert json.loads(receiver.arrivals[-1].body)[0]["id"] == f"msg_{ids[3]}"


def test_eight_claimers_and_senders_keep_every_line_in_order_across_retries(
    db: Database, database_url: str
) -> None:
    """Eight claimer-and-sender workers on connections of their own, 16 ordering keys, a
    receiver that takes 20 ms and fails some messages a few times: each key's messages arrive in
    order, message k+1 of a key never before k was delivered, and the keys' lines overlap."""
    keys = [f"acct_{k:02d}" for k in range(16)]
    with running_fifo_receiver(latency_ms=20) as receiver:
        endpoint_id = fifo_endpoint(db, receiver.url)
        events = [(f"e{i}", keys[i % 16]) for i in range(160)]
        ids = send_events(db, events[:80]) + send_events(db, events[80:])
        line_of_id = dict(zip(ids, [key for _, key in events], strict=True))
        failing = ids[3::17]
        for message_id in failing:
            receiver.fail_times[message_id] = 2

        # When the lines that never fail are done first, the failing heads' attempts come one
        # after another and open the endpoint's circuit, as ten failures in a row should: its
        # cooldown is a second here, so the lines go on through its probes within the test.
        _run(database_url, endpoint_id, workers=8, timeout_s=240, circuit_cooldown_s=1.0)

        assert set(statuses(db, endpoint_id).values()) == {"delivered"}
        delivered_at: dict[int, float] = {}
        for arrival in receiver.arrivals:
            (message_id,) = arrival.message_ids
            key = line_of_id[message_id]
            # (Message ids follow the events' keys, not their order: the order is the list's.)
            place = ids.index(message_id)
            earlier = [i for i in ids[:place] if line_of_id[i] == key]
            # Every message before it in its line was delivered before this request arrived.
            assert all(delivered_at.get(i, arrival.at + 1) < arrival.at for i in earlier), (
                message_id,
                key,
            )
            if arrival.status == 200:
                delivered_at.setdefault(message_id, arrival.answered_at)
        for key in keys:
            line = [i for i in ids if line_of_id[i] == key]
            assert [i for i in receiver.taken() if line_of_id[i] == key] == line
        assert all(
            sum(a.status == 500 for a in receiver.arrivals if a.message_ids == (i,)) == 2
            for i in failing
        )
        # Lines of different keys were attempted side by side.
        assert receiver.most_in_progress >= 4
