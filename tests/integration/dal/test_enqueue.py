"""tidings.enqueue: fan-out, idempotency under concurrency, the outbox contract, clear errors."""

from __future__ import annotations

import threading

import psycopg2
import psycopg2.errors
import pytest

from tests.support.seed import make_endpoint
from tidings.dal.connection import Database


def enqueue(cur, event_type, payload, event_id=None, endpoint_ids=None):
    cur.execute(
        "SELECT * FROM tidings.enqueue(%s, %s::jsonb, %s, %s::bigint[])",
        (event_type, payload, event_id, endpoint_ids),
    )
    return [row[0] for row in cur.fetchall()]


def count(cur, table):
    cur.execute(f"SELECT count(*) FROM tidings.{table}")
    return cur.fetchone()[0]


def test_fans_out_to_every_subscribed_enabled_endpoint(db: Database) -> None:
    with db.cursor() as cur:
        orders = make_endpoint(cur, event_types=["order.paid"])
        everything = make_endpoint(cur, event_types=["*"])
        make_endpoint(cur, event_types=["user.created"])
        make_endpoint(cur, event_types=["order.paid"], enabled=False)

        ids = enqueue(cur, "order.paid", '{"order": 7}', "evt-1")

        cur.execute(
            "SELECT endpoint_id FROM tidings.messages WHERE id = ANY(%s) ORDER BY 1", (ids,)
        )
        assert [r[0] for r in cur.fetchall()] == [orders, everything]
        cur.execute("SELECT DISTINCT status::text FROM tidings.messages")
        assert cur.fetchall() == [("pending",)]
        assert count(cur, "events") == 1


def test_named_endpoints_override_subscriptions(db: Database) -> None:
    with db.cursor() as cur:
        make_endpoint(cur, event_types=["a"])
        target = make_endpoint(cur, event_types=["b"])
        ids = enqueue(cur, "a", "{}", "e", [target])
        cur.execute("SELECT endpoint_id FROM tidings.messages WHERE id = ANY(%s)", (ids,))
        assert cur.fetchall() == [(target,)]


def test_repeated_event_id_returns_original_ids_and_creates_nothing(db: Database) -> None:
    with db.cursor() as cur:
        make_endpoint(cur)
        make_endpoint(cur)
        first = enqueue(cur, "user.created", '{"id": 1}', "same-key")
        make_endpoint(cur)  # a new subscriber does not change what the key already made
        again = enqueue(cur, "user.created", '{"id": 1, "changed": true}', "same-key")
        assert len(first) == 2
        assert again == first
        assert count(cur, "messages") == 2
        assert count(cur, "events") == 1
        # The same id under another event type is another event.
        assert len(enqueue(cur, "user.deleted", "{}", "same-key")) == 3


def test_without_event_id_every_call_is_a_new_event(db: Database) -> None:
    with db.cursor() as cur:
        make_endpoint(cur)
        assert enqueue(cur, "t", "{}") != enqueue(cur, "t", "{}")
        assert count(cur, "events") == 2


def test_rolled_back_business_transaction_sends_nothing(db: Database) -> None:
    with db.cursor() as cur:
        make_endpoint(cur)
    conn = db.connection
    conn.autocommit = False
    with conn.cursor() as cur:
        cur.execute("CREATE TABLE orders (id int)")
        cur.execute("INSERT INTO orders VALUES (1)")
        assert len(enqueue(cur, "order.created", '{"id": 1}', "order-1")) == 1
    conn.rollback()
    conn.autocommit = True
    with db.cursor() as cur:
        assert count(cur, "messages") == 0
        assert count(cur, "events") == 0


@pytest.mark.parametrize(
    ("args", "sqlstate", "fragment"),
    [
        (("t", None, None, None), "22023", "payload must not be null"),
        (("t", "null", None, None), "22023", "payload must not be null"),
        (("", "{}", None, None), "22023", "event_type must be a non-empty string"),
        ((None, "{}", None, None), "22023", "event_type must be a non-empty string"),
        (("t", "{}", "", None), "22023", "event_id must be 1 to 200 characters"),
        (("t", "{}", "x" * 201, None), "22023", "event_id must be 1 to 200 characters"),
        (("t", "{}", "k", [424242, 7]), "23503", "unknown endpoint ids: {7,424242}"),
    ],
)
def test_bad_arguments_raise_clear_errors_and_write_nothing(
    db: Database, args, sqlstate, fragment
) -> None:
    with db.cursor() as cur:
        make_endpoint(cur)
        with pytest.raises(psycopg2.Error) as raised:
            enqueue(cur, *args)
        assert raised.value.pgcode == sqlstate
        assert fragment in raised.value.pgerror
        assert count(cur, "events") == 0
        assert count(cur, "messages") == 0


def test_sixteen_concurrent_duplicates_make_one_set_of_rows(database_url: str) -> None:
    setup = Database(database_url)
    with setup.cursor() as cur:
        for _ in range(3):
            make_endpoint(cur)
    setup.close()

    workers = 16
    barrier = threading.Barrier(workers)
    results: list[list[int]] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def send() -> None:
        conn = psycopg2.connect(database_url)
        try:
            with conn, conn.cursor() as cur:
                barrier.wait()
                ids = enqueue(cur, "payment.settled", '{"amount": 10}', "pay-42")
            with lock:
                results.append(ids)
        except BaseException as exc:
            with lock:
                errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=send) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert len(results) == workers
    assert all(ids == results[0] for ids in results)
    assert len(results[0]) == 3
    check = Database(database_url)
    with check.cursor() as cur:
        assert count(cur, "messages") == 3
        assert count(cur, "events") == 1
    check.close()
