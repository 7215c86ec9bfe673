"""A slow receiver costs its own messages only, through the dev runtime with the deployment's
settings (its default sender environments, batch sizes, concurrency and 15 s HTTP timeout).

A healthy endpoint and one that answers ``200`` after 2 s each get 200 events, interleaved, in
one transaction. Every healthy delivery must complete before the slow endpoint's tenth does
(``delivered_at``, the database's clock), or while fewer than ten of the slow endpoint's
deliveries have completed.

Rates and costs are ``bench/isolation.py``'s to measure; this asserts only an order that no
machine's speed can blur. Alone, 200 deliveries take a fraction of a second; the slow endpoint
needs 2 s for each answer. Where a sender batch mixes the two endpoints and lasts as long as its
slowest request, every healthy delivery waits 2 s for a slow neighbour, and the slow endpoint's
tenth delivery lands within the first few seconds, while most healthy messages are still waiting.
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import progress_table, wait_until
from tests.support.secrets import secrets_keyring
from tests.support.webhooks import standard_verifier
from tidings.dal.connection import Database
from tidings.dal.operator import DemoEvent, enqueue_events
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import DevRuntime, RuntimeConfig, dev_settings

EVENTS = 200
SLOW_ANSWER_S = 2.0
# The slow endpoint's deliveries the healthy endpoint must finish before.
SLOW_DELIVERIES = 10
WAIT_S = 45


def _delivered_at(db: Database, endpoint_id: int) -> list[datetime]:
    """When each delivered message of the endpoint was recorded delivered, earliest first."""

    def read(cur: Any) -> list[datetime]:
        cur.execute(
            "SELECT delivered_at FROM tidings.messages"
            " WHERE endpoint_id = %s AND status = 'delivered' ORDER BY delivered_at",
            (endpoint_id,),
        )
        return [row[0] for row in cur.fetchall()]

    return db.run(read)


@pytest.mark.slow
def test_a_healthy_endpoint_finishes_before_a_slow_neighbours_tenth_delivery(
    database_url: str, tmp_path: Path
) -> None:
    from tidings.logic.endpoints import create_endpoint

    healthy_receiver = Receivers((Kind.HEALTHY,), verifier=standard_verifier).start()
    slow_receiver = Receivers(
        (Kind.HEALTHY,), verifier=standard_verifier, latency_s=SLOW_ANSWER_S
    ).start()
    # The deployment's settings, as `tidings dev` runs them (none taken from this environment).
    settings = dev_settings({}, database_url=database_url)
    db = Database(database_url)
    ids: dict[str, int] = {}
    for name, receivers in (("healthy", healthy_receiver), ("slow", slow_receiver)):
        created = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=receivers.url(Kind.HEALTHY),
            event_types=[f"isolation.{name}"],
            settings=settings,
        )
        receivers.register_secret(Kind.HEALTHY, created.secret)
        ids[name] = created.id
    runtime = DevRuntime(
        settings,
        RuntimeConfig(
            data_dir=tmp_path / "data",
            serve_api=False,
            alerts_stream=None,
            # What is left at the end is the slow endpoint's; batches in flight still finish.
            drain_timeout_s=0.0,
        ),
    )
    events = [
        DemoEvent(f"isolation.{name}", f"{name}-{n}", {"n": n})
        for n in range(EVENTS)
        for name in ("healthy", "slow")
    ]
    runtime.start()
    try:
        db.run(lambda cur: enqueue_events(cur, events), transaction=True)
        wait_until(
            lambda: len(_delivered_at(db, ids["healthy"])) == EVENTS,
            WAIT_S,
            f"all {EVENTS} healthy deliveries",
            lambda: progress_table(db),
        )
        # A slow record that began before the healthy endpoint's last one has committed by now.
        time.sleep(1)
    finally:
        runtime.stop()
        healthy_receiver.stop()
        slow_receiver.stop()

    healthy = _delivered_at(db, ids["healthy"])
    slow = _delivered_at(db, ids["slow"])
    db.close()
    assert len(healthy) == EVENTS
    tally = healthy_receiver.snapshot()[Kind.HEALTHY]
    assert len(tally.accepted) == EVENTS
    assert tally.bad_signatures == 0
    if len(slow) < SLOW_DELIVERIES:
        return  # its tenth delivery is still to come: the healthy endpoint finished first
    tenth_slow = slow[SLOW_DELIVERIES - 1]
    late = [at for at in healthy if at >= tenth_slow]
    if late:
        pytest.fail(
            f"{len(late)} of {EVENTS} healthy deliveries completed after the slow endpoint's"
            f" delivery number {SLOW_DELIVERIES} ({tenth_slow.isoformat()}); the last at"
            f" {healthy[-1].isoformat()}, the first slow one at {slow[0].isoformat()}"
        )
