"""Speed lanes: the claim names each row's lane and caps a slow endpoint's rows in flight, the
sender marks slow endpoints, the claimer and the sender's retries keep each lane's rows in its
own queue. Concurrency is checked with several real connections."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
import pytest

from tests.integration.delivery.delivery_harness import (
    Pipeline,
    RecordingQueue,
    envelopes,
    make_pipeline,
    pipeline_settings,
)
from tests.support.receivers import Receiver, running_receiver
from tests.support.secrets import secrets_keyring
from tests.support.seed import make_endpoint, mark_answered, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.delivery.claimer import Claimer
from tidings.delivery.lanes import lane_of
from tidings.delivery.sender import BatchReport, QueueRecord, Sender
from tidings.queue.base import ReceivedMessage


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


def claim(cur: Any, batch_size: int = 100, **kw: Any) -> list[delivery.ClaimedMessage]:
    return delivery.claim_due(cur, batch_size=batch_size, lease_s=60, **kw)


def slow_endpoint(cur: Any, url: str = "https://receiver.example/hook") -> int:
    """An endpoint that answered, slowly: in the slow lane."""
    endpoint = make_endpoint(cur, url)
    mark_answered(cur, endpoint)
    delivery.mark_slow(cur, [endpoint], hold_s=600)
    return endpoint


def with_slow_lane(db: Database, pipeline: Pipeline) -> tuple[Claimer, RecordingQueue]:
    """A claimer of the pipeline's settings whose slow lane has a recording queue of its own."""
    slow_queue = RecordingQueue()
    return Claimer(db, pipeline.queue, pipeline.settings, slow_queue=slow_queue), slow_queue


def send_alone(pipeline: Pipeline, record: ReceivedMessage) -> BatchReport:
    """A slow-lane sender's invocation: one queue message."""
    return pipeline.sender.process([QueueRecord(record.message_id, record.body)])


def in_flight(cur: Any, endpoint_id: int) -> int:
    cur.execute(
        "SELECT count(*) FROM tidings.messages"
        " WHERE endpoint_id = %s AND status = 'in_flight' AND next_attempt_at > now()",
        (endpoint_id,),
    )
    row = cur.fetchone()
    return int(row[0])


def test_an_endpoint_that_never_answered_is_untried_one_row_at_a_time_until_it_answers(
    db: Database,
) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        seed_messages(cur, endpoint, 4)
        [first] = claim(cur, 10, untried_max_in_flight=1)
        assert first.untried and not first.slow
        assert claim(cur, 10, untried_max_in_flight=1) == []
        mark_answered(cur, endpoint)
        rows = claim(cur, 10, untried_max_in_flight=1)
        assert len(rows) == 3 and not any(r.untried or r.slow for r in rows)


