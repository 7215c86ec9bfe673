"""The sender against real PostgreSQL and real HTTP receivers: every outcome ends in its state."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg2
import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.integration.delivery.delivery_harness import (
    Pipeline,
    attempt_rows,
    envelopes,
    health_row,
    make_pipeline,
    message_row,
    only_message_id,
    seconds_until,
)
from tests.support.receivers import Receiver, running_receiver
from tests.support.secrets import secrets_keyring
from tests.support.seed import TEST_SECRET, add_secret, make_endpoint, mark_answered, seed_messages
from tidings.config import DEFAULT_RETRY_SCHEDULE
from tidings.dal.connection import Database
from tidings.delivery.attempt import webhook_id
from tidings.delivery.envelope import envelopes_of
from tidings.delivery.retry_schedule import wait_s
from tidings.delivery.sender import BatchReport, QueueRecord, Sender, record_reserve_s
from tidings.delivery.signing import generate_secret
from tidings.local.queue import LocalQueue
from tidings.queue import ReceivedMessage

LEASE_S = 120.0


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


@pytest.fixture
def pipeline(db: Database) -> Pipeline:
    return make_pipeline(db, lease_s=LEASE_S)


def one_message_to(db: Database, url: str, *, max_attempts: int | None = None) -> int:
    """One message to a new endpoint that has answered before (an untried one's retries would
    pass the claim, never the queue)."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, url)
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, 1)
        if max_attempts is not None:
            cur.execute("UPDATE tidings.messages SET max_attempts = %s", (max_attempts,))
    return endpoint_id


def expected_backoff(message_id: int, failed_attempts: int) -> float:
    """The wait the deployment's default schedule gives that message after that attempt."""
    return wait_s(DEFAULT_RETRY_SCHEDULE, failed_attempts, message_id)


def test_200_delivers_and_keeps_the_response_excerpt(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("ok"))
    report = pipeline.claim_and_deliver()

    assert report.delivered == 1
    assert report.failed_record_ids == frozenset()
    row = message_row(db, only_message_id(db))
    assert row["status"] == "delivered"
    assert row["attempts"] == 1
    assert row["lease_token"] is None
    assert row["last_status_code"] == 200
    [attempt] = attempt_rows(db, row["id"])
    assert attempt["status_code"] == 200
    assert attempt["response_excerpt"] == "thanks"
    assert attempt["error_class"] is None
    assert attempt["response_ms"] is not None
    # Only the retry path sends anything back to the queue.
    assert len(pipeline.queue.sent) == 1
    # The endpoint's first success is remembered (it has none before to compare with).
    with db.cursor() as cur:
        cur.execute(
            "SELECT h.state, now() - h.last_success_at < interval '1 minute'"
            " FROM tidings.endpoint_health h"
            " JOIN tidings.messages m ON m.endpoint_id = h.endpoint_id WHERE m.id = %s",
            (row["id"],),
        )
        assert cur.fetchone() == ("closed", True)


def test_500_retries_through_the_queue_with_the_backoff_delay_and_keeps_the_lease(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("status/500"))
    report = pipeline.claim_and_deliver()

    assert report.retried == 1
    first, retry = envelopes(pipeline.queue.sent)
    delay = expected_backoff(first.message_id, 1)
    retry_message = pipeline.queue.sent[1]
    assert retry_message.delay_s == math.ceil(delay)
    assert retry.attempt == 2
    row = message_row(db, first.message_id)
    assert row["status"] == "failed"
    # The row keeps the lease its attempt began under (a new token, not the claim's), and the
    # retry message carries it.
    assert row["lease_token"] == retry.lease_token != first.lease_token
    assert row["last_error"] == "http_500"
    # The claimer takes the row back only if the retry message never arrives.
    assert seconds_until(row) == pytest.approx(delay + LEASE_S, abs=2)
    [attempt] = attempt_rows(db, first.message_id)
    assert (attempt["status_code"], attempt["error_class"]) == (500, "http_500")


