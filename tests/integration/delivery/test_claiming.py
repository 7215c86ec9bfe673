"""Claiming and leases against a real PostgreSQL, with real concurrent connections."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import psycopg2

from tests.support.locks import wait_until_blocked
from tests.support.secrets import secrets_keyring
from tests.support.seed import COOLDOWNS, TEST_SECRET, add_secret, make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import AttemptOutcome, AttemptRequest, Lease, MessageStatus
from tidings.delivery.signing import generate_secret
from tidings.secrets.keyring import open_secrets


def statuses(db: Database) -> Counter[str]:
    with db.cursor() as cur:
        cur.execute("SELECT status::text, count(*) FROM tidings.messages GROUP BY 1")
        return Counter(dict(cur.fetchall()))


def backdate(db: Database, sql_where: str, seconds: float) -> None:
    """Move rows' times into the past instead of sleeping."""
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages"
            " SET next_attempt_at = next_attempt_at - %s * interval '1 second'"
            f" WHERE {sql_where}",
            (seconds,),
        )


def deliver(db: Database, claimed: list[delivery.ClaimedMessage]) -> delivery.RecordResult:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        return delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    c.lease, c.endpoint_id, MessageStatus.DELIVERED, c.attempts + 1, now, 200, 5
                )
                for c in claimed
            ],
            **COOLDOWNS,
        )


def test_eight_workers_claim_fifty_thousand_rows_exactly_once(database_url: str) -> None:
    setup = Database(database_url)
    with setup.cursor() as cur:
        endpoints = [make_endpoint(cur) for _ in range(5)]
        for endpoint_id in endpoints:
            seed_messages(cur, endpoint_id, 10_000)
    setup.close()

    claimed_by_worker: list[list[int]] = [[] for _ in range(8)]
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(index: int) -> None:
        db = Database(database_url)
        try:
            barrier.wait()
            while True:
                with db.cursor() as cur:
                    rows = delivery.claim_due(cur, batch_size=250, lease_s=600)
                if not rows:
                    return
                claimed_by_worker[index].extend(r.message_id for r in rows)
                deliver(db, rows)
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    every_claim = [message_id for ids in claimed_by_worker for message_id in ids]
    assert len(every_claim) == 50_000
    assert len(set(every_claim)) == 50_000
    assert sum(1 for ids in claimed_by_worker if ids) > 1, "the work was not shared"
    check = Database(database_url)
    assert statuses(check) == Counter({"delivered": 50_000})
    with check.cursor() as cur:
        cur.execute("SELECT count(*), count(DISTINCT message_id) FROM tidings.attempts")
        assert cur.fetchone() == (50_000, 50_000)
    check.close()


def test_a_claimed_row_is_not_claimed_again_until_its_lease_expires(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 3)
        first = delivery.claim_due(cur, batch_size=10, lease_s=60)
        assert len(first) == 3
        assert delivery.claim_due(cur, batch_size=10, lease_s=60) == []
    backdate(db, "status = 'in_flight'", 61)
    with db.cursor() as cur:
        again = delivery.claim_due(cur, batch_size=10, lease_s=60)
    assert sorted(r.message_id for r in again) == sorted(r.message_id for r in first)
    assert {r.lease_token for r in again}.isdisjoint({r.lease_token for r in first})


def test_a_stale_lease_cannot_overwrite_a_newer_outcome(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
        (stale,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
    backdate(db, "true", 61)
    with db.cursor() as cur:
        (fresh,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
    now = datetime.now(UTC)
    # The newer holder records a retry first; the stale holder then reports a delivery.
    with db.cursor() as cur:
        newer = delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    fresh.lease,
                    fresh.endpoint_id,
                    MessageStatus.FAILED,
                    1,
                    now,
                    503,
                    retry_at=now + timedelta(seconds=90),
                )
            ],
            **COOLDOWNS,
        )
        older = delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    stale.lease,
                    stale.endpoint_id,
                    MessageStatus.DELIVERED,
                    1,
                    now - timedelta(seconds=70),
                    200,
                )
            ],
            **COOLDOWNS,
        )
        assert newer.written_ids == {fresh.message_id}
        assert older.written_ids == frozenset()
        cur.execute("SELECT status::text, attempts, last_status_code FROM tidings.messages")
        assert cur.fetchone() == ("failed", 1, 503)
        # Both HTTP attempts happened, so both are in the log.
        cur.execute("SELECT count(*) FROM tidings.attempts")
        assert cur.fetchone() == (2,)
        # Nor can the stale holder release or restart the row.
        assert delivery.release_leases(cur, [stale.lease]) == []
        assert delivery.begin_attempts(cur, [AttemptRequest(stale.lease, 1)], lease_s=60) == []