def test_a_slow_mark_lasts_its_hold_and_a_fresh_one_is_not_rewritten(db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        mark_answered(cur, endpoint)
        seed_messages(cur, endpoint, 3)
        assert delivery.mark_slow(cur, [endpoint, endpoint], hold_s=600) == 1
        # Marked for more than half the hold: the next slow attempt writes nothing.
        assert delivery.mark_slow(cur, [endpoint], hold_s=600) == 0
        assert [r.slow for r in claim(cur, 1)] == [True]
        cur.execute(
            "UPDATE tidings.endpoint_health SET slow_until = now() - interval '1 second'"
            " WHERE endpoint_id = %s",
            (endpoint,),
        )
        assert [r.slow for r in claim(cur, 1)] == [False]
        assert delivery.mark_slow(cur, [endpoint], hold_s=600) == 1


def test_a_slow_endpoint_gets_no_more_rows_than_its_cap_and_a_fast_one_has_none(
    db: Database,
) -> None:
    with db.cursor() as cur:
        slow = slow_endpoint(cur)
        fast = make_endpoint(cur)
        mark_answered(cur, fast)
        seed_messages(cur, slow, 50)
        seed_messages(cur, fast, 50)
        rows = claim(cur, 100, slow_max_in_flight=3)
        by_endpoint = {e: [r for r in rows if r.endpoint_id == e] for e in (slow, fast)}
        assert len(by_endpoint[slow]) == 3 and all(r.slow for r in by_endpoint[slow])
        assert len(by_endpoint[fast]) == 50 and not any(r.slow for r in by_endpoint[fast])
        # At its cap, the slow endpoint gets nothing more until a row leaves flight.
        assert claim(cur, 100, slow_max_in_flight=3) == []
        cur.execute(
            "UPDATE tidings.messages SET status = 'delivered', delivered_at = now(),"
            " lease_token = NULL WHERE id = %s",
            (by_endpoint[slow][0].message_id,),
        )
        assert len(claim(cur, 100, slow_max_in_flight=3)) == 1


def test_an_endpoints_own_cap_holds_in_either_lane(db: Database) -> None:
    with db.cursor() as cur:
        fast = make_endpoint(cur)
        mark_answered(cur, fast)
        cur.execute("UPDATE tidings.endpoints SET max_in_flight = 7 WHERE id = %s", (fast,))
        seed_messages(cur, fast, 30)
        rows = claim(cur, 100)
        assert len(rows) == 7 and not any(r.slow for r in rows)
        assert claim(cur, 100) == []


def test_an_expired_lease_does_not_count_against_the_cap(db: Database) -> None:
    with db.cursor() as cur:
        slow = slow_endpoint(cur)
        seed_messages(cur, slow, 10)
        assert len(claim(cur, 100, slow_max_in_flight=2)) == 2
        cur.execute(
            "UPDATE tidings.messages SET next_attempt_at = now() - interval '1 second'"
            " WHERE status = 'in_flight'"
        )
        assert len(claim(cur, 100, slow_max_in_flight=2)) == 2


@pytest.mark.parametrize("cap_source", ["slow lane", "endpoint"])
def test_the_cap_holds_under_eight_concurrent_claimers(
    database_url: str, db: Database, cap_source: str
) -> None:
    """Eight claimers on their own connections claim and commit as fast as they can, while a
    watcher counts the endpoint's rows in flight after every claim: never above the cap, and
    the cap is reached (the claimers did lease)."""
    cap = 5
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur) if cap_source == "slow lane" else make_endpoint(cur)
        if cap_source == "endpoint":
            mark_answered(cur, endpoint)
            cur.execute(
                "UPDATE tidings.endpoints SET max_in_flight = %s WHERE id = %s", (cap, endpoint)
            )
        seed_messages(cur, endpoint, 400)
        # Other endpoints' rows, so that the claims have other work to share the batch with.
        for _ in range(3):
            seed_messages(cur, make_endpoint(cur), 50)
    slow_cap = cap if cap_source == "slow lane" else None
    start = threading.Barrier(9)
    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[int] = []

    def claimer() -> None:
        conn = psycopg2.connect(database_url)
        try:
            start.wait()
            while not stop.is_set():
                with conn, conn.cursor() as cur:
                    rows = claim(cur, 20, slow_max_in_flight=slow_cap)
                with conn, conn.cursor() as cur:
                    # Rows of the other endpoints are settled, so that work keeps coming.
                    cur.execute(
                        "UPDATE tidings.messages SET status = 'delivered',"
                        " delivered_at = now(), lease_token = NULL"
                        " WHERE id = ANY (%s) AND endpoint_id <> %s",
                        ([r.message_id for r in rows], endpoint),
                    )
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            conn.close()

    def settle_some() -> None:
        """Delivers one of the capped endpoint's rows now and then, so the cap is tested
        again and again rather than once."""
        conn = psycopg2.connect(database_url)
        conn.autocommit = True
        try:
            start.wait()
            for _ in range(40):
                with conn.cursor() as cur:
                    seen.append(in_flight(cur, endpoint))
                    cur.execute(
                        "UPDATE tidings.messages SET status = 'delivered', delivered_at = now(),"
                        " lease_token = NULL WHERE id = (SELECT id FROM tidings.messages"
                        " WHERE endpoint_id = %s AND status = 'in_flight' LIMIT 1)",
                        (endpoint,),
                    )
                    seen.append(in_flight(cur, endpoint))
                stop.wait(0.02)
        finally:
            stop.set()
            conn.close()

    threads = [threading.Thread(target=claimer) for _ in range(8)]
    threads.append(threading.Thread(target=settle_some))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    with db.cursor() as cur:
        seen.append(in_flight(cur, endpoint))
        cur.execute(
            "SELECT count(*) FROM tidings.messages WHERE endpoint_id = %s AND status = 'delivered'",
            (endpoint,),
        )
        delivered = cur.fetchone()[0]
    assert max(seen) == cap
    assert delivered >= 20