def test_a_queued_retry_comes_back_under_the_same_lease_and_delivers(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    clock = [0.0]
    pipeline.queue.inner = LocalQueue(visibility_timeout_s=30, clock=lambda: clock[0])
    endpoint_id = one_message_to(db, receiver.url("retry-after/429/0"))
    pipeline.claim_and_deliver()
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoints SET url = %s WHERE id = %s", (receiver.url("ok"), endpoint_id)
        )
    # "Retry-After: 0" does not shorten the backoff: the retry waits its delay in the queue.
    retry = pipeline.queue.sent[1]
    assert retry.delay_s >= 1
    assert pipeline.deliver_queued().delivered == 0
    clock[0] += retry.delay_s

    report = pipeline.deliver_queued()

    assert report.delivered == 1
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["attempts"]) == ("delivered", 2)
    assert [a["status_code"] for a in attempt_rows(db, row["id"])] == [429, 200]


def test_429_honours_retry_after_within_the_queue_delay(db: Database, receiver: Receiver) -> None:
    # A backoff shorter than the receiver's Retry-After, so the header decides.
    pipeline = make_pipeline(db, lease_s=LEASE_S, retry_schedule=(1.0, 60.0))
    one_message_to(db, receiver.url("retry-after/429/7"))
    pipeline.claim_and_deliver()

    assert pipeline.queue.sent[1].delay_s == 7
    row = message_row(db, only_message_id(db))
    assert row["status"] == "failed"
    assert seconds_until(row) == pytest.approx(7 + LEASE_S, abs=2)


def test_a_long_retry_after_waits_in_the_database_without_a_lease(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("retry-after/429/2000"))
    pipeline.claim_and_deliver()

    assert len(pipeline.queue.sent) == 1, "a delay beyond 900 s must not go to the queue"
    row = message_row(db, only_message_id(db))
    assert row["status"] == "failed"
    assert row["lease_token"] is None
    assert seconds_until(row) == pytest.approx(2000, abs=2)


def test_a_retry_waiting_in_the_database_is_claimed_again_when_due(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = one_message_to(db, receiver.url("retry-after/503/1800"))
    pipeline.claim_and_deliver()
    assert pipeline.claimer.claim_once().claimed == 0, "not due for another half hour"
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoints SET url = %s WHERE id = %s", (receiver.url("ok"), endpoint_id)
        )
        cur.execute("UPDATE tidings.messages SET next_attempt_at = now() - interval '1 second'")

    report = pipeline.claim_and_deliver()

    assert report.delivered == 1
    assert envelopes(pipeline.queue.sent)[-1].attempt == 2
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["attempts"]) == ("delivered", 2)


def test_retry_after_is_bounded_by_the_schedules_longest_delay(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("retry-after/503/999999"))
    pipeline.claim_and_deliver()

    row = message_row(db, only_message_id(db))
    assert row["status"] == "failed"
    assert seconds_until(row) == pytest.approx(max(DEFAULT_RETRY_SCHEDULE), abs=2)


def test_410_dead_letters_and_disables_the_endpoint(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = one_message_to(db, receiver.url("status/410"))
    report = pipeline.claim_and_deliver()

    assert report.dead_lettered == 1
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["last_error"]) == ("dead_letter", "http_410")
    with db.cursor() as cur:
        cur.execute(
            "SELECT enabled, disabled_reason FROM tidings.endpoints WHERE id = %s", (endpoint_id,)
        )
        assert cur.fetchone() == (False, "410 Gone")


def test_other_4xx_dead_letters_at_once(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("status/400"))
    pipeline.claim_and_deliver()

    row = message_row(db, only_message_id(db))
    assert (row["status"], row["attempts"], row["last_error"]) == ("dead_letter", 1, "http_400")
    assert row["dead_lettered_at"] is not None


def test_the_last_allowed_attempt_dead_letters_a_retryable_failure(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("status/500"), max_attempts=1)
    pipeline.claim_and_deliver()

    row = message_row(db, only_message_id(db))
    assert (row["status"], row["last_error"]) == ("dead_letter", "http_500")
    assert len(pipeline.queue.sent) == 1


