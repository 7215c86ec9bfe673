"""Operational events through their real paths: each change (a 410, a receiver failing up to its
circuit's threshold, a dead letter, a person's change, a rotation, the health monitor's
disabling) records exactly one event of the operational application, with the documented
payload, delivered signed to an endpoint subscribed there; nothing about the operational
application's own endpoints."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import jsonschema
import psycopg2
import pytest
from standardwebhooks.webhooks import Webhook

from tests.integration.delivery.delivery_harness import Pipeline, make_pipeline
from tests.support.receivers import Receiver, running_receiver
from tests.support.secrets import secrets_keyring
from tests.support.seed import (
    TEST_SECRET,
    make_application,
    make_endpoint,
    mark_answered,
    seed_messages,
)
from tidings.config import Settings
from tidings.dal.connection import Database, fetch_dicts
from tidings.logic import endpoints as endpoint_use_cases
from tidings.logic.operational import payload_schema
from tidings.maintenance.failing_endpoints import disable_failing_endpoints

OPERATIONAL = Settings().operational_application


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


@pytest.fixture
def pipeline(db: Database) -> Pipeline:
    return make_pipeline(db)


def app_id_of(db: Database, uid: str) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.applications WHERE uid = %s", (uid,))
        row = cur.fetchone()
    assert row is not None, uid
    return int(row[0])


def operational_endpoint(db: Database, receiver: Receiver, path: str = "ops") -> int:
    """An endpoint of the operational application, subscribed to everything, signing with
    TEST_SECRET."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, receiver.url(path), app_id=app_id_of(db, OPERATIONAL))
        mark_answered(cur, endpoint_id)
    return endpoint_id


def customer_endpoint(db: Database, url: str, *, uid: str = "acme", messages: int = 1) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.applications WHERE uid = %s", (uid,))
        found = cur.fetchone()
        app_id = int(found[0]) if found else make_application(cur, uid)
        endpoint_id = make_endpoint(cur, url, app_id=app_id)
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, messages, event_type="invoice.paid")
    return endpoint_id


def operational_events(db: Database) -> list[dict[str, Any]]:
    """The operational application's events, oldest first."""
    with db.cursor() as cur:
        cur.execute(
            "SELECT ev.event_type, ev.event_id, ev.payload FROM tidings.events ev"
            " JOIN tidings.applications a ON a.id = ev.app_id"
            " WHERE a.uid = %s ORDER BY ev.id",
            (OPERATIONAL,),
        )
        return fetch_dicts(cur)


def of_type(db: Database, event_type: str) -> list[dict[str, Any]]:
    return [e["payload"] for e in operational_events(db) if e["event_type"] == event_type]


def delivered_signed(receiver: Receiver, path: str = "ops") -> list[dict[str, Any]]:
    """The bodies the operational endpoint received, each checked against its signature."""
    bodies = []
    for request in receiver.requests_to(path):
        bodies.append(Webhook(TEST_SECRET).verify(request.body, request.headers))
    return bodies


