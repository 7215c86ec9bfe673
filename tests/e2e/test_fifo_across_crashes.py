"""Ordered delivery across crashes: ``tidings dev`` is SIGKILLed twice while a FIFO endpoint's
eight lines (one per ordering key, one taking batches) are delivered to a receiver that fails
some messages before it takes them. Afterwards every message is delivered, and in every line no
message was sent before the one accepted before it had been taken: a kill leaves a head leased,
and the line waits for its lease to end and for the head to go again (a duplicate at worst,
never a message out of its turn)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.conftest import count_where, progress_table, wait_until
from tests.e2e.test_zero_loss import Runtime
from tests.support.fifo_receiver import running_fifo_receiver
from tests.support.secrets import secrets_keyring
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.runtime import ANY_PORT, LOOPBACK_NETWORKS
from tidings.logic.endpoints import create_endpoint
from tidings.logic.events import EventSpec, send_events

KEYS = [f"acct_{k}" for k in range(8)]
PER_KEY = 30


@pytest.mark.slow
def test_every_line_keeps_its_order_when_the_runtime_is_killed(
    database_url: str, tmp_path: Path
) -> None:
    settings = Settings.from_env({}, database_url=database_url).replace(
        allowed_networks=LOOPBACK_NETWORKS, endpoint_ports=ANY_PORT
    )
    db = Database(database_url)
    with running_fifo_receiver(latency_ms=5) as receiver:
        single = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=receiver.url + "?lines=single",
            event_types=["ledger.entry"],
            ordering="fifo",
            retry_schedule=[1, 1, 1, 1, 1, 1, 1, 1],
            settings=settings,
        )
        batched = create_endpoint(
            db,
            keyring=secrets_keyring(),
            url=receiver.url + "?lines=batched",
            event_types=["ledger.batch"],
            ordering="fifo",
            fifo_batch_size=5,
            retry_schedule=[1, 1, 1, 1, 1, 1, 1, 1],
            settings=settings,
        )
        order: dict[tuple[int, str], list[int]] = {}
        for round_ in range(PER_KEY):
            specs = [
                EventSpec(
                    "ledger.batch" if key == KEYS[0] else "ledger.entry",
                    {"round": round_, "key": key},
                    f"{key}.{round_}",
                    ordering_key=key,
                )
                for key in KEYS
            ]
            for spec, result in zip(specs, send_events(db, specs, settings=settings), strict=True):
                endpoint = batched.id if spec.event_type == "ledger.batch" else single.id
                order.setdefault((endpoint, spec.ordering_key or ""), []).extend(result.message_ids)
        every = [i for line in order.values() for i in line]
        for message_id in every[5::23]:
            receiver.fail_times[message_id] = 1
        total = len(every)

        runtime = Runtime(database_url, tmp_path)
        runtime.start()
        try:
            wait_until(lambda: len(set(receiver.taken())) >= total * 0.25, 120, "a quarter")
            runtime.kill()
            runtime.start()
            wait_until(lambda: len(set(receiver.taken())) >= total * 0.6, 180, "three fifths")
            runtime.kill()
            runtime.start()
            wait_until(
                lambda: count_where(db, "m.status <> 'delivered'") == 0,
                240,
                "every message to be delivered",
                lambda: progress_table(db),
            )
            assert runtime.stop() == 0, runtime.log()
        finally:
            if runtime.alive():
                runtime.kill()
        db.close()

        line_of = {i: line for line, ids in order.items() for i in ids}
        taken_at: dict[int, float] = {}
        for arrival in receiver.arrivals:
            line = order[line_of[arrival.message_ids[0]]]
            place = line.index(arrival.message_ids[0])
            # Every message before the request's first one had been taken before it arrived.
            late = [i for i in line[:place] if taken_at.get(i, arrival.at + 1) >= arrival.at]
            assert not late, (arrival.message_ids, late)
            # A batch carries consecutive messages of its line.
            assert list(arrival.message_ids) == line[place : place + len(arrival.message_ids)]
            if arrival.status == 200:
                for i in arrival.message_ids:
                    taken_at.setdefault(i, arrival.answered_at)
        assert set(taken_at) == set(every)
        # The failures were met, and the batched line went in batches.
        assert any(a.status == 500 for a in receiver.arrivals)
        assert any(len(a.message_ids) > 1 for a in receiver.arrivals)
