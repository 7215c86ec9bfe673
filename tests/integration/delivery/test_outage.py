"""A receiver down for a while, then back: the claimer and the sender against real PostgreSQL and
a real receiver, with a retry schedule of seconds standing in for the default's hours.

Down for less than the schedule's span: every message is delivered, none dead-lettered. Down for
longer: messages become dead letters, and none before the whole schedule has passed since its
first attempt. Retries wait in the database (``sqs_max_delay_s=0``), so their times are exact.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.integration.delivery.delivery_harness import Pipeline, make_pipeline
from tests.support.receivers import Receiver, running_receiver
from tests.support.seed import make_endpoint, seed_messages
from tidings.dal.connection import Database, fetch_dicts
from tidings.delivery.retry_schedule import span_s

# Five attempts over 3 s; the same shape as the default's eight over 27.6 hours.
SCHEDULE = (0.5, 0.5, 1.0, 1.0)
SPAN_S = span_s(SCHEDULE)
MESSAGES = 20


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


def outage_pipeline(db: Database, **changes: Any) -> Pipeline:
    return make_pipeline(
        db,
        retry_schedule=SCHEDULE,
        sqs_max_delay_s=0,
        claim_idle_poll_s=0.02,
        **changes,
    )


def seed(db: Database, receiver: Receiver, *, failure_threshold: int) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, receiver.url("outage"))
        seed_messages(cur, endpoint_id, MESSAGES)
        cur.execute(
            "UPDATE tidings.endpoint_health SET failure_threshold = %s WHERE endpoint_id = %s",
            (failure_threshold, endpoint_id),
        )


def run_outage(pipeline: Pipeline, receiver: Receiver, down_s: float, limit_s: float) -> None:
    """The receiver is down from the first attempt for ``down_s``, then back; the pipeline runs
    until every message is delivered or dead-lettered."""
    receiver.down.set()
    started = time.monotonic()
    while time.monotonic() - started < limit_s:
        if receiver.down.is_set() and time.monotonic() - started >= down_s:
            receiver.down.clear()
        pipeline.claim_and_deliver()
        if not _unsettled(pipeline.db):
            return
        time.sleep(0.02)
    raise AssertionError(f"messages still unsettled after {limit_s} s")


def _unsettled(db: Database) -> int:
    with db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.messages WHERE status NOT IN ('delivered', 'dead_letter')"
        )
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def outcomes(db: Database) -> list[dict[str, Any]]:
    """Each message: its status, attempts, and the time from its first attempt to its end."""
    with db.cursor() as cur:
        cur.execute(
            "SELECT m.id, m.status::text AS status, m.attempts,"
            "       coalesce(m.delivered_at, m.dead_lettered_at) - first.at AS lasted"
            " FROM tidings.messages m"
            " CROSS JOIN LATERAL (SELECT min(a.attempted_at) AS at FROM tidings.attempts a"
            "                     WHERE a.message_id = m.id) first"
            " ORDER BY m.id"
        )
        return fetch_dicts(cur)


def test_a_receiver_down_for_less_than_the_schedule_loses_nothing(
    db: Database, receiver: Receiver
) -> None:
    pipeline = outage_pipeline(db)
    # No circuit: the schedule alone decides.
    seed(db, receiver, failure_threshold=1000)

    # Down for 80 % of the span: with each wait drawn from [0, delay] (jitter that shortens the
    # schedule) about half the messages would have used up their attempts by then.
    run_outage(pipeline, receiver, down_s=0.8 * SPAN_S, limit_s=30)

    found = outcomes(db)
    assert [m["status"] for m in found] == ["delivered"] * MESSAGES
    # They were retried during the outage, and needed their later attempts.
    assert max(m["attempts"] for m in found) >= 4
    assert len(receiver.requests_to("outage")) == sum(m["attempts"] for m in found)


def test_a_receiver_down_for_longer_gets_dead_letters_only_after_the_whole_schedule(
    db: Database, receiver: Receiver
) -> None:
    pipeline = outage_pipeline(db)
    # No circuit: the schedule alone decides.
    seed(db, receiver, failure_threshold=1000)

    run_outage(pipeline, receiver, down_s=3 * SPAN_S, limit_s=30)

    found = outcomes(db)
    assert [m["status"] for m in found] == ["dead_letter"] * MESSAGES
    assert {m["attempts"] for m in found} == {len(SCHEDULE) + 1}
    for message in found:
        assert message["lasted"] >= timedelta(seconds=SPAN_S), message


def test_while_the_circuit_is_open_messages_wait_without_spending_attempts(
    db: Database, receiver: Receiver
) -> None:
    # The circuit opens after 5 failures and probes every 0.3 to 0.6 s while the receiver is down
    # for twice the span: held-back messages keep their attempts and are delivered once it is
    # back; only probes spend attempts meanwhile.
    pipeline = outage_pipeline(db, circuit_cooldown_s=0.3, circuit_max_cooldown_s=0.6)
    seed(db, receiver, failure_threshold=5)

    run_outage(pipeline, receiver, down_s=2 * SPAN_S, limit_s=30)

    found = outcomes(db)
    failures = len(receiver.requests_to("outage")) - MESSAGES
    delivered = [m for m in found if m["status"] == "delivered"]
    dead = [m for m in found if m["status"] == "dead_letter"]
    # Far fewer attempts failed than the messages had: most never spent one while it was down.
    assert failures < 2 * MESSAGES
    assert len(delivered) >= MESSAGES - failures // (len(SCHEDULE) + 1)
    for message in dead:
        # A message that was the probe often enough may run out, never before its schedule.
        assert message["attempts"] == len(SCHEDULE) + 1
        assert message["lasted"] >= timedelta(seconds=SPAN_S), message
