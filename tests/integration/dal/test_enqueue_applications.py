"""tidings.enqueue and tidings.enqueue_batch with applications: fan-out within the application,
(application, event type, event id) as the key, unknown applications and foreign endpoints
refused with nothing created, the calls of before unchanged, and an application deleted while
events are sent to it."""

from __future__ import annotations

import threading
import time

import psycopg2
import psycopg2.errors
import pytest

from tests.support.locks import wait_until_blocked
from tests.support.seed import make_application, make_endpoint
from tidings.dal.connection import Database
from tidings.logic import applications


def ids_of(cur: psycopg2.extensions.cursor, query: str, *args: object) -> list[int]:
    cur.execute(query, args)
    return [row[0] for row in cur.fetchall()]


def endpoints_of(cur: psycopg2.extensions.cursor, message_ids: list[int]) -> list[int]:
    cur.execute(
        "SELECT endpoint_id FROM tidings.messages WHERE id = ANY(%s) ORDER BY 1", (message_ids,)
    )
    return [row[0] for row in cur.fetchall()]


def count(cur: psycopg2.extensions.cursor, table: str) -> int:
    cur.execute(f"SELECT count(*) FROM tidings.{table}")
    return int(cur.fetchone()[0])


def test_events_fan_out_only_to_their_applications_subscribers(db: Database) -> None:
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        globex = make_application(cur, "globex")
        default_all = make_endpoint(cur, event_types=["*"])
        acme_paid = make_endpoint(cur, event_types=["order.paid"], app_id=acme)
        acme_all = make_endpoint(cur, event_types=["*"], app_id=acme)
        make_endpoint(cur, event_types=["user.new"], app_id=acme)
        make_endpoint(cur, event_types=["*"], app_id=acme, enabled=False)
        make_endpoint(cur, event_types=["*"], app_id=globex)

        sent = ids_of(
            cur,
            "SELECT * FROM tidings.enqueue('order.paid', '{}', 'o-1', application => 'acme')",
        )
        assert endpoints_of(cur, sent) == [acme_paid, acme_all]
        cur.execute("SELECT app_id FROM tidings.events")
        assert cur.fetchall() == [(acme,)]
        # Without an application: the default one, as before.
        assert endpoints_of(
            cur, ids_of(cur, "SELECT * FROM tidings.enqueue('order.paid', '1')")
        ) == [default_all]


def test_the_key_is_application_type_and_id(db: Database) -> None:
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        make_application(cur, "globex")
        make_endpoint(cur, app_id=acme)
        first = ids_of(cur, "SELECT * FROM tidings.enqueue('t', '{}', 'k', application => 'acme')")
        again = ids_of(
            cur, "SELECT * FROM tidings.enqueue('t', '{\"x\": 1}', 'k', application => 'acme')"
        )
        assert again == first and len(first) == 1
        ids_of(cur, "SELECT * FROM tidings.enqueue('t', '{}', 'k', application => 'globex')")
        ids_of(cur, "SELECT * FROM tidings.enqueue('t', '{}', 'k')")
        cur.execute(
            "SELECT a.uid FROM tidings.events e JOIN tidings.applications a"
            " ON a.id = e.app_id ORDER BY a.uid"
        )
        assert [r[0] for r in cur.fetchall()] == ["acme", "default", "globex"]


def test_an_unknown_or_deleted_application_is_23503_and_creates_nothing(db: Database) -> None:
    with db.cursor() as cur:
        gone = make_application(cur, "gone")
        make_endpoint(cur, app_id=gone)
    applications.delete_application(db, applications.find(db, "gone"))  # type: ignore[arg-type]
    for call in (
        "SELECT * FROM tidings.enqueue('t', '{}', 'k', application => 'nobody')",
        "SELECT * FROM tidings.enqueue('t', '{}', 'k', application => 'gone')",
        'SELECT * FROM tidings.enqueue_batch(\'[{"event_type": "t", "payload": 1}]\', \'gone\')',
        "SELECT * FROM tidings.enqueue_batch('[]', 'nobody')",
        "SELECT * FROM tidings.enqueue('t', '{}', 'k', application => '')",
    ):
        with pytest.raises(psycopg2.errors.ForeignKeyViolation) as refused, db.cursor() as cur:
            cur.execute(call)
        assert refused.value.diag.message_detail == "application"
        assert "unknown application" in refused.value.diag.message_primary
    with db.cursor() as cur:
        assert count(cur, "events") == 0
        assert count(cur, "messages") == 0


def test_another_applications_endpoint_is_refused_like_an_unknown_one(db: Database) -> None:
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        globex = make_application(cur, "globex")
        own = make_endpoint(cur, app_id=acme)
        foreign = make_endpoint(cur, app_id=globex)
        default = make_endpoint(cur)
    for query, args in (
        ("SELECT * FROM tidings.enqueue('t', '{}', 'k', %s::bigint[], 'acme')", ([own, foreign],)),
        ("SELECT * FROM tidings.enqueue('t', '{}', 'k', %s::bigint[])", ([foreign],)),
        (
            "SELECT * FROM tidings.enqueue_batch(%s::jsonb, application => 'acme')",
            (f'[{{"event_type": "t", "payload": 1, "endpoint_ids": [{default}]}}]',),
        ),
    ):
        with pytest.raises(psycopg2.errors.ForeignKeyViolation) as refused, db.cursor() as cur:
            cur.execute(query, args)
        assert "unknown endpoint ids" in refused.value.diag.message_primary
    with db.cursor() as cur:
        assert count(cur, "events") == 0
        named = ids_of(
            cur, "SELECT * FROM tidings.enqueue('t', '{}', 'k', %s::bigint[], 'acme')", [own]
        )
        assert endpoints_of(cur, named) == [own]