def test_the_claimer_sends_each_lane_to_its_own_queue(db: Database) -> None:
    with db.cursor() as cur:
        slow = slow_endpoint(cur)
        fast = make_endpoint(cur)
        untried = make_endpoint(cur)
        mark_answered(cur, fast)
        seed_messages(cur, slow, 3)
        seed_messages(cur, fast, 4)
        seed_messages(cur, untried, 5)
    fast_queue, slow_queue = RecordingQueue(), RecordingQueue()
    settings = pipeline_settings(untried_max_in_flight=1)
    claimer = Claimer(db, fast_queue, settings, slow_queue=slow_queue)
    assert claimer.claim_once().sent == 8
    fast_sent = envelopes(fast_queue.sent)
    assert len(fast_sent) == 4 and not any(e.slow for e in fast_sent)
    # The slow endpoint's rows, and one of the untried endpoint's: its speed is unknown, so it
    # shares no batch of the fast lane.
    slow_sent = envelopes(slow_queue.sent)
    assert len(slow_sent) == 4 and all(e.slow for e in slow_sent)
    assert rows_by_endpoint(db, slow_sent) == {(slow, 3), (untried, 1)}
    # Without a slow lane, every row goes to the delivery queue.
    with db.cursor() as cur:
        seed_messages(cur, slow, 2)
    only = RecordingQueue()
    assert Claimer(db, only, settings).claim_once().sent == 2
    assert len(envelopes(only.sent)) == 2


def test_a_slow_attempt_moves_its_endpoint_to_the_slow_lane_and_a_quick_one_does_not(
    db: Database, receiver: Receiver
) -> None:
    with db.cursor() as cur:
        slow = make_endpoint(cur, receiver.url("slow/300"))
        quick = make_endpoint(cur, receiver.url("ok"))
        for endpoint in (slow, quick):
            mark_answered(cur, endpoint)
            seed_messages(cur, endpoint, 1)
    pipeline = make_pipeline(db, slow_lane_threshold_ms=200)
    assert pipeline.claim_and_deliver().delivered == 2
    with db.cursor() as cur:
        cur.execute(
            "SELECT endpoint_id FROM tidings.endpoint_health WHERE slow_until > now()"
            " AND endpoint_id = ANY (%s)",
            ([slow, quick],),
        )
        assert [r[0] for r in cur.fetchall()] == [slow]
        seed_messages(cur, slow, 1)
        seed_messages(cur, quick, 1)
        lanes = {r.endpoint_id: r.slow for r in claim(cur)}
    assert lanes == {slow: True, quick: False}


def test_a_timed_out_attempt_marks_its_endpoint_slow(db: Database, receiver: Receiver) -> None:
    with db.cursor() as cur:
        hanging = make_endpoint(cur, receiver.url("hang"))
        mark_answered(cur, hanging)
        seed_messages(cur, hanging, 1)
    pipeline = make_pipeline(db, http_timeout_s=0.3, slow_lane_threshold_ms=10_000)
    assert pipeline.claim_and_deliver().retried == 1
    with db.cursor() as cur:
        cur.execute(
            "SELECT slow_until > now() FROM tidings.endpoint_health WHERE endpoint_id = %s",
            (hanging,),
        )
        assert cur.fetchone() == (True,)


