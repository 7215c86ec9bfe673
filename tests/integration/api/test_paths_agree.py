"""The batch path and the single-event path (tidings.enqueue's) give the same outcomes."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.seed import make_endpoint
from tidings.dal.connection import Database
from tidings.logic import events
from tidings.logic.errors import InvalidInput

TYPES = ["order.paid", "order.new", "user.new"]

specs = st.lists(
    st.builds(
        events.EventSpec,
        event_type=st.sampled_from(TYPES),
        payload=st.fixed_dictionaries({"n": st.integers(0, 9)}),
        event_id=st.one_of(st.none(), st.sampled_from(["a", "b", "c"])),
        endpoint_ids=st.one_of(st.none(), st.lists(st.sampled_from([1, 2, 3, 4, 99]), max_size=3)),
    ),
    min_size=1,
    max_size=12,
)


def outcome(db: Database, results: list[events.SendResult]) -> list[tuple[bool, list[int]]]:
    """Per event: created or not, and the endpoints its messages go to (ids differ per run)."""
    shaped = []
    with db.cursor() as cur:
        for result in results:
            cur.execute(
                "SELECT coalesce(array_agg(endpoint_id ORDER BY endpoint_id), '{}')"
                " FROM tidings.messages WHERE id = ANY(%s)",
                (result.message_ids,),
            )
            row = cur.fetchone()
            assert row is not None
            shaped.append((result.created, list(row[0])))
    return shaped


def rows(db: Database) -> list[Any]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT ev.event_type, ev.payload, m.endpoint_id FROM tidings.events ev"
            " LEFT JOIN tidings.messages m ON m.event_ref = ev.id"
            " WHERE ev.event_id IN ('a', 'b', 'c')"
            " ORDER BY ev.event_type, ev.payload::text, m.endpoint_id"
        )
        return cur.fetchall()


def clear(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute("TRUNCATE tidings.queue, tidings.message_rows, tidings.events")


def test_both_paths_agree(db: Database) -> None:
    with db.cursor() as cur:
        make_endpoint(cur, event_types=["order.paid"])
        make_endpoint(cur, event_types=["*"])
        make_endpoint(cur, event_types=["user.new", "order.new"])
        make_endpoint(cur, event_types=["*"], enabled=False)

    @settings(
        max_examples=60,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(batch=specs)
    def check(batch: list[events.EventSpec]) -> None:
        clear(db)
        single: list[events.SendResult] | InvalidInput = []
        try:
            single_results = [
                events.send_event(
                    db,
                    event_type=s.event_type,
                    payload=s.payload,
                    event_id=s.event_id,
                    endpoint_ids=s.endpoint_ids,
                )
                for s in batch
            ]
            single = single_results
        except InvalidInput as exc:
            single = exc
        single_shape = single if isinstance(single, InvalidInput) else outcome(db, single)
        single_rows = rows(db)
        clear(db)
        try:
            batched: Any = outcome(db, events.send_events(db, batch))
        except InvalidInput as exc:
            batched = exc
        if isinstance(single_shape, InvalidInput):
            # The batch refuses as a whole what the single path refused partway through.
            assert isinstance(batched, InvalidInput)
            assert batched.code == single_shape.code == "unknown_endpoint"
            assert rows(db) == []
        else:
            assert batched == single_shape
            assert rows(db) == single_rows

    check()
