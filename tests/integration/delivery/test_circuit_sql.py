"""The circuit breaker's transitions as atomic SQL, under concurrency."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from tests.support.locks import wait_until_blocked
from tests.support.seed import COOLDOWNS, make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import AttemptOutcome, AttemptRequest, CircuitSummary, MessageStatus


def health(db: Database, endpoint_id: int) -> dict:
    with db.cursor() as cur:
        cur.execute(
            "SELECT state::text, consecutive_failures, cooldown_s, opened_at IS NOT NULL,"
            " probe_token FROM tidings.endpoint_health WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        state, failures, cooldown, opened, probe = cur.fetchone()
    return {
        "state": state,
        "failures": failures,
        "cooldown": cooldown,
        "opened": opened,
        "probe": probe,
    }


def report(db: Database, endpoint_id: int, *, success: bool, failures: int = 1):
    now = datetime.now(UTC)
    with db.cursor() as cur:
        return delivery.record_outcomes(
            cur,
            [],
            [
                CircuitSummary(
                    endpoint_id,
                    success,
                    0 if success else failures,
                    now if success else None,
                    None if success else now,
                )
            ],
            **COOLDOWNS,
        )


def open_circuit_past_cooldown(db: Database, endpoint_id: int) -> None:
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET state = 'open', cooldown_s = 300,"
            " opened_at = now() - interval '301 seconds', consecutive_failures = 10"
            " WHERE endpoint_id = %s",
            (endpoint_id,),
        )


def test_opens_after_threshold_consecutive_failures(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
    assert report(db, endpoint_id, success=False, failures=9).transitions == ()
    assert health(db, endpoint_id)["state"] == "closed"
    result = report(db, endpoint_id, success=False, failures=1)
    assert [(t.from_state, t.to_state) for t in result.transitions] == [("closed", "open")]
    assert health(db, endpoint_id)["opened"]


def test_success_resets_the_failure_count(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
    report(db, endpoint_id, success=False, failures=9)
    report(db, endpoint_id, success=True)
    report(db, endpoint_id, success=False, failures=9)
    assert health(db, endpoint_id) | {"probe": None} == {
        "state": "closed",
        "failures": 9,
        "cooldown": 300.0,
        "opened": False,
        "probe": None,
    }


def test_ten_concurrent_senders_on_a_half_open_endpoint_get_exactly_one_probe(
    database_url: str,
) -> None:
    setup = Database(database_url)
    with setup.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 10)
        # Leased before the circuit opened: ten queue messages are already on their way.
        rows = delivery.claim_due(cur, batch_size=10, lease_s=60)
    assert len(rows) == 10
    open_circuit_past_cooldown(setup, endpoint_id)
    setup.close()

    barrier = threading.Barrier(10)
    permitted: list[int] = []
    errors: list[BaseException] = []

    def sender(row: delivery.ClaimedMessage) -> None:
        db = Database(database_url)
        try:
            barrier.wait()
            with db.cursor() as cur:
                started = delivery.begin_attempts(
                    cur, [AttemptRequest(row.lease, row.attempts + 1)], lease_s=60
                )
            permitted.extend(s.message_id for s in started if s.permitted)
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=sender, args=(row,)) for row in rows]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    assert errors == []
    assert len(permitted) == 1
    check = Database(database_url)
    assert health(check, endpoint_id)["state"] == "half_open"
    with check.cursor() as cur:
        cur.execute("SELECT status::text, count(*) FROM tidings.messages GROUP BY 1 ORDER BY 1")
        # The nine held back are back in the database queue, due at the earliest retry time.
        assert dict(cur.fetchall()) == {"pending": 9, "in_flight": 1}
    check.close()


def _probe(db: Database, endpoint_id: int) -> delivery.ClaimedMessage:
    open_circuit_past_cooldown(db, endpoint_id)
    with db.cursor() as cur:
        (row,) = delivery.claim_due(cur, batch_size=10, lease_s=60)
        (started,) = delivery.begin_attempts(
            cur, [AttemptRequest(row.lease, row.attempts + 1)], lease_s=60
        )
    assert started.permitted
    return row


def _record(db: Database, row: delivery.ClaimedMessage, *, success: bool):
    now = datetime.now(UTC)
    with db.cursor() as cur:
        return delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    row.lease,
                    row.endpoint_id,
                    MessageStatus.DELIVERED if success else MessageStatus.FAILED,
                    1,
                    now,
                    200 if success else 503,
                    retry_at=None if success else now,
                )
            ],
            [
                CircuitSummary(
                    row.endpoint_id,
                    success,
                    0 if success else 1,
                    now if success else None,
                    None if success else now,
                )
            ],
            **COOLDOWNS,
        )


def test_failed_probe_reopens_with_doubled_cooldown_capped(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 5)
    row = _probe(db, endpoint_id)
    result = _record(db, row, success=False)
    assert [(t.from_state, t.to_state, t.cooldown_s) for t in result.transitions] == [
        ("half_open", "open", 600.0)
    ]
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET cooldown_s = 3000, state = 'half_open',"
            " probe_token = %s, probe_started_at = now() WHERE endpoint_id = %s",
            (row.lease_token, endpoint_id),
        )
    report(db, endpoint_id, success=False)
    assert health(db, endpoint_id)["cooldown"] == 3600.0


def test_successful_probe_closes_and_resets_cooldown(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 5)
    row = _probe(db, endpoint_id)
    result = _record(db, row, success=True)
    assert [(t.from_state, t.to_state) for t in result.transitions] == [("half_open", "closed")]
    assert health(db, endpoint_id) == {
        "state": "closed",
        "failures": 0,
        "cooldown": 300.0,
        "opened": False,
        "probe": None,
    }
    with db.cursor() as cur:
        assert len(delivery.claim_due(cur, batch_size=10, lease_s=60)) == 4


def last_times(db: Database, endpoint_id: int) -> tuple[datetime | None, datetime | None]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT last_success_at, last_failure_at FROM tidings.endpoint_health"
            " WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        return cur.fetchone()


def test_successes_move_a_healthy_circuits_times_on_and_leave_it_closed(db: Database) -> None:
    # The record's small statement: successes alone against a circuit closed without failures.
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        # What a closed circuit may still carry from its last probe: cleared as the full
        # statement clears it.
        cur.execute(
            "UPDATE tidings.endpoint_health SET cooldown_s = 1200, probe_token = gen_random_uuid(),"
            " probe_started_at = now(), last_failure_at = %s WHERE endpoint_id = %s",
            (datetime(2026, 1, 1, tzinfo=UTC), endpoint_id),
        )
    first = datetime.now(UTC)
    failure = first - timedelta(seconds=1)
    summary = CircuitSummary(endpoint_id, True, 0, first, failure)
    with db.cursor() as cur:
        result = delivery.record_outcomes(cur, [], [summary], **COOLDOWNS)
    assert result.transitions == () and result.disabled_endpoint_ids == frozenset()
    assert health(db, endpoint_id) == {
        "state": "closed",
        "failures": 0,
        "cooldown": 300.0,
        "opened": False,
        "probe": None,
    }
    assert last_times(db, endpoint_id) == (first, failure)
    # A later success moves the last success on; an earlier one (a slower sender's batch) and
    # an earlier failure move nothing back.
    later = first + timedelta(seconds=5)
    with db.cursor() as cur:
        delivery.record_outcomes(
            cur, [], [CircuitSummary(endpoint_id, True, 0, later, None)], **COOLDOWNS
        )
        delivery.record_outcomes(
            cur,
            [],
            [CircuitSummary(endpoint_id, True, 0, first - timedelta(seconds=9), failure)],
            **COOLDOWNS,
        )
    assert last_times(db, endpoint_id) == (later, failure)


def test_a_failure_counted_while_a_success_waits_for_the_health_row_is_not_lost(
    database_url: str,
) -> None:
    # The success reads the circuit closed without failures, then waits for the row another
    # sender holds: that sender's failures open the circuit. The success must be applied to the
    # row as that sender left it (closing the circuit, a transition to report), not as it read it.
    setup = Database(database_url)
    with setup.cursor() as cur:
        endpoint_id = make_endpoint(cur)
    failing = Database(database_url)
    cur = failing.connection.cursor()
    cur.execute("BEGIN")
    now = datetime.now(UTC)
    failed = delivery.record_outcomes(
        cur, [], [CircuitSummary(endpoint_id, False, 10, None, now)], **COOLDOWNS
    )
    assert [(t.from_state, t.to_state) for t in failed.transitions] == [("closed", "open")]
    results: list[delivery.RecordResult] = []
    sender = Database(database_url)
    sender_connection = sender.connection  # opened here: its backend is the one to watch

    def succeeding() -> None:
        with sender.cursor() as scur:
            summary = CircuitSummary(endpoint_id, True, 0, now + timedelta(seconds=2), None)
            results.append(delivery.record_outcomes(scur, [], [summary], **COOLDOWNS))

    thread = threading.Thread(target=succeeding)
    thread.start()
    wait_until_blocked(setup, sender_connection)
    cur.execute("COMMIT")
    thread.join(timeout=10)
    failing.close()
    sender.close()
    assert [(t.from_state, t.to_state) for t in results[0].transitions] == [("open", "closed")]
    assert health(setup, endpoint_id) | {"cooldown": None} == {
        "state": "closed",
        "failures": 0,
        "cooldown": None,
        "opened": False,
        "probe": None,
    }
    setup.close()


def test_concurrent_batches_on_shared_endpoints_never_deadlock(database_url: str) -> None:
    setup = Database(database_url)
    with setup.cursor() as cur:
        endpoints = [make_endpoint(cur) for _ in range(6)]
    setup.close()
    errors: list[BaseException] = []

    def sender(order: list[int]) -> None:
        db = Database(database_url)
        try:
            now = datetime.now(UTC)
            for _ in range(40):
                with db.cursor() as cur:
                    delivery.record_outcomes(
                        cur,
                        [],
                        [CircuitSummary(e, False, 1, None, now) for e in order],
                        **COOLDOWNS,
                    )
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    orders = [endpoints, endpoints[::-1], endpoints[2:] + endpoints[:2]]
    threads = [threading.Thread(target=sender, args=(order,)) for order in orders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    check = Database(database_url)
    with check.cursor() as cur:
        cur.execute(
            "SELECT min(consecutive_failures), max(consecutive_failures)"
            " FROM tidings.endpoint_health"
        )
        assert cur.fetchone() == (120, 120)  # 3 senders x 40 batches, none lost
    check.close()


# The SQL must apply exactly the rules of the pure model in tidings.delivery.circuit_breaker.
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from tidings.delivery import circuit_breaker as cb  # noqa: E402

_batches = st.lists(st.lists(st.booleans(), min_size=1, max_size=12), min_size=1, max_size=8)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    start=st.sampled_from(["closed", "open", "half_open"]),
    batches=_batches,
    threshold=st.integers(min_value=1, max_value=6),
)
def test_sql_transitions_match_the_pure_model(db: Database, start, batches, threshold) -> None:
    cfg = cb.BreakerConfig(failure_threshold=threshold, base_cooldown_s=300, max_cooldown_s=3600)
    now = datetime.now(UTC)
    model = cb.Breaker(cb.CircuitState(start), 0, 300.0, None if start == "closed" else now)
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        cur.execute(
            "UPDATE tidings.endpoint_health SET state = %s, failure_threshold = %s,"
            " opened_at = CASE WHEN %s = 'closed' THEN NULL ELSE now() END"
            " WHERE endpoint_id = %s",
            (start, threshold, start, endpoint_id),
        )
    for index, outcomes in enumerate(batches):
        # Batches seconds apart: every success moves the last success on, so a success against
        # a healthy circuit takes the record's small statement and any other the full one.
        at = now + timedelta(seconds=2 * index)
        model = cb.apply_summary(model, cb.summarize(outcomes), at, cfg)
        summary = cb.summarize(outcomes)
        with db.cursor() as cur:
            delivery.record_outcomes(
                cur,
                [],
                [
                    CircuitSummary(
                        endpoint_id,
                        summary.has_success,
                        summary.trailing_failures,
                        at if any(outcomes) else None,
                        at if not all(outcomes) else None,
                    )
                ],
                **COOLDOWNS,
            )
        seen = health(db, endpoint_id)
        assert (seen["state"], seen["failures"], seen["cooldown"], seen["opened"]) == (
            model.state.value,
            model.consecutive_failures,
            model.cooldown_s,
            model.opened_at is not None,
        )