def rows_by_endpoint(db: Database, sent: list[Any]) -> set[tuple[int, int]]:
    """(endpoint id, how many of the envelopes' rows are its) for the envelopes sent."""
    with db.cursor() as cur:
        cur.execute(
            "SELECT endpoint_id, count(*) FROM tidings.messages WHERE id = ANY (%s) GROUP BY 1",
            ([e.message_id for e in sent],),
        )
        return {(int(endpoint), int(n)) for endpoint, n in cur.fetchall()}


def retry_waiting_in_the_database(cur: Any, endpoint_id: int) -> bool:
    """Whether the endpoint's one row is waiting for a retry without a lease (for the claim)."""
    cur.execute(
        "SELECT status::text, lease_token IS NULL, next_attempt_at > now()"
        " FROM tidings.messages WHERE endpoint_id = %s",
        (endpoint_id,),
    )
    return cur.fetchall() == [("failed", True, True)]


@pytest.mark.parametrize("cap_source", ["slow lane", "endpoint"])
def test_a_capped_endpoints_retry_passes_the_claim_rather_than_the_queue(
    db: Database, receiver: Receiver, cap_source: str
) -> None:
    """The claim counts a capped endpoint's rows in flight; a row waiting for its retry's queue
    message is not in flight, so the retry waits in the database, without a lease, and its next
    attempt passes the claim (and its cap) like any other."""
    with db.cursor() as cur:
        if cap_source == "slow lane":
            failing = slow_endpoint(cur, receiver.url("status/500"))
        else:
            failing = make_endpoint(cur, receiver.url("status/500"))
            mark_answered(cur, failing)
            cur.execute("UPDATE tidings.endpoints SET max_in_flight = 2 WHERE id = %s", (failing,))
        seed_messages(cur, failing, 1)
    pipeline = make_pipeline(db)
    claimer, slow_queue = with_slow_lane(db, pipeline)
    assert claimer.claim_once().sent == 1
    lane_queue = slow_queue if cap_source == "slow lane" else pipeline.queue
    [record] = lane_queue.receive()
    sender = Sender(
        db, pipeline.queue, pipeline.settings, pipeline.transport, keyring=secrets_keyring()
    )
    report = sender.process([QueueRecord(record.message_id, record.body)])
    assert report.retried == 1
    assert not any(m.delay_s for m in [*slow_queue.sent, *pipeline.queue.sent])
    with db.cursor() as cur:
        assert retry_waiting_in_the_database(cur, failing)


def test_a_fast_endpoints_retry_still_travels_through_the_queue(
    db: Database, receiver: Receiver
) -> None:
    with db.cursor() as cur:
        failing = make_endpoint(cur, receiver.url("status/500"))
        mark_answered(cur, failing)
        seed_messages(cur, failing, 1)
    pipeline = make_pipeline(db)
    assert pipeline.claim_and_deliver().retried == 1
    [retry] = envelopes([m for m in pipeline.queue.sent if m.delay_s])
    assert not retry.slow
    with db.cursor() as cur:
        assert not retry_waiting_in_the_database(cur, failing)


@pytest.mark.parametrize(("answer", "lane_after"), [("ok", "fast"), ("slow/1500", "slow")])
def test_an_untried_endpoint_is_sent_in_the_slow_lane_and_its_first_answer_decides_its_lane(
    db: Database, receiver: Receiver, answer: str, lane_after: str
) -> None:
    """Its first delivery travels the slow lane with the whole of its timeout (never cut short,
    so never sent twice for being slow), alone in its batch; its answer decides where the rest
    go: a quick one lifts its cap and sends them to the fast lane, a slow one keeps them in the
    slow lane."""
    with db.cursor() as cur:
        untried = make_endpoint(cur, receiver.url(answer))
        seed_messages(cur, untried, 3)
    pipeline = make_pipeline(
        db, slow_lane_threshold_ms=300, http_timeout_s=10, untried_max_in_flight=1
    )
    claimer, slow_queue = with_slow_lane(db, pipeline)
    assert claimer.claim_once().sent == 1
    assert pipeline.queue.sent == []
    [record] = slow_queue.receive()
    report = send_alone(pipeline, record)
    assert report.delivered == 1
    with db.cursor() as cur:
        cur.execute("SELECT error_class FROM tidings.attempts WHERE endpoint_id = %s", (untried,))
        assert cur.fetchall() == [(None,)]
        rows = claim(cur, 10, untried_max_in_flight=1, slow_max_in_flight=10)
    assert len(rows) == 2
    assert {lane_of(slow=r.slow, untried=r.untried).value for r in rows} == {lane_after}