def test_claims_are_fair_across_endpoints(db: Database) -> None:
    with db.cursor() as cur:
        busy = make_endpoint(cur)
        quiet = make_endpoint(cur)
        seed_messages(cur, busy, 5_000)
        seed_messages(cur, quiet, 5)
        rows = delivery.claim_due(cur, batch_size=100, lease_s=60)
    per_endpoint = Counter(r.endpoint_id for r in rows)
    assert per_endpoint[quiet] == 5, "a backlog elsewhere must not starve the quiet endpoint"
    assert per_endpoint[busy] == 50


def test_disabled_endpoints_and_open_circuits_are_skipped(db: Database) -> None:
    with db.cursor() as cur:
        disabled = make_endpoint(cur)
        tripped = make_endpoint(cur)
        seed_messages(cur, disabled, 3)
        seed_messages(cur, tripped, 3)
        cur.execute("UPDATE tidings.endpoints SET enabled = false WHERE id = %s", (disabled,))
        cur.execute(
            "UPDATE tidings.endpoint_health SET state = 'open', opened_at = now(), cooldown_s = 300"
            " WHERE endpoint_id = %s",
            (tripped,),
        )
        assert delivery.claim_due(cur, batch_size=10, lease_s=60) == []
        # Once the cooldown has passed, exactly one row is handed out as the probe candidate.
        cur.execute(
            "UPDATE tidings.endpoint_health SET opened_at = now() - interval '301 seconds'"
            " WHERE endpoint_id = %s",
            (tripped,),
        )
        rows = delivery.claim_due(cur, batch_size=10, lease_s=60)
    assert [r.endpoint_id for r in rows] == [tripped]


def test_rate_limited_endpoint_gets_no_more_than_its_tokens(db: Database) -> None:
    with db.cursor() as cur:
        limited = make_endpoint(cur, rate_limit_per_s=5)
        seed_messages(cur, limited, 100)
        first = delivery.claim_due(cur, batch_size=100, lease_s=60)
        assert len(first) == 5
        assert delivery.claim_due(cur, batch_size=100, lease_s=60) == []
        # Two seconds later the bucket holds at most one second's worth again (burst = rate).
        cur.execute(
            "UPDATE tidings.endpoint_health"
            " SET rate_refilled_at = rate_refilled_at - interval '2 s'"
        )
        assert len(delivery.claim_due(cur, batch_size=100, lease_s=60)) == 5


def test_released_rows_come_back_without_an_attempt(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 2)
        rows = delivery.claim_due(cur, batch_size=10, lease_s=60)
        released = delivery.release_leases(cur, [r.lease for r in rows])
        assert sorted(released) == sorted(r.message_id for r in rows)
        again = delivery.claim_due(cur, batch_size=10, lease_s=60)
        assert len(again) == 2
        assert all(r.attempts == 0 for r in again)


def test_retry_through_the_queue_keeps_the_lease_until_the_retry_arrives(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
        (row,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
        now = datetime.now(UTC)
        delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    row.lease,
                    row.endpoint_id,
                    MessageStatus.FAILED,
                    1,
                    now,
                    500,
                    retry_at=now + timedelta(seconds=120),
                    keep_lease=True,
                )
            ],
            **COOLDOWNS,
        )
        # Not claimable meanwhile: the delayed queue message is on its way.
        assert delivery.claim_due(cur, batch_size=1, lease_s=60) == []
        (started,) = delivery.begin_attempts(cur, [AttemptRequest(row.lease, 2)], lease_s=60)
        assert started.permitted
        assert started.attempts == 1
        assert started.payload == '{"n": 1}'
        cur.execute("SELECT status::text FROM tidings.messages")
        assert cur.fetchone() == ("in_flight",)


