"""The claim's fairness (rotation across endpoints, applications first) and what it must never
do: wait for another claimer, spend the same tokens twice, or let a fresh probe be doubled."""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from typing import Any

import psycopg2

from tests.support.seed import make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database


def make_app(cur: Any, uid: str) -> int:
    cur.execute("INSERT INTO tidings.applications (uid) VALUES (%s) RETURNING id", (uid,))
    return int(cur.fetchone()[0])


def make_endpoints(cur: Any, count: int, app_id: int | None = None, rows: int = 1) -> list[int]:
    """``count`` endpoints, in the default application unless ``app_id`` is given."""
    cur.execute(
        "INSERT INTO tidings.endpoints (url)"
        " SELECT 'https://r.example/' || g FROM generate_series(1, %s) g"
        " RETURNING id",
        (count,),
    )
    ids = sorted(r[0] for r in cur.fetchall())
    if app_id is not None:
        cur.execute("UPDATE tidings.endpoints SET app_id = %s WHERE id = ANY (%s)", (app_id, ids))
    for endpoint_id in ids:
        seed_messages(cur, endpoint_id, rows)
    return ids


def claim(cur: Any, batch_size: int, **kw: Any) -> list[delivery.ClaimedMessage]:
    return delivery.claim_due(cur, batch_size=batch_size, lease_s=60, **kw)


def settle(cur: Any, rows: list[delivery.ClaimedMessage]) -> None:
    """The senders' part, reduced to its effect on the queue: the rows are delivered."""
    if rows:
        cur.execute(
            "UPDATE tidings.messages SET status = 'delivered', delivered_at = now()"
            " WHERE id = ANY (%s)",
            ([r.message_id for r in rows],),
        )


def test_every_busy_endpoint_is_served_within_the_bound(db: Database) -> None:
    with db.cursor() as cur:
        busy = make_endpoints(cur, 1000, rows=5)
        served: set[int] = set()
        rounds = 0
        while len(served) < len(busy):
            rows = claim(cur, 100)
            rounds += 1
            assert len(rows) == 100
            served |= {r.endpoint_id for r in rows}
            settle(cur, rows)
    assert rounds <= math.ceil(1000 / 100) + 1


def test_rotation_is_by_position_not_by_id(db: Database) -> None:
    """Round k serves the k-th slice of the endpoints, wrapping around, whatever the ids."""
    with db.cursor() as cur:
        busy = make_endpoints(cur, 25, rows=10)
        slices = []
        for _ in range(4):
            rows = claim(cur, 10)
            slices.append({r.endpoint_id for r in rows})
            settle(cur, rows)
    assert slices[0] == set(busy[0:10])
    assert slices[1] == set(busy[10:20])
    assert slices[2] == set(busy[20:25] + busy[0:5])
    assert slices[3] == set(busy[5:15])


def test_the_batch_is_shared_across_applications_first(db: Database) -> None:
    with db.cursor() as cur:
        big = make_app(cur, "big")
        small = make_app(cur, "small")
        big_endpoints = make_endpoints(cur, 10, big, rows=50)
        (small_endpoint,) = make_endpoints(cur, 1, small, rows=50)
        rows = claim(cur, 20)
    per_endpoint = Counter(r.endpoint_id for r in rows)
    assert per_endpoint[small_endpoint] == 10
    assert all(per_endpoint[e] == 1 for e in big_endpoints)


def test_small_applications_are_served_beside_a_huge_one(db: Database) -> None:
    with db.cursor() as cur:
        big = make_app(cur, "big")
        # One application with 100,000 due messages on one endpoint.
        make_endpoints(cur, 1, big, rows=100_000)
        smalls = {}
        for i in range(50):
            (endpoint_id,) = make_endpoints(cur, 1, make_app(cur, f"small-{i}"), rows=10)
            smalls[endpoint_id] = 0
        rounds = 0
        while any(n < 10 for n in smalls.values()):
            rows = claim(cur, 100)
            rounds += 1
            for r in rows:
                if r.endpoint_id in smalls:
                    smalls[r.endpoint_id] += 1
            settle(cur, rows)
    assert rounds <= 6  # 10 rows each at 100 / 51 per round


def test_more_applications_than_rows_take_turns(db: Database) -> None:
    with db.cursor() as cur:
        endpoints = [make_endpoints(cur, 1, make_app(cur, f"a{i}"), rows=5)[0] for i in range(30)]
        seen = []
        for _ in range(3):
            rows = claim(cur, 10)
            seen.append({r.endpoint_id for r in rows})
            settle(cur, rows)
    assert [len(s) for s in seen] == [10, 10, 10]
    assert set().union(*seen) == set(endpoints)