def test_a_receiver_that_hangs_past_the_endpoint_timeout_is_a_retryable_timeout(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = one_message_to(db, receiver.url("hang"))
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoints SET timeout_ms = 300 WHERE id = %s", (endpoint_id,))
    started = datetime.now(UTC)
    pipeline.claim_and_deliver()

    assert datetime.now(UTC) - started < timedelta(seconds=3)
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["last_error"]) == ("failed", "timeout")
    [attempt] = attempt_rows(db, row["id"])
    assert (attempt["status_code"], attempt["response_ms"]) == (None, None)
    # A timeout puts the endpoint in the slow lane, whose cap the retry must pass: it waits in
    # the database, without a lease, for the backoff alone.
    assert row["lease_token"] is None
    assert seconds_until(row) == pytest.approx(expected_backoff(row["id"], 1), abs=2)


def test_a_receiver_trickling_its_answer_is_cut_off_at_the_endpoint_timeout(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = one_message_to(db, receiver.url("trickle"))
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoints SET timeout_ms = 500 WHERE id = %s", (endpoint_id,))
    started = datetime.now(UTC)
    pipeline.claim_and_deliver()

    # Every read gets a byte within 100 ms; only the attempt's own deadline stops it.
    assert datetime.now(UTC) - started < timedelta(seconds=2)
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["last_error"]) == ("failed", "timeout")


def test_connections_outlive_an_attempt_that_timed_out(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = one_message_to(db, receiver.url("hang"))
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.endpoints SET timeout_ms = 200 WHERE id = %s", (endpoint_id,))
    pipeline.claim_and_deliver()
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur, receiver.url("ok")), 20)
    while pipeline.claimer.claim_once().claimed:
        pass
    delivered = sum(pipeline.deliver_queued().delivered for _ in range(3))

    assert delivered == 20


def test_a_reset_connection_is_a_retryable_network_error(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("reset"))
    pipeline.claim_and_deliver()

    row = message_row(db, only_message_id(db))
    assert (row["status"], row["last_error"]) == ("failed", "connection_reset")


def test_a_slow_receiver_within_the_timeout_delivers_and_its_latency_is_measured(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("slow/300"))
    pipeline.claim_and_deliver()

    row = message_row(db, only_message_id(db))
    assert row["status"] == "delivered"
    assert 300 <= row["last_response_ms"] < 2000


def test_a_huge_response_keeps_only_the_excerpt(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("big/500000"))
    pipeline.claim_and_deliver()

    [attempt] = attempt_rows(db, only_message_id(db))
    assert attempt["response_excerpt"] == "x" * 1024


def test_the_receiver_sees_the_exact_payload_with_valid_signatures_for_both_secrets(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    new_secret = generate_secret()
    endpoint_id = one_message_to(db, receiver.url("ok"))
    with db.cursor() as cur:
        add_secret(cur, endpoint_id, new_secret, overlap_s=86400)
        cur.execute("SELECT payload::text FROM tidings.events")
        stored_payload = cur.fetchone()[0]  # type: ignore[index]
    pipeline.claim_and_deliver()

    [request] = receiver.requests
    message_id = only_message_id(db)
    assert request.body == stored_payload.encode()
    assert request.headers["webhook-id"] == webhook_id(message_id)
    assert request.headers["user-agent"].startswith("Tidings/")
    assert request.headers["content-type"] == "application/json"
    assert len(request.headers["webhook-signature"].split(" ")) == 2
    for secret in (new_secret, TEST_SECRET):
        assert Webhook(secret).verify(request.body, request.headers) == json.loads(request.body)
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_secret()).verify(request.body, request.headers)