def count_quick(
    cur: Any, endpoint_ids: list[int], release_after: int, sent_at: datetime | None = None
) -> int:
    """A quick answer of each endpoint, to a request sent at ``sent_at`` (now by default)."""
    return delivery.mark_quick(
        cur,
        endpoint_ids,
        sent_at=sent_at or datetime.now(UTC),
        release_after=release_after,
        hold_s=600,
    )


def slow_state(cur: Any, endpoint_id: int) -> tuple[bool, int]:
    """Whether the endpoint is marked slow now, and the quick answers counted against the mark."""
    cur.execute(
        "SELECT coalesce(slow_until > now(), false), quick_answers"
        " FROM tidings.endpoint_health WHERE endpoint_id = %s",
        (endpoint_id,),
    )
    marked, quick = cur.fetchone()
    return bool(marked), int(quick)


def test_quick_answers_in_a_row_end_a_slow_mark_and_a_slow_one_starts_the_count_again(
    db: Database,
) -> None:
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur)
        seed_messages(cur, endpoint, 2)
        assert count_quick(cur, [endpoint, endpoint], release_after=3) == 0
        assert count_quick(cur, [endpoint], release_after=3) == 0
        assert slow_state(cur, endpoint) == (True, 2)
        # Marked for more than half the hold, but with quick answers counted: the slow answer
        # is written, and the count starts again.
        assert delivery.mark_slow(cur, [endpoint], hold_s=600) == 1
        assert slow_state(cur, endpoint) == (True, 0)
        assert count_quick(cur, [endpoint], release_after=3) == 0
        assert count_quick(cur, [endpoint], release_after=3) == 0
        assert [r.slow for r in claim(cur, 1)] == [True]
        assert count_quick(cur, [endpoint], release_after=3) == 1
        assert slow_state(cur, endpoint) == (False, 0)
        assert [r.slow for r in claim(cur, 1)] == [False]


def test_a_failed_attempt_since_the_count_began_starts_it_again(db: Database) -> None:
    """Quick successes with a 503 among them are not in a row: at the one that would end the
    mark, the attempt log shows the failure, and the count begins again from that answer."""
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur)
        seed_messages(cur, endpoint, 1)
        assert count_quick(cur, [endpoint], release_after=3) == 0
        cur.execute(
            "INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number,"
            " attempted_at, status_code, response_ms)"
            " SELECT id, endpoint_id, 1, now(), 503, 3"
            " FROM tidings.messages WHERE endpoint_id = %s",
            (endpoint,),
        )
        assert count_quick(cur, [endpoint], release_after=3) == 0
        assert count_quick(cur, [endpoint], release_after=3) == 0
        assert slow_state(cur, endpoint) == (True, 1)
        assert count_quick(cur, [endpoint], release_after=3) == 0
        assert count_quick(cur, [endpoint], release_after=3) == 1
        assert slow_state(cur, endpoint) == (False, 0)


def test_an_answer_to_a_request_sent_before_the_count_began_is_not_counted(
    db: Database,
) -> None:
    """A request already in flight when the count began may have company that failed before
    it: only requests sent since the count began make the row."""
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur)
        began = datetime.now(UTC)
        assert count_quick(cur, [endpoint], 2, sent_at=began) == 0
        assert count_quick(cur, [endpoint], 2, sent_at=began - timedelta(seconds=1)) == 0
        assert slow_state(cur, endpoint) == (True, 1)
        assert count_quick(cur, [endpoint], 2, sent_at=began + timedelta(seconds=1)) == 1