def test_a_claim_never_waits_for_locked_rows_buckets_or_cursors(database_url: str) -> None:
    db = Database(database_url)
    with db.cursor() as cur:
        held = make_endpoint(cur)
        limited = make_endpoint(cur, rate_limit_per_s=5)
        free = make_endpoint(cur)
        for endpoint_id in (held, limited, free):
            seed_messages(cur, endpoint_id, 3)
    other = psycopg2.connect(database_url)  # another claimer, mid-transaction
    with other.cursor() as cur:
        cur.execute("SELECT 1 FROM tidings.queue WHERE endpoint_id = %s FOR UPDATE", (held,))
        cur.execute(
            "SELECT 1 FROM tidings.endpoint_health WHERE endpoint_id = %s FOR UPDATE", (limited,)
        )
        cur.execute("SELECT 1 FROM tidings.claim_rotation FOR UPDATE")
        cur.execute("SELECT 1 FROM tidings.applications FOR UPDATE")
    with db.cursor() as cur:
        cur.execute("SET lock_timeout = '1s'")
        started = time.monotonic()
        rows = claim(cur, 10)
        elapsed = time.monotonic() - started
        cur.execute("SELECT claim_after_endpoint_id FROM tidings.applications WHERE id = 1")
        cursor_after = cur.fetchone()[0]
    other.rollback()
    other.close()
    assert elapsed < 0.5
    assert {r.endpoint_id for r in rows} == {free}
    assert cursor_after == 0, "a cursor held by another claimer is followed, not moved"
    db.close()


def test_a_claim_never_waits_for_a_late_record_of_its_expired_lease(database_url: str) -> None:
    """A sender that outran its lease records while the claim takes the row back: the record
    holds the queue row and then wants the message row, so a claim that waited for the queue row
    while holding the message row would deadlock with it. The claim skips the row instead."""
    db = Database(database_url)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 1)
        [row] = claim(cur, 1)
        cur.execute(
            "UPDATE tidings.queue SET next_attempt_at = now() - interval '1 second'"
            " WHERE message_id = %s",
            (row.message_id,),
        )
    recorder = psycopg2.connect(database_url)
    try:
        with recorder.cursor() as late:
            late.execute("SET lock_timeout = '2s'")
            # The record's first write: the settled message leaves the queue.
            late.execute(
                "DELETE FROM tidings.queue WHERE message_id = %s AND lease_token = %s",
                (row.message_id, str(row.lease_token)),
            )
            assert late.rowcount == 1
            with db.cursor() as cur:
                cur.execute("SET lock_timeout = '2s'")
                started = time.monotonic()
                assert claim(cur, 10) == []
                assert time.monotonic() - started < 1
                # Its second, while the claim's transaction is still open: nothing holds it.
                late.execute(
                    "UPDATE tidings.message_rows SET status = 'delivered', attempts = 1,"
                    " delivered_at = now() WHERE id = %s",
                    (row.message_id,),
                )
        recorder.commit()
    finally:
        recorder.close()
    with db.cursor() as cur:
        cur.execute("SELECT status::text FROM tidings.messages WHERE id = %s", (row.message_id,))
        assert cur.fetchone() == ("delivered",)
    db.close()


def test_two_claimers_cannot_spend_the_same_tokens(database_url: str) -> None:
    db = Database(database_url)
    with db.cursor() as cur:
        limited = make_endpoint(cur, rate_limit_per_s=5)
        seed_messages(cur, limited, 100)
    first = psycopg2.connect(database_url)  # its claim is not committed yet
    with first.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.claim_due_v2(100, 60, 60, 0, 1000000, NULL, NULL)"
        )
        assert cur.fetchone() == (5,)
    with db.cursor() as cur:
        assert claim(cur, 100) == []  # the bucket is locked: skipped, not waited for
    first.commit()
    first.close()
    with db.cursor() as cur:
        assert claim(cur, 100) == []  # and now it is spent
    db.close()


def test_a_stale_half_open_probe_lets_exactly_one_row_through(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 5)
        cur.execute(
            "UPDATE tidings.endpoint_health SET state = 'half_open', opened_at = now(),"
            " probe_token = gen_random_uuid(), probe_started_at = now() - interval '30 seconds'"
            " WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        assert claim(cur, 10) == []  # the probe is still within its lease (60 s)
        cur.execute(
            "UPDATE tidings.endpoint_health SET probe_started_at = now() - interval '61 seconds'"
        )
        assert len(claim(cur, 10)) == 1


def test_deleted_endpoints_are_skipped(db: Database) -> None:
    with db.cursor() as cur:
        gone = make_endpoint(cur)
        seed_messages(cur, gone, 3)
        cur.execute("UPDATE tidings.endpoints SET deleted_at = now() WHERE id = %s", (gone,))
        assert claim(cur, 10) == []


def test_payload_inlined_only_when_small(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
        (row,) = claim(cur, 1, inline_payload_bytes=100)
        assert row.payload == '{"n": 1}'
        cur.execute("UPDATE tidings.messages SET next_attempt_at = now() - interval '1 s'")
        (row,) = claim(cur, 1, inline_payload_bytes=3)
        assert row.payload is None
        # The lease: due again lease_s after the claim (this statement runs a moment later).
        cur.execute("SELECT extract(epoch FROM next_attempt_at - now()) FROM tidings.messages")
        assert 59 < cur.fetchone()[0] <= 60


def test_overlapping_claimers_over_many_endpoints_and_apps(database_url: str) -> None:
    setup = Database(database_url)
    with setup.cursor() as cur:
        for i in range(6):
            make_endpoints(cur, 50, make_app(cur, f"app{i}"), rows=20)
    setup.close()
    claimed: list[int] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def work() -> None:
        db = Database(database_url)
        try:
            barrier.wait()
            while True:
                with db.cursor() as cur:
                    rows = claim(cur, 70)
                    if not rows:
                        return
                    claimed.extend(r.message_id for r in rows)
                    settle(cur, rows)
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(claimed) == len(set(claimed)) == 6 * 50 * 20