def test_every_secret_still_in_its_overlap_signs_up_to_five(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = one_message_to(db, receiver.url("ok"))
    rotated = [generate_secret() for _ in range(5)]
    with db.cursor() as cur:
        # Rotated twice within the overlap: three secrets sign.
        for secret in rotated[:2]:
            add_secret(cur, endpoint_id, secret)
    pipeline.claim_and_deliver()
    [request] = receiver.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 3
    for secret in (TEST_SECRET, *rotated[:2]):
        Webhook(secret).verify(request.body, request.headers)

    # Three more rotations: five sign, the oldest (the first secret) no longer does.
    with db.cursor() as cur:
        for secret in rotated[2:]:
            add_secret(cur, endpoint_id, secret)
        seed_messages(cur, endpoint_id, 1)
    pipeline.claim_and_deliver()
    request = receiver.requests[-1]
    assert len(request.headers["webhook-signature"].split(" ")) == 5
    for secret in rotated:
        Webhook(secret).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(TEST_SECRET).verify(request.body, request.headers)


def test_without_the_data_keys_nothing_is_sent_and_the_rows_wait_without_an_attempt(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    from tidings.delivery.sender import KEYS_UNAVAILABLE_DELAY_S
    from tidings.secrets.keyring import Keyring
    from tidings.secrets.master_keys import LocalMasterKey

    one_message_to(db, receiver.url("ok"))
    # A sender whose key is not the one the secrets were encrypted with.
    stranger = Keyring(LocalMasterKey(bytes(32), "another key"), data_key_max_age_s=3600)
    sender = Sender(db, pipeline.queue, pipeline.settings, pipeline.transport, keyring=stranger)
    pipeline.claimer.claim_once()
    received = pipeline.queue.receive(max_messages=10)
    report = sender.process([QueueRecord(m.message_id, m.body) for m in received])

    assert receiver.requests == []
    assert (report.skipped, report.failed_record_ids) == (1, frozenset())
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)
    assert KEYS_UNAVAILABLE_DELAY_S - 5 <= seconds_until(row) <= KEYS_UNAVAILABLE_DELAY_S


def test_an_expired_previous_secret_no_longer_signs(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = one_message_to(db, receiver.url("ok"))
    current = generate_secret()
    with db.cursor() as cur:
        add_secret(cur, endpoint_id, current, overlap_s=86400)
        # The rotated-out secret's overlap ends.
        cur.execute(
            "UPDATE tidings.endpoint_secrets SET expires_at = now() - interval '1 second'"
            " WHERE endpoint_id = %s AND expires_at IS NOT NULL",
            (endpoint_id,),
        )
    pipeline.claim_and_deliver()

    [request] = receiver.requests
    assert len(request.headers["webhook-signature"].split(" ")) == 1
    Webhook(current).verify(request.body, request.headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(TEST_SECRET).verify(request.body, request.headers)


def test_a_private_address_is_refused_without_a_connection(
    db: Database, receiver: Receiver
) -> None:
    strict = make_pipeline(db, allowed_networks=())
    one_message_to(db, receiver.url("ok"))
    report = strict.claim_and_deliver()

    assert receiver.connections == 0
    assert report.dead_lettered == 1
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["last_error"]) == ("dead_letter", "blocked_address")


def test_a_row_whose_lease_was_lost_is_acknowledged_and_not_sent(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("ok"))
    pipeline.claimer.claim_once()
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.messages SET lease_token = gen_random_uuid()")

    report = pipeline.deliver_queued()

    assert report.skipped == 1
    assert report.failed_record_ids == frozenset()
    assert receiver.requests == []
    assert pipeline.queue.approximate_depth() == 0


def test_a_malformed_message_fails_alone_and_the_rest_of_the_batch_is_delivered(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("ok"))
    pipeline.claimer.claim_once()
    [queued] = pipeline.queue.receive()
    records = [
        QueueRecord("poison-1", "not json"),
        QueueRecord("poison-2", json.dumps({"message_id": "x"})),
        QueueRecord(queued.message_id, queued.body),
    ]

    report = pipeline.sender.process(records)

    assert report.failed_record_ids == frozenset({"poison-1", "poison-2"})
    assert report.delivered == 1


def test_the_same_row_twice_in_a_batch_is_sent_once(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("ok"))
    pipeline.claimer.claim_once()
    [queued] = pipeline.queue.receive()

    report = pipeline.sender.process(
        [QueueRecord("first", queued.body), QueueRecord("again", queued.body)]
    )

    assert report.delivered == 1
    assert len(receiver.requests) == 1


def test_a_refused_retry_message_releases_the_lease_at_once(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("retry-after/429/30"))
    pipeline.claimer.claim_once()
    pipeline.queue.refuse.add(str(only_message_id(db)))

    pipeline.deliver_queued()

    row = message_row(db, only_message_id(db))
    assert row["status"] == "failed"
    assert row["lease_token"] is None
    assert seconds_until(row) == pytest.approx(30, abs=2)


def test_an_unreachable_database_returns_the_whole_batch_to_the_queue(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    one_message_to(db, receiver.url("ok"))
    pipeline.claimer.claim_once()
    received = pipeline.queue.receive()
    unreachable = Database("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1")
    unreachable.max_retries = 1
    sender = Sender(
        unreachable,
        pipeline.queue,
        pipeline.settings,
        pipeline.transport,
        keyring=secrets_keyring(),
    )

    report = sender.process([QueueRecord(m.message_id, m.body) for m in received])

    assert report.failed_record_ids == {m.message_id for m in received}
    assert receiver.requests == []


def test_a_batch_is_delivered_concurrently(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, receiver.url("slow/400"))
        seed_messages(cur, endpoint_id, 10)
    started = datetime.now(UTC)
    report = pipeline.claim_and_deliver()

    assert report.delivered == 10
    # One after the other would take four seconds.
    assert datetime.now(UTC) - started < timedelta(seconds=2)


def test_the_circuit_opens_at_the_threshold_probes_once_and_doubles_its_cooldown(
    db: Database, receiver: Receiver
) -> None:
    pipeline = make_pipeline(db, lease_s=LEASE_S, claim_batch_size=5)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, receiver.url("status/500"))
        cur.execute(
            "UPDATE tidings.endpoint_health SET failure_threshold = 3 WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        seed_messages(cur, endpoint_id, 5)
    pipeline.claimer.claim_once()
    first_three = pipeline.queue.receive(max_messages=3)
    pipeline.sender.process([QueueRecord(m.message_id, m.body) for m in first_three])

    health = health_row(db, endpoint_id)
    assert (health["state"], health["consecutive_failures"]) == ("open", 3)
    assert len(receiver.requests) == 3

    # While open, queued rows are held back without a request.
    held = pipeline.queue.receive(max_messages=2)
    report = pipeline.sender.process([QueueRecord(m.message_id, m.body) for m in held])
    assert report.skipped == 2
    assert len(receiver.requests) == 3
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.messages WHERE status = 'pending'")
        assert cur.fetchone() == (2,)

    # After the cooldown exactly one probe goes; it fails, so the cooldown doubles.
    _end_cooldown(db, endpoint_id)
    pipeline.claim_and_deliver()
    health = health_row(db, endpoint_id)
    assert len(receiver.requests) == 4
    assert (health["state"], health["cooldown_s"]) == ("open", 600)

    # A successful probe closes the circuit and resets the cooldown.
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoints SET url = %s WHERE id = %s", (receiver.url("ok"), endpoint_id)
        )
    _end_cooldown(db, endpoint_id)
    pipeline.claim_and_deliver()
    health = health_row(db, endpoint_id)
    assert (health["state"], health["cooldown_s"]) == ("closed", 300)


def _end_cooldown(db: Database, endpoint_id: int) -> None:
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health"
            " SET opened_at = opened_at - cooldown_s * interval '1 second' - interval '1 second'"
            " WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        cur.execute(
            "UPDATE tidings.messages SET next_attempt_at = now() - interval '1 second'"
            " WHERE status IN ('pending', 'failed') AND lease_token IS NULL"
        )


def test_cookies_set_by_one_receiver_are_never_sent_back(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur, receiver.url("cookie")), 1)
    pipeline.claim_and_deliver()
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur, receiver.url("ok")), 1)
    pipeline.claim_and_deliver()

    assert len(receiver.requests) == 2
    assert all("cookie" not in request.headers for request in receiver.requests)


