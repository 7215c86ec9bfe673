"""Operational events across crashes: the runtime is SIGKILLed twice while endpoints answer 410
and messages exhaust their attempts. Afterwards there is exactly one message.attempt.exhausted
for every message an attempt dead-lettered and one endpoint.disabled for every endpoint a 410
disabled, none for a change that did not happen (each is written in the change's own
transaction), and the operator's endpoint, subscribed to those two types, received every one,
signed.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.e2e.conftest import count_where, progress_table, wait_until
from tests.e2e.test_zero_loss import FAULT_SETTINGS, Runtime
from tests.support.secrets import secrets_keyring
from tests.support.webhooks import standard_verifier
from tidings.config import Settings
from tidings.dal.connection import Database, fetch_dicts
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.delivery.attempt import webhook_id
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import ANY_PORT, LOOPBACK_NETWORKS
from tidings.logic.endpoints import create_endpoint

GONE_ENDPOINTS = 20
DEAD_ENDPOINTS = 20
MESSAGES_PER_DEAD_ENDPOINT = 3
SETTINGS = {**FAULT_SETTINGS, "TIDINGS_MAX_ATTEMPTS": "3"}
OPERATIONAL = Settings().operational_application
CUSTOMER = "m.endpoint_id IN (SELECT id FROM tidings.endpoints WHERE app_id = 1)"


def _events(db: Database, event_type: str) -> list[dict[str, object]]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT ev.payload FROM tidings.events ev"
            " JOIN tidings.applications a ON a.id = ev.app_id"
            " WHERE a.uid = %s AND ev.event_type = %s",
            (OPERATIONAL, event_type),
        )
        return [row["payload"] for row in fetch_dicts(cur)]


@pytest.mark.slow
def test_every_change_is_reported_exactly_once_across_kills(
    database_url: str, tmp_path: Path
) -> None:
    settings = Settings.from_env(SETTINGS, database_url=database_url).replace(
        allowed_networks=LOOPBACK_NETWORKS, endpoint_ports=ANY_PORT
    )
    receivers = Receivers(
        (Kind.HEALTHY, Kind.GONE, Kind.DEAD), verifier=standard_verifier, seed=24
    ).start()
    db = Database(database_url)
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.applications WHERE uid = %s", (OPERATIONAL,))
        operational_id = int(cur.fetchone()[0])  # type: ignore[index]
    operator = create_endpoint(
        db,
        keyring=secrets_keyring(),
        url=receivers.url(Kind.HEALTHY),
        event_types=["endpoint.disabled", "message.attempt.exhausted"],
        settings=settings,
        app_id=operational_id,
    )
    receivers.register_secret(Kind.HEALTHY, operator.secret)
    gone, dead = [], []
    for n in range(GONE_ENDPOINTS + DEAD_ENDPOINTS):
        kind = Kind.GONE if n < GONE_ENDPOINTS else Kind.DEAD
        created = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=receivers.url(kind) + f"?n={n}",
            event_types=[f"to.{n}"],
            settings=settings,
        )
        (gone if kind is Kind.GONE else dead).append(created.id)
        count = 1 if kind is Kind.GONE else MESSAGES_PER_DEAD_ENDPOINT
        batch = [DemoEvent(f"to.{n}", f"e-{n}-{i}", {"i": i}) for i in range(count)]
        db.run(lambda cur, batch=batch: enqueue_events(cur, batch), transaction=True)
    total = GONE_ENDPOINTS + DEAD_ENDPOINTS * MESSAGES_PER_DEAD_ENDPOINT

    runtime = Runtime(database_url, tmp_path)
    runtime.env.update(SETTINGS)
    runtime.start()
    try:
        wait_until(
            lambda: count_where(db, f"{CUSTOMER} AND m.status = 'dead_letter'") >= total * 0.25,
            120,
            "a quarter dead-lettered",
        )
        runtime.kill()
        runtime.start()
        wait_until(
            lambda: count_where(db, f"{CUSTOMER} AND m.status = 'dead_letter'") >= total * 0.6,
            120,
            "three fifths dead-lettered",
        )
        runtime.kill()
        runtime.start()
        wait_until(
            lambda: (
                count_where(db, "m.status NOT IN ('delivered', 'dead_letter')") == 0
                and count_where(db, f"{CUSTOMER} AND m.status = 'dead_letter'") == total
            ),
            180,
            "every message settled",
            lambda: progress_table(db),
        )
        assert runtime.stop() == 0, runtime.log()
    finally:
        if runtime.alive():
            runtime.kill()
        receivers.stop()

    with db.cursor() as cur:
        cur.execute(f"SELECT m.id FROM tidings.messages m WHERE {CUSTOMER} AND m.attempts > 0")
        dead_by_attempt = {int(row[0]) for row in cur.fetchall()}
        cur.execute(
            "SELECT m.id, m.status::text FROM tidings.messages m WHERE m.endpoint_id = %s",
            (operator.id,),
        )
        operational_messages = cur.fetchall()
    exhausted = Counter(int(p["message_id"]) for p in _events(db, "message.attempt.exhausted"))  # type: ignore[call-overload]
    disabled = Counter(int(p["endpoint_id"]) for p in _events(db, "endpoint.disabled"))  # type: ignore[call-overload]
    db.close()

    assert len(dead_by_attempt) == total
    assert exhausted == Counter(dead_by_attempt)
    assert disabled == Counter(gone)
    # The operator's endpoint got each of them, signed.
    assert len(operational_messages) == total + GONE_ENDPOINTS
    assert {status for _, status in operational_messages} == {"delivered"}
    tally = receivers.snapshot()[Kind.HEALTHY]
    assert {webhook_id(message_id) for message_id, _ in operational_messages} <= set(tally.accepted)
    assert tally.bad_signatures == 0