def assert_documented(event_type: str, payload: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(payload_schema(event_type)).validate(payload)


def test_a_410_reports_the_dead_letter_and_the_disabling_once_each_delivered_signed(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    operational_endpoint(db, receiver)
    endpoint_id = customer_endpoint(db, receiver.url("status/410"))

    pipeline.claim_and_deliver()

    events = operational_events(db)
    assert sorted(e["event_type"] for e in events) == [
        "endpoint.disabled",
        "message.attempt.exhausted",
    ]
    [disabled] = of_type(db, "endpoint.disabled")
    [exhausted] = of_type(db, "message.attempt.exhausted")
    for event in events:
        assert_documented(event["event_type"], event["payload"])
    assert disabled["reason"] == "gone"
    assert disabled["detail"] == "410 Gone"
    assert (disabled["application_uid"], disabled["endpoint_id"]) == ("acme", endpoint_id)
    assert disabled["endpoint_url"] == receiver.url("status/410")
    assert exhausted["event_type"] == "invoice.paid"
    assert exhausted["attempt_count"] == 1
    assert exhausted["last_attempt"]["status_code"] == 410
    assert exhausted["last_attempt"]["error_class"] == "http_410"

    # The operational endpoint receives both, signed, with the payloads as recorded.
    pipeline.claim_and_deliver()
    received = delivered_signed(receiver)
    assert sorted(received, key=json.dumps) == sorted([disabled, exhausted], key=json.dumps)


def test_each_share_of_the_failure_threshold_is_reported_once_and_recovery_after_it(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    receiver.down.set()
    endpoint_id = customer_endpoint(db, receiver.url("outage"), messages=5)
    pipeline.claim_and_deliver()  # 5 of 10 consecutive failures: 50 %
    assert [p["threshold_percent"] for p in of_type(db, "endpoint.failing")] == [50]
    with db.cursor() as cur:
        seed_messages(cur, endpoint_id, 1, event_type="invoice.paid")
    pipeline.claim_and_deliver()  # 6: no new level
    with db.cursor() as cur:
        seed_messages(cur, endpoint_id, 4, event_type="invoice.paid")
    pipeline.claim_and_deliver()  # 10: past 70 and 90 to 100 %, the highest reported
    failing = of_type(db, "endpoint.failing")
    assert [p["threshold_percent"] for p in failing] == [50, 100]
    assert [p["consecutive_failures"] for p in failing] == [5, 10]
    for payload in failing:
        assert_documented("endpoint.failing", payload)
        assert payload["failure_threshold"] == 10
    assert of_type(db, "endpoint.recovered") == []

    # Let the circuit try again: the probe succeeds, the endpoint recovers.
    receiver.down.clear()
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET opened_at = now() - interval '1 hour'"
            " WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        cur.execute(
            "UPDATE tidings.messages SET next_attempt_at = now() WHERE endpoint_id = %s"
            " AND status = 'failed'",
            (endpoint_id,),
        )
    pipeline.claim_and_deliver()
    [recovered] = of_type(db, "endpoint.recovered")
    assert_documented("endpoint.recovered", recovered)
    assert recovered["failed_attempts"] == 10
    assert len(of_type(db, "endpoint.failing")) == 2


def test_a_messages_fourth_failed_attempt_is_reported_once(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    endpoint_id = customer_endpoint(db, receiver.url("status/500"), messages=2)
    with db.cursor() as cur:
        # One message has failed three times already, the other twice.
        cur.execute(
            "UPDATE tidings.messages SET attempts = CASE WHEN id = (SELECT min(id)"
            " FROM tidings.messages) THEN 3 ELSE 2 END WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        cur.execute("SELECT min(id) FROM tidings.messages")
        fourth = cur.fetchone()[0]  # type: ignore[index]
    pipeline.claim_and_deliver()

    [failing] = of_type(db, "message.attempt.failing")
    assert_documented("message.attempt.failing", failing)
    assert (failing["message_id"], failing["attempt_count"]) == (fourth, 4)
    assert failing["last_attempt"]["status_code"] == 500
    assert of_type(db, "message.attempt.exhausted") == []


def test_people_changing_an_endpoint_are_reported_in_the_same_transaction(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    operational_endpoint(db, receiver)
    with db.cursor() as cur:
        app_id = make_application(cur, "acme")
    settings = make_pipeline(db).settings.replace(endpoint_ports=("1-65535",))
    keyring = secrets_keyring()
    created = endpoint_use_cases.create_endpoint(
        db,
        keyring=keyring,
        url=receiver.url("acme"),
        app_id=app_id,
        settings=settings,
        event_types=["invoice.paid"],
    )
    endpoint_use_cases.update_endpoint(
        db, created.id, {"description": "billing"}, app_id=app_id, settings=settings
    )
    endpoint_use_cases.update_endpoint(
        db, created.id, {"enabled": False}, app_id=app_id, settings=settings
    )
    endpoint_use_cases.update_endpoint(
        db, created.id, {"enabled": True}, app_id=app_id, settings=settings
    )
    rotated = endpoint_use_cases.rotate_secret(
        db, created.id, keyring=keyring, app_id=app_id, settings=settings
    )
    endpoint_use_cases.delete_endpoint(db, created.id, app_id=app_id)

    events = operational_events(db)
    assert [e["event_type"] for e in events] == [
        "endpoint.created",
        "endpoint.updated",
        "endpoint.disabled",
        "endpoint.enabled",
        "endpoint.secret.rotated",
        "endpoint.deleted",
    ]
    for event in events:
        assert_documented(event["event_type"], event["payload"])
        assert event["payload"]["endpoint_id"] == created.id
        assert event["payload"]["application_uid"] == "acme"
    by_type = {e["event_type"]: e["payload"] for e in events}
    assert by_type["endpoint.created"]["event_types"] == ["invoice.paid"]
    assert by_type["endpoint.updated"]["changed"] == ["description"]
    assert by_type["endpoint.disabled"]["reason"] == "by_person"
    assert by_type["endpoint.secret.rotated"]["previous_secret_expires_at"] is not None
    # Never a secret, in any event.
    recorded = json.dumps([e["payload"] for e in events])
    assert created.secret not in recorded and rotated.secret not in recorded

    pipeline.claim_and_deliver()
    assert len(delivered_signed(receiver)) == len(events)


def test_a_change_that_rolls_back_reports_nothing(db: Database, receiver: Receiver) -> None:
    with db.cursor() as cur:
        app_id = make_application(cur, "acme")
        endpoint_id = make_endpoint(cur, receiver.url("acme"), app_id=app_id)

    def disable_then_fail(cur: Any) -> None:
        from tidings.dal import endpoints as dal

        dal.update_endpoint(cur, app_id, endpoint_id, {"enabled": False})
        raise RuntimeError("the transaction fails after the change")

    with pytest.raises(RuntimeError):
        db.run(disable_then_fail, transaction=True)
    assert operational_events(db) == []


def test_the_health_monitor_reports_an_endpoint_disabled_for_failing_for_days(
    db: Database,
) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        app_id = make_application(cur, "acme")
        endpoint_id = make_endpoint(cur, "https://receiver.example/hook", app_id=app_id)
        cur.execute(
            "UPDATE tidings.endpoint_health SET last_success_at = NULL,"
            " last_failure_at = %s WHERE endpoint_id = %s",
            (now - timedelta(days=6), endpoint_id),
        )
    disabled = disable_failing_endpoints(db, Settings(), now)
    assert [d.endpoint_id for d in disabled] == [endpoint_id]
    # A second run finds nothing more to disable, and reports nothing more.
    assert disable_failing_endpoints(db, Settings(), now) == []

    [event] = operational_events(db)
    assert event["event_type"] == "endpoint.disabled"
    assert_documented("endpoint.disabled", event["payload"])
    assert event["payload"]["reason"] == "failing"
    assert event["payload"]["endpoint_id"] == endpoint_id


def test_the_operational_applications_own_endpoints_report_nothing(
    db: Database, pipeline: Pipeline, receiver: Receiver
) -> None:
    """A 410 from an operational endpoint dead-letters and disables it (and raises the usual
    alerts) but records no operational event: no loops."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(
            cur, receiver.url("status/410"), app_id=app_id_of(db, OPERATIONAL)
        )
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, 1)
    pipeline.claim_and_deliver()
    with db.cursor() as cur:
        cur.execute("SELECT enabled FROM tidings.endpoints WHERE id = %s", (endpoint_id,))
        assert cur.fetchone() == (False,)
        cur.execute("SELECT count(*) FROM tidings.events")
        assert cur.fetchone() == (1,)  # the seeded event alone


def test_each_event_carries_its_applications_channel(db: Database, receiver: Receiver) -> None:
    """The element handed to enqueue_batch names the application's uid as its channel, so an
    operational endpoint with that channel takes that application's events only."""
    with db.cursor() as cur:
        cur.execute("SELECT pg_get_functiondef('tidings.emit_lifecycle_v1(jsonb)'::regprocedure)")
        definition = cur.fetchone()[0]  # type: ignore[index]
    assert "'channels', jsonb_build_array(b.application_uid)" in definition


def test_a_client_certificate_about_to_expire_is_reported_once_per_notice_period(
    db: Database,
) -> None:
    from tests.support.tls import TestCa
    from tidings.maintenance.expiring_certificates import report_expiring_certificates

    now = datetime.now(UTC)
    settings = make_pipeline(db).settings
    with db.cursor() as cur:
        app_id = make_application(cur, "acme")
    ids = {}
    ca = TestCa()
    for name, days in (("soon", 3), ("later", 20)):
        issued = ca.issue(name, not_after=now + timedelta(days=days))
        ids[name] = endpoint_use_cases.create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=f"https://93.184.215.14/{name}",
            tls_client_certificate=issued.as_credential(),
            settings=settings,
            app_id=app_id,
        ).id
    assert report_expiring_certificates(db, now) == 1
    assert report_expiring_certificates(db, now + timedelta(minutes=5)) == 1
    [week] = of_type(db, "endpoint.certificate.expiring")
    assert_documented("endpoint.certificate.expiring", week)
    assert (week["endpoint_id"], week["within_days"]) == (ids["soon"], 7)
    # Within a day of its expiry, once more; after it, never again.
    report_expiring_certificates(db, now + timedelta(days=2, hours=12))
    report_expiring_certificates(db, now + timedelta(days=2, hours=13))
    report_expiring_certificates(db, now + timedelta(days=4))
    expiring = of_type(db, "endpoint.certificate.expiring")
    assert [p["within_days"] for p in expiring] == [7, 1]


def test_outcomes_recorded_twice_report_each_change_once(db: Database) -> None:
    """As after a connection lost once the first record had committed: the second run writes
    nothing, so it reports nothing (and the event ids would make a repeat one event besides)."""
    from tidings.dal import delivery
    from tidings.dal.delivery import AttemptOutcome, CircuitSummary, MessageStatus

    with db.cursor() as cur:
        app_id = make_application(cur, "acme")
        endpoint_id = make_endpoint(cur, "https://receiver.example/gone", app_id=app_id)
        seed_messages(cur, endpoint_id, 1)
        [row] = delivery.claim_due(cur, batch_size=10, lease_s=60)
    now = datetime.now(UTC)
    outcome = AttemptOutcome(
        row.lease, endpoint_id, MessageStatus.DEAD_LETTER, 1, now, 410, error_class="http_410"
    )
    for _ in range(2):
        with db.cursor() as cur:
            delivery.record_outcomes(
                cur,
                [outcome],
                [CircuitSummary(endpoint_id, False, 1, None, now)],
                [(endpoint_id, "410 Gone")],
                base_cooldown_s=300.0,
                max_cooldown_s=3600.0,
            )
    assert sorted(e["event_type"] for e in operational_events(db)) == [
        "endpoint.disabled",
        "message.attempt.exhausted",
    ]


def test_an_operational_event_over_the_payload_limit_never_fails_the_change(
    db: Database,
) -> None:
    """The payload limit is the producers' (TIDINGS_MAX_PAYLOAD_BYTES, which a deployment may set
    low): an operational event over it, about an endpoint with a long URL, must neither fail the
    outcomes the sender records (a whole batch of deliveries) nor a person's change; the events
    that fit are still recorded."""
    from tidings.dal import delivery
    from tidings.dal import endpoints as endpoints_dal
    from tidings.dal.delivery import AttemptOutcome, CircuitSummary, MessageStatus

    long_url = "https://receiver.example/gone?" + "p" * 1500
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.settings SET value = 1024 WHERE name = 'max_payload_bytes'")
        app_id = make_application(cur, "acme")
        long_id = make_endpoint(cur, long_url, app_id=app_id)
        short_id = make_endpoint(cur, "https://receiver.example/short", app_id=app_id)
        seed_messages(cur, long_id, 1)
        seed_messages(cur, short_id, 1)
        rows = delivery.claim_due(cur, batch_size=10, lease_s=60)
    now = datetime.now(UTC)
    outcomes = [
        AttemptOutcome(
            row.lease,
            row.endpoint_id,
            MessageStatus.DEAD_LETTER,
            1,
            now,
            410,
            error_class="http_410",
        )
        for row in rows
    ]
    with db.cursor() as cur:
        result = delivery.record_outcomes(
            cur,
            outcomes,
            [CircuitSummary(e, False, 1, None, now) for e in (long_id, short_id)],
            [(long_id, "410 Gone"), (short_id, "410 Gone")],
            base_cooldown_s=300.0,
            max_cooldown_s=3600.0,
        )
    assert len(result.written_ids) == 2
    reported = {(e["event_type"], e["payload"]["endpoint_id"]) for e in operational_events(db)}
    assert reported == {
        ("message.attempt.exhausted", short_id),
        ("endpoint.disabled", short_id),
    }
    with db.cursor() as cur:
        updated = endpoints_dal.update_endpoint(cur, app_id, long_id, {"description": "long"})
    assert updated is not None and updated["description"] == "long"


def test_outcomes_recorded_again_after_a_person_re_enabled_the_endpoint_change_nothing(
    db: Database,
) -> None:
    """A 410 recorded, its answer lost with the connection; a person re-enables the endpoint;
    the sender records the same outcomes again. The second run writes nothing: the endpoint stays
    enabled and no second endpoint.disabled is reported."""
    from tidings.dal import delivery
    from tidings.dal import endpoints as endpoints_dal
    from tidings.dal.delivery import AttemptOutcome, CircuitSummary, MessageStatus

    with db.cursor() as cur:
        app_id = make_application(cur, "acme")
        endpoint_id = make_endpoint(cur, "https://receiver.example/gone", app_id=app_id)
        seed_messages(cur, endpoint_id, 1)
        [row] = delivery.claim_due(cur, batch_size=10, lease_s=60)
    now = datetime.now(UTC)
    outcome = AttemptOutcome(
        row.lease, endpoint_id, MessageStatus.DEAD_LETTER, 1, now, 410, error_class="http_410"
    )

    def record() -> frozenset[int]:
        with db.cursor() as cur:
            return delivery.record_outcomes(
                cur,
                [outcome],
                [CircuitSummary(endpoint_id, False, 1, None, now)],
                [(endpoint_id, "410 Gone")],
                base_cooldown_s=300.0,
                max_cooldown_s=3600.0,
            ).disabled_endpoint_ids

    assert record() == {endpoint_id}
    with db.cursor() as cur:
        endpoints_dal.update_endpoint(cur, app_id, endpoint_id, {"enabled": True})
    assert record() == frozenset()
    with db.cursor() as cur:
        cur.execute("SELECT enabled FROM tidings.endpoints WHERE id = %s", (endpoint_id,))
        assert cur.fetchone() == (True,)
    assert sorted(e["event_type"] for e in operational_events(db)) == [
        "endpoint.disabled",
        "endpoint.enabled",
        "message.attempt.exhausted",
    ]


def test_outcomes_that_cross_no_threshold_read_nothing_more(
    db: Database, database_url: str
) -> None:
    """The sender's hot path: a batch of deliveries and an ordinary retry, crossing no
    threshold, reads neither the applications nor the endpoints (only the failed attempt that
    message.attempt.failing reports, once for the batch, from the settings' few rows), and
    writes no event."""
    from tidings.dal import delivery
    from tidings.dal.delivery import AttemptOutcome, CircuitSummary, MessageStatus

    with db.cursor() as cur:
        app_id = make_application(cur, "acme")
        endpoint_id = make_endpoint(cur, "https://receiver.example/ok", app_id=app_id)
        mark_answered(cur, endpoint_id)
        seed_messages(cur, endpoint_id, 2)
        first, second = delivery.claim_due(cur, batch_size=10, lease_s=60)
    now = datetime.now(UTC)
    outcomes = [
        AttemptOutcome(first.lease, endpoint_id, MessageStatus.DELIVERED, 1, now, 200),
        AttemptOutcome(
            second.lease,
            endpoint_id,
            MessageStatus.FAILED,
            1,
            now,
            503,
            error_class="http_503",
            retry_at=now + timedelta(minutes=1),
        ),
    ]
    # A connection of its own: the transaction's table statistics are then this call's alone.
    conn = psycopg2.connect(database_url)
    with conn, conn.cursor() as cur:
        result = delivery.record_outcomes(
            cur,
            outcomes,
            [CircuitSummary(endpoint_id, True, 1, now, now)],
            base_cooldown_s=300.0,
            max_cooldown_s=3600.0,
        )
        cur.execute(
            "SELECT relname, seq_scan + coalesce(idx_scan, 0) FROM pg_stat_xact_user_tables"
            " WHERE schemaname = 'tidings'"
            " AND relname IN ('applications', 'endpoints', 'events')"
            " AND seq_scan + coalesce(idx_scan, 0) > 0"
        )
        read = cur.fetchall()
    conn.close()
    assert len(result.written_ids) == 2
    assert read == []
    assert operational_events(db) == []


def test_a_dead_letter_is_reported_though_no_circuit_summary_comes_with_it(db: Database) -> None:
    """The consequences of a batch are worked out when anything has consequences: a message
    dead-lettered is reported even when the call brings no health summary to apply."""
    from tidings.dal import delivery
    from tidings.dal.delivery import AttemptOutcome, MessageStatus

    with db.cursor() as cur:
        endpoint_id = customer_endpoint(db, "https://receiver.example/dead", messages=2)
        first, second = delivery.claim_due(cur, batch_size=10, lease_s=60)
        now = datetime.now(UTC)
        result = delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(first.lease, endpoint_id, MessageStatus.DELIVERED, 1, now, 200),
                AttemptOutcome(
                    second.lease,
                    endpoint_id,
                    MessageStatus.DEAD_LETTER,
                    1,
                    now,
                    500,
                    error_class="http_500",
                ),
            ],
            base_cooldown_s=300.0,
            max_cooldown_s=3600.0,
        )

    assert result.written_ids == {first.message_id, second.message_id}
    assert result.transitions == ()
    [exhausted] = of_type(db, "message.attempt.exhausted")
    assert_documented("message.attempt.exhausted", exhausted)
    assert exhausted["message_id"] == second.message_id
    assert exhausted["last_attempt"]["status_code"] == 500
    assert exhausted["last_attempt"]["error_class"] == "http_500"
    assert of_type(db, "endpoint.failing") == []


def test_an_endpoint_disabled_by_a_call_without_outcomes_is_reported(db: Database) -> None:
    """A call that only disables an endpoint (no outcome, no summary) disables and reports it."""
    from tidings.dal import delivery

    endpoint_id = customer_endpoint(db, "https://receiver.example/gone", messages=0)
    with db.cursor() as cur:
        result = delivery.record_outcomes(
            cur, [], [], [(endpoint_id, "410 Gone")], base_cooldown_s=300.0, max_cooldown_s=3600.0
        )
        cur.execute("SELECT enabled FROM tidings.endpoints WHERE id = %s", (endpoint_id,))
        (enabled,) = cur.fetchone()

    assert result.disabled_endpoint_ids == {endpoint_id}
    assert enabled is False
    [disabled] = of_type(db, "endpoint.disabled")
    assert (disabled["endpoint_id"], disabled["detail"]) == (endpoint_id, "410 Gone")