def send_with_time_left(
    db: Database, pipeline: Pipeline, url: str, send_budget_s: float
) -> tuple[int, BatchReport]:
    """One message to ``url``, claimed and sent by an invocation that leaves ``send_budget_s``
    for its requests beyond what it keeps to record them."""
    one_message_to(db, url)
    pipeline.claimer.claim_once()
    [queued] = pipeline.queue.receive()
    left_ms = int((record_reserve_s(pipeline.settings) + send_budget_s) * 1000)
    report = pipeline.sender.process([QueueRecord(queued.message_id, queued.body)], lambda: left_ms)
    return only_message_id(db), report


def test_requests_are_cut_short_so_that_the_outcomes_are_recorded_in_time(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    started = datetime.now(UTC)
    # 1.5 s left for requests, though the endpoint's own timeout (5 s) would wait for the answer.
    message_id, report = send_with_time_left(db, pipeline, receiver.url("slow/4000"), 1.5)

    assert datetime.now(UTC) - started < timedelta(seconds=3)
    assert report.retried == 1
    row = message_row(db, message_id)
    assert (row["status"], row["attempts"], row["last_error"]) == ("failed", 1, "timeout")


def test_with_no_time_left_to_send_the_rows_go_back_to_the_database_unsent(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    message_id, report = send_with_time_left(db, pipeline, receiver.url("ok"), 0.5)

    assert receiver.requests == []
    assert report.failed_record_ids == frozenset()
    assert report.skipped == 1
    row = message_row(db, message_id)
    assert (row["status"], row["attempts"], row["lease_token"]) == ("pending", 0, None)
    assert seconds_until(row) <= 0
    # The claimer takes it back at once, and it is delivered.
    assert pipeline.claim_and_deliver().delivered == 1


@pytest.mark.parametrize("flaw", ["not base64", "altered ciphertext"])
def test_a_secret_that_cannot_sign_dead_letters_at_once_without_counting_against_the_circuit(
    db: Database, pipeline: Pipeline, receiver: Receiver, flaw: str
) -> None:
    endpoint_id = one_message_to(db, receiver.url("ok"))
    with db.cursor() as cur:
        if flaw == "not base64":
            # Written around the API, which would refuse it.
            add_secret(cur, endpoint_id, "whsec_not*base64", overlap_s=0)
        else:
            # One bit of the stored ciphertext changed: it no longer opens.
            cur.execute(
                "UPDATE tidings.endpoint_secrets"
                " SET ciphertext = set_bit(ciphertext, 100, 1 - get_bit(ciphertext, 100))"
                " WHERE endpoint_id = %s",
                (endpoint_id,),
            )

    report = pipeline.claim_and_deliver()

    assert report.dead_lettered == 1
    assert receiver.requests == []
    row = message_row(db, only_message_id(db))
    assert (row["status"], row["attempts"], row["last_error"]) == (
        "dead_letter",
        1,
        "signing_failed",
    )
    health = health_row(db, endpoint_id)
    assert (health["state"], health["consecutive_failures"]) == ("closed", 0)


def _one_packed_message(
    db: Database, pipeline: Pipeline, receiver: Receiver, *, rows: int
) -> ReceivedMessage:
    """``rows`` due rows of an endpoint of the fast lane, claimed into one queue message."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, receiver.url("ok"))
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, rows)
    pipeline.claimer.claim_once()
    [message] = pipeline.queue.receive(max_messages=10)
    assert len(envelopes(pipeline.queue.sent)) == rows
    return message


def test_a_packed_message_delivers_each_of_its_rows_once_however_often_it_comes(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    message = _one_packed_message(db, pipeline, receiver, rows=7)

    first = pipeline.sender.process([QueueRecord(message.message_id, message.body)])
    # SQS delivers at least once: the same message again (a lost acknowledgement) sends nothing.
    again = pipeline.sender.process([QueueRecord(message.message_id, message.body)])

    assert (first.delivered, first.failed_record_ids) == (7, frozenset())
    assert (again.delivered, again.skipped, again.failed_record_ids) == (0, 7, frozenset())
    assert len(receiver.requests_to("ok")) == 7
    with db.cursor() as cur:
        cur.execute("SELECT status::text, attempts, count(*) FROM tidings.messages GROUP BY 1, 2")
        assert cur.fetchall() == [("delivered", 1, 7)]


def test_a_packed_message_whose_outcomes_cannot_be_recorded_comes_back_whole(
    db: Database, pipeline: Pipeline, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:

    message = _one_packed_message(db, pipeline, receiver, rows=4)
    sender = pipeline.sender

    def unavailable(*args: object, **kwargs: object) -> None:
        raise psycopg2.OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(sender, "_record", unavailable)
    report = sender.process([QueueRecord(message.message_id, message.body)])

    # The one record carrying the four comes back from SQS; the rows keep their leases until
    # then (a second receive begins none again: their attempt has begun), and the claimer
    # takes them back when those run out.
    assert report.failed_record_ids == frozenset({message.message_id})
    with db.cursor() as cur:
        cur.execute("SELECT status::text, attempts, count(*) FROM tidings.messages GROUP BY 1, 2")
        assert cur.fetchall() == [("in_flight", 0, 4)]


def test_a_delivered_attempt_is_logged_at_debug_and_a_failed_one_at_info(
    db: Database, pipeline: Pipeline, receiver: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    one_message_to(db, receiver.url("ok"))
    one_message_to(db, receiver.url("status/500"))

    with caplog.at_level("DEBUG", logger="tidings"):
        report = pipeline.claim_and_deliver()

    assert (report.delivered, report.retried) == (1, 1)
    attempts = {
        record.status_code: record.levelname  # type: ignore[attr-defined]
        for record in caplog.records
        if record.getMessage() == "delivery attempt"
    }
    assert attempts == {200: "DEBUG", 500: "INFO"}


def _waves_of_two(db: Database, record_rows: int, **changes: object) -> Pipeline:
    """A pipeline that packs two rows a message and sends two requests at a time, writing
    ``record_rows`` answers a record statement."""
    return make_pipeline(
        db,
        lease_s=LEASE_S,
        deliveries_per_message=2,
        sender_concurrency=2,
        sender_record_rows=record_rows,
        **changes,
    )


def _six_rows_in_three_messages(
    db: Database, pipeline: Pipeline, url: str
) -> tuple[list[int], list[QueueRecord]]:
    """Six rows to ``url``, claimed: their ids and the three queue records carrying them."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, url)
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, 6)
        cur.execute("SELECT id FROM tidings.messages ORDER BY id")
        ids = [row[0] for row in cur.fetchall()]
    pipeline.claimer.claim_once()
    received = pipeline.queue.receive(max_messages=10)
    assert [len(envelopes_of(m.body)) for m in received] == [2, 2, 2]
    return ids, [QueueRecord(m.message_id, m.body) for m in received]


def _counting_records(
    monkeypatch: pytest.MonkeyPatch, sender: Sender, *, lost_at: int | None = None
) -> list[int]:
    """The rows of each record statement the sender makes, as it makes them; the ``lost_at``-th
    (counting from 1) finds the database gone."""
    real_record = sender._record_together
    calls: list[int] = []

    def counted(decisions):  # type: ignore[no-untyped-def]
        calls.append(len(decisions))
        if len(calls) == lost_at:
            raise psycopg2.OperationalError("server closed the connection unexpectedly")
        return real_record(decisions)

    monkeypatch.setattr(sender, "_record_together", counted)
    return calls


def test_a_batch_is_sent_and_recorded_a_part_at_a_time_and_stops_where_the_database_fails(
    db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three messages of two rows, sent and recorded two at a time: three parts of one message
    # each.
    pipeline = _waves_of_two(db, record_rows=2)
    ids, records = _six_rows_in_three_messages(db, pipeline, receiver.url("ok"))
    sender = pipeline.sender
    calls = _counting_records(monkeypatch, sender, lost_at=2)

    report = sender.process(records)

    # The first part is recorded; the second comes back from the queue (its rows keep their
    # leases, and were sent once); the third was never sent and went back to the database.
    assert calls == [2, 2]
    assert report.delivered == 2
    assert report.failed_record_ids == frozenset({records[1].record_id})
    assert len(receiver.requests_to("ok")) == 4
    statuses = [message_row(db, message_id)["status"] for message_id in ids]
    assert statuses == ["delivered"] * 2 + ["in_flight"] * 2 + ["pending"] * 2


def test_waves_of_quick_answers_are_recorded_together_up_to_the_record_rows(
    db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two requests at a time, four answers a statement: waves of 2, 2 | 2.
    pipeline = _waves_of_two(db, record_rows=4)
    ids, records = _six_rows_in_three_messages(db, pipeline, receiver.url("ok"))
    sender = pipeline.sender
    calls = _counting_records(monkeypatch, sender)

    report = sender.process(records)

    assert calls == [4, 2]
    assert (report.delivered, report.failed_record_ids) == (6, frozenset())
    assert len(receiver.requests_to("ok")) == 6
    assert {message_row(db, message_id)["status"] for message_id in ids} == {"delivered"}


def test_a_wave_that_finds_a_slow_endpoint_is_recorded_at_once(
    db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every answer is slower than the slow lane's threshold: no quick answer waits behind a slow
    # wave for the record rows to fill, so each wave is its own statement.
    pipeline = _waves_of_two(db, record_rows=100, slow_lane_threshold_ms=50)
    ids, records = _six_rows_in_three_messages(db, pipeline, receiver.url("slow/120"))
    sender = pipeline.sender
    calls = _counting_records(monkeypatch, sender)

    report = sender.process(records)

    assert calls == [2, 2, 2]
    assert report.delivered == 6
    assert {message_row(db, message_id)["status"] for message_id in ids} == {"delivered"}


def test_the_database_lost_before_a_joint_record_returns_every_unwritten_answer_to_the_queue(
    db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Waves of two, recorded four at a time: the first statement carries two messages' rows.
    pipeline = _waves_of_two(db, record_rows=4)
    ids, records = _six_rows_in_three_messages(db, pipeline, receiver.url("ok"))
    sender = pipeline.sender
    calls = _counting_records(monkeypatch, sender, lost_at=1)

    report = sender.process(records)

    # Both messages whose answers were unwritten come back from SQS (sent once, leases kept);
    # the third was never sent and went back to the database.
    assert calls == [4]
    assert report.delivered == 0
    assert report.failed_record_ids == frozenset({records[0].record_id, records[1].record_id})
    assert len(receiver.requests_to("ok")) == 4
    statuses = [message_row(db, message_id)["status"] for message_id in ids]
    assert statuses == ["in_flight"] * 4 + ["pending"] * 2


def test_running_out_of_time_mid_batch_records_what_was_sent_and_returns_the_rest(
    db: Database, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    pipeline = _waves_of_two(db, record_rows=100)
    ids, records = _six_rows_in_three_messages(db, pipeline, receiver.url("ok"))
    sender = pipeline.sender
    calls = _counting_records(monkeypatch, sender)
    # Time for one wave: the second finds the invocation's budget spent.
    budgets = iter([60.0, 0.5])
    monkeypatch.setattr(sender, "_send_budget_s", lambda remaining_ms: next(budgets))

    report = sender.process(records, remaining_ms=lambda: 60_000)

    # The sent wave's answers are written before its later rows go back, due at once.
    assert calls == [2]
    assert (report.delivered, report.skipped, report.failed_record_ids) == (2, 4, frozenset())
    assert len(receiver.requests_to("ok")) == 2
    statuses = [message_row(db, message_id)["status"] for message_id in ids]
    assert statuses == ["delivered"] * 2 + ["pending"] * 4
