"""2,000 events to receivers of every demo kind, through the dev runtime and the real handlers.

Every message ends as its receiver dictates, a healthy receiver never gets a message twice, and
every signature verifies with the reference Standard Webhooks library.
"""

from __future__ import annotations

import random
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import message_states, progress_table, wait_until
from tests.support.secrets import secrets_keyring
from tests.support.webhooks import standard_verifier
from tidings.dal.connection import Database
from tidings.dal.operator import DemoEvent, enqueue_events, unsettled_messages
from tidings.local.demo import DEMO_SETTINGS
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import DevRuntime, RuntimeConfig, dev_settings

EVENTS = 1004
MIX = {
    Kind.HEALTHY: 471,
    Kind.SLOW: 100,
    Kind.FLAKY: 200,
    Kind.RATE_LIMITED: 200,
    Kind.GONE: 25,
    # Once its circuit opens, a dead endpoint fails one probe at a time: few messages, few tries.
    Kind.DEAD: 8,
}
# The deprecated attempt limit still works: the demo's schedule cut to three attempts.
DEAD_MAX_ATTEMPTS = 3


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    found = Receivers(tuple(MIX), verifier=standard_verifier, seed=11).start()
    yield found
    found.stop()


@pytest.mark.slow
def test_every_message_ends_as_its_receiver_dictates(
    database_url: str, receivers: Receivers
) -> None:
    from tidings.delivery.attempt import webhook_id
    from tidings.logic.endpoints import create_endpoint

    # The demo's short delays (four attempts); a timeout above the slow receiver's longest answer.
    settings = dev_settings(
        {**DEMO_SETTINGS, "TIDINGS_HTTP_TIMEOUT_S": "12"},
        database_url=database_url,
    )
    workdir = Path(tempfile.mkdtemp(prefix="tidings-e2e-"))
    runtime = DevRuntime(
        settings,
        RuntimeConfig(
            data_dir=workdir,
            serve_api=False,
            sender_environments=6,
            intervals_s={"percentiles": 5.0, "health_monitor": 5.0},
            alerts_stream=None,
            drain_timeout_s=5.0,
        ),
    )
    db = Database(database_url)
    kind_of: dict[int, Kind] = {}
    for kind in MIX:
        created = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=receivers.url(kind),
            event_types=[f"e2e.{kind.value}"],
            rate_limit_per_s=22.0 if kind is Kind.RATE_LIMITED else None,
            max_attempts=DEAD_MAX_ATTEMPTS if kind is Kind.DEAD else None,
            settings=settings,
        )
        receivers.register_secret(kind, created.secret)
        kind_of[created.id] = kind
    rng = random.Random(5)
    events = [
        DemoEvent(f"e2e.{kind.value}", f"{kind.value}-{n}", {"n": n})
        for kind, count in MIX.items()
        for n in range(count)
    ]
    rng.shuffle(events)
    assert len(events) == EVENTS
    runtime.start()
    try:
        for start in range(0, len(events), 200):
            batch = events[start : start + 200]
            db.run(lambda cur, batch=batch: enqueue_events(cur, batch), transaction=True)
        wait_until(
            lambda: db.run(unsettled_messages) == 0,
            200,
            "every message to settle",
            lambda: progress_table(db),
        )
    finally:
        runtime.stop()

    states = message_states(db)
    tallies = receivers.snapshot()
    by_kind: dict[Kind, Counter[str]] = {kind: Counter() for kind in MIX}
    for row in states:
        by_kind[kind_of[row["endpoint_id"]]][row["status"]] += 1

    # A gone endpoint is disabled by its first 410; events after that create no message, and
    # messages created before are held back, never attempted, until the health monitor turns
    # them into dead letters.
    assert by_kind[Kind.GONE]["dead_letter"] >= 1
    assert set(by_kind[Kind.GONE]) <= {"dead_letter", "pending"}
    assert {row["enabled"] for row in states if kind_of[row["endpoint_id"]] is Kind.GONE} == {False}
    assert by_kind[Kind.DEAD] == Counter({"dead_letter": MIX[Kind.DEAD]})
    assert by_kind[Kind.HEALTHY] == Counter({"delivered": MIX[Kind.HEALTHY]})
    assert by_kind[Kind.SLOW] == Counter({"delivered": MIX[Kind.SLOW]})
    for kind in (Kind.FLAKY, Kind.RATE_LIMITED):
        assert set(by_kind[kind]) <= {"delivered", "dead_letter"}
        assert sum(by_kind[kind].values()) == MIX[kind]
        assert by_kind[kind]["delivered"] > MIX[kind] // 2

    delivered_ids: dict[Kind, set[str]] = {kind: set() for kind in MIX}
    for row in states:
        if row["status"] == "delivered":
            delivered_ids[kind_of[row["endpoint_id"]]].add(webhook_id(row["id"]))
    for kind, tally in tallies.items():
        if kind is Kind.DEAD:
            continue
        # What the database calls delivered is exactly what the receiver accepted.
        assert set(tally.accepted) == delivered_ids[kind], kind
        assert tally.bad_signatures == 0, kind
        assert tally.unsigned == 0, kind
    assert tallies[Kind.HEALTHY].duplicates == 0
    assert max(tallies[Kind.HEALTHY].accepted.values()) == 1
    assert tallies[Kind.RATE_LIMITED].statuses[429] > 0
    db.close()