def test_quick_answers_of_an_endpoint_not_marked_slow_write_nothing(db: Database) -> None:
    """An untried endpoint's rows travel the slow lane too; an expired mark is no mark."""
    with db.cursor() as cur:
        untried = make_endpoint(cur)
        expired = slow_endpoint(cur)
        cur.execute(
            "UPDATE tidings.endpoint_health SET slow_until = now() - interval '1 second'"
            " WHERE endpoint_id = %s",
            (expired,),
        )
        assert count_quick(cur, [untried, expired], release_after=1) == 0
        assert slow_state(cur, untried) == (False, 0)
        assert slow_state(cur, expired) == (False, 0)


def test_concurrent_quick_answers_are_each_counted_and_end_the_mark_once(
    database_url: str, db: Database
) -> None:
    """Eight slow-lane senders, on their own connections, count an answer each at once: every
    answer counts (none is lost to a race), and exactly one of them ends the mark."""
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur)
    start = threading.Barrier(8)
    sent = datetime.now(UTC)
    ended: list[int] = []
    errors: list[BaseException] = []

    def answer_quickly() -> None:
        conn = psycopg2.connect(database_url)
        try:
            start.wait()
            with conn, conn.cursor() as cur:
                ended.append(count_quick(cur, [endpoint], release_after=8, sent_at=sent))
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=answer_quickly) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert sorted(ended) == [0] * 7 + [1]
    with db.cursor() as cur:
        assert slow_state(cur, endpoint) == (False, 0)


def test_a_slow_endpoint_that_answers_quickly_in_the_slow_lane_returns_to_the_fast_lane(
    db: Database, receiver: Receiver
) -> None:
    """One slow answer put it in the slow lane for ten minutes; its quick answers there, as many
    in a row as the setting asks, bring its next rows back to the fast lane's batches."""
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur, receiver.url("ok"))
        seed_messages(cur, endpoint, 3)
    pipeline = make_pipeline(
        db, slow_lane_threshold_ms=1000, slow_lane_max_in_flight=10, slow_lane_release_answers=3
    )
    claimer, slow_queue = with_slow_lane(db, pipeline)
    assert claimer.claim_once().sent == 3
    assert pipeline.queue.sent == []
    marks = []
    for record in slow_queue.receive():
        # The slow lane's senders take one message at a time.
        report = send_alone(pipeline, record)
        assert report.delivered == 1
        with db.cursor() as cur:
            marks.append(slow_state(cur, endpoint))
    assert marks == [(True, 1), (True, 2), (False, 0)]
    with db.cursor() as cur:
        seed_messages(cur, endpoint, 2)
    slow_before = len(slow_queue.sent)
    assert claimer.claim_once().sent == 2
    assert len(slow_queue.sent) == slow_before
    # The fast lane's packing: one queue message carries both rows.
    assert len(pipeline.queue.sent) == 1
    assert [e.slow for e in envelopes(pipeline.queue.sent)] == [False, False]


def test_a_slow_answer_in_the_slow_lane_keeps_the_endpoint_there(
    db: Database, receiver: Receiver
) -> None:
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur, receiver.url("slow/300"))
        seed_messages(cur, endpoint, 2)
    pipeline = make_pipeline(
        db, slow_lane_threshold_ms=500, slow_lane_max_in_flight=10, slow_lane_release_answers=1
    )
    claimer, slow_queue = with_slow_lane(db, pipeline)
    assert claimer.claim_once().sent == 2
    for record in slow_queue.receive():
        # 300 ms: under the threshold, but not under half of it: not quick enough to leave.
        assert send_alone(pipeline, record).delivered
    with db.cursor() as cur:
        assert slow_state(cur, endpoint) == (True, 0)


def test_an_endpoint_leaves_the_slow_lane_early_once_a_hold(db: Database) -> None:
    """Quick in the slow lane, slow again at the fast lane's pace: the second mark lasts its
    whole hold, or the endpoint would hold fast batches back every few answers."""
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur)
        assert count_quick(cur, [endpoint], release_after=1) == 1
        assert delivery.mark_slow(cur, [endpoint], hold_s=600) == 1
        assert count_quick(cur, [endpoint], release_after=1) == 0
        assert slow_state(cur, endpoint) == (True, 0)
        # A hold after the early release, quick answers count again.
        cur.execute(
            "UPDATE tidings.endpoint_health"
            " SET left_slow_lane_at = now() - interval '601 seconds' WHERE endpoint_id = %s",
            (endpoint,),
        )
        assert count_quick(cur, [endpoint], release_after=1) == 1
        assert slow_state(cur, endpoint) == (False, 0)