def test_the_calls_of_before_keep_working(db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        calls = [
            "SELECT * FROM tidings.enqueue('a', '{}')",
            "SELECT * FROM tidings.enqueue('b', '{}', 'k')",
            f"SELECT * FROM tidings.enqueue('c', '{{}}', 'k', ARRAY[{endpoint}]::bigint[])",
            "SELECT * FROM tidings.enqueue(event_type => 'd', payload => '{}', event_id => 'k')",
            'SELECT * FROM tidings.enqueue_batch(\'[{"event_type": "e", "payload": 1}]\')',
            "SELECT * FROM tidings.enqueue_event('f', '{}', 'k', NULL)",
        ]
        for call in calls:
            cur.execute(call)
            assert cur.fetchall(), call
        assert count(cur, "messages") == len(calls)


def test_deleting_an_application_while_events_are_sent_to_it(
    db: Database, database_url: str
) -> None:
    """Senders on their own connections send to the application while it is deleted: every
    event either went in before the deletion (its messages are dead letters now) or was refused
    (23503, nothing created); none leaves a message waiting for a disabled endpoint. The senders
    overlap one another without pause, and the deletion still gets its turn: it is given five
    seconds (PostgreSQL would let overlapping shared row locks hold off a FOR UPDATE for ever)."""
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        endpoints = [make_endpoint(cur, app_id=acme) for _ in range(3)]
    stop = threading.Event()
    accepted: list[list[int]] = []
    refused: list[str] = []
    errors: list[BaseException] = []

    def send(worker: int) -> None:
        conn = psycopg2.connect(database_url)
        try:
            n = 0
            while not stop.is_set():
                n += 1
                try:
                    with conn, conn.cursor() as cur:
                        cur.execute(
                            "SELECT * FROM tidings.enqueue('t', '{}', %s, application => 'acme')",
                            (f"w{worker}-{n}",),
                        )
                        ids = [row[0] for row in cur.fetchall()]
                        # Hold the transaction open a little, as a producer's own writes would.
                        time.sleep(0.002)
                    accepted.append(ids)
                except psycopg2.errors.ForeignKeyViolation as exc:
                    refused.append(exc.diag.message_detail or "")
        except BaseException as exc:  # reported below
            errors.append(exc)
        finally:
            conn.close()

    workers = [threading.Thread(target=send, args=(i,)) for i in range(6)]
    for worker in workers:
        worker.start()
    time.sleep(0.3)
    impatient = Database(database_url, statement_timeout_ms=5_000)
    try:
        deleted = applications.delete_application(impatient, applications.find(db, "acme"))  # type: ignore[arg-type]
    finally:
        impatient.close()
    time.sleep(0.2)
    stop.set()
    for worker in workers:
        worker.join()
    assert errors == []
    assert accepted and refused
    assert set(refused) == {"application"}
    assert all(len(ids) == len(endpoints) for ids in accepted)
    with db.cursor() as cur:
        cur.execute(
            "SELECT m.status::text, count(*) FROM tidings.messages m"
            " WHERE m.endpoint_id = ANY(%s) GROUP BY 1",
            (endpoints,),
        )
        by_status = dict(cur.fetchall())
        cur.execute(
            "SELECT bool_and(NOT enabled) FROM tidings.endpoints WHERE app_id = %s", (acme,)
        )
        assert cur.fetchone() == (True,)
    sent = sum(len(ids) for ids in accepted)
    assert by_status == {"dead_letter": sent}
    assert deleted.messages_dead_lettered == sent
    assert deleted.endpoints_disabled == len(endpoints)


def test_a_deletion_committed_in_the_middle_of_a_call_refuses_the_call(
    db: Database, database_url: str
) -> None:
    """The call reads the application, then (a statement later) writes the event and fans it
    out. A deletion whose first step commits in between is seen by the writing statement: the
    call is refused, not accepted with no messages. The call is held in between by a lock on the
    subscriptions, which only the writing statement reads: it waits for the lock before it takes
    its snapshot, as every statement of a PL/pgSQL function does."""
    with db.cursor() as cur:
        make_endpoint(cur, app_id=make_application(cur, "acme"))
    holder = psycopg2.connect(database_url)
    producer = psycopg2.connect(database_url)
    deleter = Database(database_url)
    outcome: list[object] = []

    def send() -> None:
        try:
            with producer, producer.cursor() as cur:
                cur.execute("SELECT * FROM tidings.enqueue('t', '{}', 'e1', application => 'acme')")
                outcome.append(cur.fetchall())
        except psycopg2.errors.ForeignKeyViolation as exc:
            outcome.append(exc.diag.message_detail)

    try:
        with holder.cursor() as cur:
            cur.execute("LOCK TABLE tidings.subscriptions IN ACCESS EXCLUSIVE MODE")
        call = threading.Thread(target=send)
        call.start()
        wait_until_blocked(db, producer)
        deletion = threading.Thread(
            target=applications.delete_application,
            args=(deleter, applications.find(db, "acme")),
        )
        deletion.start()
        # The deletion's first step commits; its second waits for the call's row lock.
        with db.cursor() as cur:
            for _ in range(500):
                cur.execute(
                    "SELECT deleted_at IS NOT NULL FROM tidings.applications WHERE uid = 'acme'"
                )
                if cur.fetchone() == (True,):
                    break
                time.sleep(0.01)
            else:
                raise AssertionError("the deletion's first step never committed")
        holder.rollback()
        call.join(timeout=10)
        deletion.join(timeout=10)
        assert not call.is_alive() and not deletion.is_alive()
    finally:
        holder.close()
        producer.close()
        deleter.close()
    assert outcome == ["application"]
    with db.cursor() as cur:
        assert count(cur, "events") == 0
        assert count(cur, "messages") == 0
