"""tidings.messages and tidings.attempts are views of the live queue, the message rows and the
attempt log (migration 0150), written through as the tables they were: each write keeps the
queue exact, and a write never lands on a row that changed after the statement looked."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime

import psycopg2
import psycopg2.errors
import pytest

from tests.support.seed import make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Cursor, Database
from tidings.dal.delivery import AttemptOutcome, MessageStatus


def one_message(cur: Cursor) -> tuple[int, int]:
    endpoint_id = make_endpoint(cur)
    seed_messages(cur, endpoint_id, 1)
    cur.execute("SELECT id FROM tidings.messages WHERE endpoint_id = %s", (endpoint_id,))
    return endpoint_id, int(cur.fetchone()[0])


def queue_row(cur: Cursor, message_id: int) -> tuple[str, str | None] | None:
    cur.execute(
        "SELECT status::text, lease_token::text FROM tidings.queue WHERE message_id = %s",
        (message_id,),
    )
    row = cur.fetchone()
    return None if row is None else (row[0], row[1])


def test_an_update_leaves_a_row_that_changed_after_the_statement_looked(
    database_url: str,
) -> None:
    db = Database(database_url)
    with db.cursor() as cur:
        _, message_id = one_message(cur)
        [claimed] = delivery.claim_due(cur, batch_size=1, lease_s=60)
    token = str(claimed.lease_token)
    sender = psycopg2.connect(database_url)  # begins the row: a fresh lease, not committed yet
    with sender.cursor() as begin:
        begin.execute(
            "UPDATE tidings.queue SET lease_token = gen_random_uuid() WHERE message_id = %s"
            " RETURNING lease_token::text",
            (message_id,),
        )
        (fresh,) = begin.fetchone()
    released: list[int] = []

    def release_as_a_release_before_did() -> None:
        with db.cursor() as cur:
            cur.execute(
                "UPDATE tidings.messages SET status = 'pending', lease_token = NULL"
                " WHERE id = %s AND lease_token = %s",
                (message_id, token),
            )
            released.append(cur.rowcount)

    worker = threading.Thread(target=release_as_a_release_before_did)
    worker.start()
    time.sleep(0.3)  # the update has read the row and waits for the sender's lock
    assert worker.is_alive()
    sender.commit()
    sender.close()
    worker.join(10)
    assert released == [0]
    with db.cursor() as cur:
        assert queue_row(cur, message_id) == ("in_flight", fresh)
    db.close()


def test_a_message_keeps_its_id(db: Database) -> None:
    with db.cursor() as cur:
        _, message_id = one_message(cur)
    with pytest.raises(psycopg2.errors.FeatureNotSupported), db.cursor() as cur:
        cur.execute("UPDATE tidings.messages SET id = id + 1000 WHERE id = %s", (message_id,))


def test_the_queue_holds_a_message_exactly_while_it_is_to_be_settled(db: Database) -> None:
    with db.cursor() as cur:
        _, message_id = one_message(cur)
        assert queue_row(cur, message_id) == ("pending", None)
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now()"
            " WHERE id = %s",
            (message_id,),
        )
        assert queue_row(cur, message_id) is None
        cur.execute(
            "UPDATE tidings.messages SET status = 'failed', dead_lettered_at = NULL,"
            " next_attempt_at = now() WHERE id = %s",
            (message_id,),
        )
        assert queue_row(cur, message_id) == ("failed", None)
        cur.execute("DELETE FROM tidings.messages WHERE id = %s", (message_id,))
        assert cur.rowcount == 1
        assert queue_row(cur, message_id) is None
        cur.execute("SELECT count(*) FROM tidings.message_rows WHERE id = %s", (message_id,))
        assert cur.fetchone() == (0,)


def test_a_message_taken_out_of_delivered_keeps_its_delivering_attempt(db: Database) -> None:
    attempted_at = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint_id, message_id = one_message(cur)
        [claimed] = delivery.claim_due(cur, batch_size=1, lease_s=60)
        delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    claimed.lease, endpoint_id, MessageStatus.DELIVERED, 1, attempted_at, 204, 7
                )
            ],
            base_cooldown_s=300,
            max_cooldown_s=3600,
        )

    def history(cur: Cursor) -> list[tuple[int, datetime, int]]:
        cur.execute(
            "SELECT attempt_number, attempted_at, status_code FROM tidings.attempts"
            " WHERE message_id = %s",
            (message_id,),
        )
        return cur.fetchall()

    with db.cursor() as cur:
        # On its row only while it is delivered.
        cur.execute("SELECT count(*) FROM tidings.attempt_log WHERE message_id = %s", (message_id,))
        assert cur.fetchone() == (0,)
        assert history(cur) == [(1, attempted_at, 204)]
        cur.execute(
            "UPDATE tidings.messages SET status = 'pending', delivered_at = NULL, attempts = 0"
            " WHERE id = %s",
            (message_id,),
        )
        assert queue_row(cur, message_id) == ("pending", None)
        assert history(cur) == [(1, attempted_at, 204)]