def test_a_slow_answer_resets_a_quick_count_raised_after_its_statement_began(
    database_url: str, db: Database
) -> None:
    """A slow-lane sender counts a quick answer in a transaction still open when another
    sender marks the endpoint slow: the mark waits for it and starts the count again from what
    it wrote, not from the count its own statement began with."""
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur)
    counting = psycopg2.connect(database_url)
    marking = psycopg2.connect(database_url)
    try:
        with counting.cursor() as cur:
            assert count_quick(cur, [endpoint], release_after=10) == 0
        marked: list[int] = []

        def mark_slow() -> None:
            with marking, marking.cursor() as cur:
                marked.append(delivery.mark_slow(cur, [endpoint], hold_s=600))

        slow_answer = threading.Thread(target=mark_slow)
        slow_answer.start()
        slow_answer.join(0.5)
        assert slow_answer.is_alive(), "the slow mark must wait for the count's lock"
        counting.commit()
        slow_answer.join(10)
        assert marked == [1]
    finally:
        counting.close()
        marking.close()
    with db.cursor() as cur:
        assert slow_state(cur, endpoint) == (True, 0)


def test_quick_answers_in_the_fast_lane_do_not_count(db: Database, receiver: Receiver) -> None:
    """Rows claimed into the fast lane before their endpoint was marked slow say nothing of
    how it does at the slow lane's pace: only the slow lane's answers count."""
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, receiver.url("ok"))
        mark_answered(cur, endpoint)
        seed_messages(cur, endpoint, 2)
    pipeline = make_pipeline(db, slow_lane_threshold_ms=1000, slow_lane_release_answers=1)
    assert pipeline.claimer.claim_once().sent == 2
    with db.cursor() as cur:
        delivery.mark_slow(cur, [endpoint], hold_s=600)
    assert pipeline.deliver_queued().delivered == 2
    with db.cursor() as cur:
        assert slow_state(cur, endpoint) == (True, 0)


def test_quick_refusals_in_the_slow_lane_do_not_count(db: Database, receiver: Receiver) -> None:
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur, receiver.url("status/503"))
        seed_messages(cur, endpoint, 1)
    pipeline = make_pipeline(db, slow_lane_threshold_ms=1000, slow_lane_release_answers=1)
    claimer, slow_queue = with_slow_lane(db, pipeline)
    assert claimer.claim_once().sent == 1
    [record] = slow_queue.receive()
    assert send_alone(pipeline, record).retried == 1
    with db.cursor() as cur:
        assert slow_state(cur, endpoint) == (True, 0)


def test_a_failed_count_of_quick_answers_costs_the_lane_never_the_outcome(
    db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    with db.cursor() as cur:
        endpoint = slow_endpoint(cur, receiver.url("ok"))
        seed_messages(cur, endpoint, 1)

    def refuse(*args: Any, **kwargs: Any) -> int:
        raise psycopg2.errors.NumericValueOutOfRange("integer out of range")

    monkeypatch.setattr(delivery, "mark_quick", refuse)
    pipeline = make_pipeline(db, slow_lane_threshold_ms=1000, slow_lane_release_answers=1)
    claimer, slow_queue = with_slow_lane(db, pipeline)
    assert claimer.claim_once().sent == 1
    [record] = slow_queue.receive()
    report = send_alone(pipeline, record)
    assert (report.delivered, report.failed_record_ids) == (1, frozenset())
    with db.cursor() as cur:
        cur.execute("SELECT status::text FROM tidings.messages WHERE endpoint_id = %s", (endpoint,))
        assert cur.fetchall() == [("delivered",)]
        assert slow_state(cur, endpoint) == (True, 0)