def test_begin_attempts_returns_what_sending_needs(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, url="https://hooks.example/in")
        newer = generate_secret()
        add_secret(cur, endpoint_id, newer)
        seed_messages(cur, endpoint_id, 1)
        (row,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
        (started,) = delivery.begin_attempts(
            cur, [AttemptRequest(row.lease, 1, want_payload=False)], lease_s=60
        )
        keys = secrets_keyring().data_keys(cur, {s.data_key_id for s in started.secrets})
    assert started.url == "https://hooks.example/in"
    # Encrypted, newest first: the current secret, then the one still in its overlap.
    assert open_secrets(keys, endpoint_id, started.secrets) == [newer, TEST_SECRET]
    assert all(b"whsec" not in s.ciphertext for s in started.secrets)
    assert started.payload is None
    assert "whsec" not in repr(started)


def test_unknown_lease_is_ignored(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
        delivery.claim_due(cur, batch_size=1, lease_s=60)
        bogus = Lease(1, uuid.uuid4())
        assert delivery.begin_attempts(cur, [AttemptRequest(bogus, 1)], lease_s=60) == []
        assert delivery.release_leases(cur, [bogus]) == []


def test_outcomes_written_twice_count_once(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 2)
        rows = delivery.claim_due(cur, batch_size=10, lease_s=60)
    now = datetime.now(UTC)
    outcomes = [
        AttemptOutcome(r.lease, r.endpoint_id, MessageStatus.FAILED, 1, now, 503, retry_at=now)
        for r in rows
    ]
    summary = [delivery.CircuitSummary(endpoint_id, False, 2, None, now)]
    results = []
    for _ in range(2):  # as after a connection lost once the first write had committed
        with db.cursor() as cur:
            results.append(delivery.record_outcomes(cur, outcomes, summary, **COOLDOWNS))
    # The second run reports the rows as written too: its caller never saw the first answer
    # and must still send their retry messages.
    assert results[0].written_ids == results[1].written_ids == {r.message_id for r in rows}
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.attempts")
        assert cur.fetchone() == (2,)
        cur.execute("SELECT consecutive_failures FROM tidings.endpoint_health")
        assert cur.fetchone() == (2,)
        cur.execute("SELECT attempts FROM tidings.messages ORDER BY id")
        assert cur.fetchall() == [(1,), (1,)]


def test_claims_stop_at_the_in_flight_cap(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 50)
        first = delivery.claim_due(cur, batch_size=30, lease_s=60, max_in_flight=40)
        second = delivery.claim_due(cur, batch_size=30, lease_s=60, max_in_flight=40)
        third = delivery.claim_due(cur, batch_size=30, lease_s=60, max_in_flight=40)
        assert (len(first), len(second), third) == (30, 10, [])
        deliver(db, first)
        assert len(delivery.claim_due(cur, batch_size=30, lease_s=60, max_in_flight=40)) == 10


def test_a_stale_copy_of_an_earlier_queue_message_is_not_sent(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
        (row,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
        now = datetime.now(UTC)
        delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    row.lease,
                    row.endpoint_id,
                    MessageStatus.FAILED,
                    1,
                    now,
                    500,
                    retry_at=now + timedelta(seconds=900),
                    keep_lease=True,
                )
            ],
            **COOLDOWNS,
        )
        # The queue hands out the first message again: same token, an attempt already made.
        assert delivery.begin_attempts(cur, [AttemptRequest(row.lease, 1)], lease_s=60) == []
        # The delayed retry message, for attempt 2, still goes through.
        (started,) = delivery.begin_attempts(cur, [AttemptRequest(row.lease, 2)], lease_s=60)
        assert started.permitted


def test_a_row_leased_anew_while_begin_waits_is_left_to_its_new_holder(database_url: str) -> None:
    db = Database(database_url)
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
        (row,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
    # A claimer re-leasing the row (its lease expired) holds the row lock, not yet committed.
    claimer = psycopg2.connect(database_url)
    new_token = uuid.uuid4()
    with claimer.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET lease_token = %s WHERE id = %s",
            (str(new_token), row.message_id),
        )
    result: list[list[delivery.StartedAttempt]] = []
    sender = Database(database_url)
    sender_connection = sender.connection  # opened here: its backend is the one to watch

    def stale_sender() -> None:
        with sender.cursor() as cur:
            result.append(delivery.begin_attempts(cur, [AttemptRequest(row.lease, 1)], lease_s=60))

    thread = threading.Thread(target=stale_sender)
    thread.start()
    wait_until_blocked(db, sender_connection)
    claimer.commit()
    thread.join(timeout=10)
    claimer.close()
    sender.close()
    assert result == [[]]
    with db.cursor() as cur:
        cur.execute("SELECT lease_token FROM tidings.messages")
        assert cur.fetchone() == (new_token,)
    db.close()
