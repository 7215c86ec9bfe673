"""Content filters and channels in tidings.enqueue_batch's fan-out: the compiled jsonpath decides
exactly as the reference evaluator does (a property test over generated filters and payloads),
hostile keys cannot change a filter's meaning, and channels route as documented."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support import filter_strategies as fs
from tests.support.seed import make_endpoint
from tidings.dal.connection import Database
from tidings.logic import filters


@pytest.fixture
def conn(database_url: str) -> Iterator[psycopg2.extensions.connection]:
    connection = psycopg2.connect(database_url)
    yield connection
    connection.close()


def _filtered_endpoint(
    cur: psycopg2.extensions.cursor,
    document: Any = None,
    *,
    channels: list[str] | None = None,
    event_types: tuple[str, ...] = ("*",),
) -> int:
    # No signing secret: nothing is delivered here, only fanned out.
    compiled = None if document is None else filters.check_filter(document)
    cur.execute(
        "INSERT INTO tidings.endpoints (url, filter, filter_path, channels)"
        " VALUES ('https://receiver.example/hook', %s::jsonb, %s::jsonpath, %s::text[])"
        " RETURNING id",
        (
            None if compiled is None else json.dumps(compiled.document),
            None if compiled is None else compiled.jsonpath,
            channels,
        ),
    )
    endpoint_id = int(cur.fetchone()[0])
    cur.executemany(
        "INSERT INTO tidings.subscriptions (endpoint_id, app_id, event_type) VALUES (%s, 1, %s)",
        [(endpoint_id, t) for t in event_types],
    )
    return endpoint_id


def _receivers(cur: psycopg2.extensions.cursor, events: list[dict[str, Any]]) -> list[set[int]]:
    """The endpoints each event of one enqueue_batch call made a message for."""
    cur.execute(
        "SELECT b.item, b.message_ids FROM tidings.enqueue_batch(%s::jsonb) AS b ORDER BY 1",
        (json.dumps(events),),
    )
    found: list[set[int]] = []
    for _, message_ids in cur.fetchall():
        cur.execute(
            "SELECT endpoint_id FROM tidings.messages WHERE id = ANY(%s)", (list(message_ids),)
        )
        found.append({int(r[0]) for r in cur.fetchall()})
    return found


# Cases the generator reaches rarely, each a rule the documentation states: how deep a
# comparison looks into arrays, arrays of objects on a path, a root that is an array, values of
# other types, null, numbers written differently, and code-point order of strings.
_RULES = [
    ({"a": 5}, [({"a": [[5]]}, "t"), ({"a": [[[5]]]}, "t"), ({"a": [1, [2, 5]]}, "t")]),
    ({"a.b": 1}, [({"a": [{"b": 1}, {"b": 2}]}, "t"), ({"a": [[{"b": 1}]]}, "t")]),
    ({"a": 1}, [([{"a": 1}], "t"), ([[{"a": 1}]], "t"), (1, "t")]),
    ({"a": {"$ne": 1}}, [({"a": "1"}, "t"), ({}, "t"), ({"a": [1, 2]}, "t")]),
    ({"a": None}, [({"a": None}, "t"), ({}, "t"), ({"a": [None]}, "t"), ({"a": 0}, "t")]),
    ({"a": {"$gt": 1}}, [({"a": True}, "t"), ({"a": "2"}, "t"), ({"a": 1.0000001}, "t")]),
    ({"a": 1}, [({"a": 1.0}, "t"), ({"a": 10**20}, "t"), ({"a": True}, "t")]),
    ({"a": {"$lt": "z"}}, [({"a": "é"}, "t"), ({"a": "Z"}, "t"), ({"a": "😀"}, "t")]),
    ({"a": {"$exists": True}}, [({"a": None}, "t"), ({"a": []}, "t"), ({"b": 1}, "t")]),
    ({"$not": {"a": {"$gt": 1}}}, [({"a": "x"}, "t"), ({"a": [0, 2]}, "t")]),
]


def _with_rules(test: Callable[..., None]) -> Callable[..., None]:
    for document, events in _RULES:
        test = example(document=document, events=events)(test)
    return test


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    document=fs.filters,
    events=st.lists(
        st.tuples(
            st.one_of(fs.object_payloads, fs.payloads.filter(lambda p: p is not None)),
            st.sampled_from(fs.EVENT_TYPES),
        ),
        min_size=1,
        max_size=4,
    ),
)
@_with_rules
def test_the_fan_out_filters_as_the_reference_evaluator_does(
    conn: psycopg2.extensions.connection,
    document: Any,
    events: list[tuple[Any, str]],
) -> None:
    clause = filters.parse(document)
    try:
        with conn.cursor() as cur:
            unfiltered = _filtered_endpoint(cur)
            filtered = _filtered_endpoint(cur, document)
            sent = [{"event_type": t, "payload": p} for p, t in events]
            received = _receivers(cur, sent)
    finally:
        conn.rollback()
    for (payload, event_type), endpoints in zip(events, received, strict=True):
        # The payload as the database has it: its JSON text read back (floats as they print).
        expected = filters.matches(clause, json.loads(json.dumps(payload)), event_type)
        assert unfiltered in endpoints
        assert (filtered in endpoints) == expected, (
            document,
            payload,
            event_type,
            filters.compile_filter(clause),
        )


@pytest.mark.parametrize("key", fs.HOSTILE_KEYS[:-1])
def test_hostile_keys_are_only_keys(db: Database, key: str) -> None:
    path = fs.escaped(key)
    with db.cursor() as cur:
        exact = _filtered_endpoint(cur, {path: 1})
        other_value = _filtered_endpoint(cur, {path: 2})
        negated = _filtered_endpoint(cur, {path: {"$ne": 1}})
        received = _receivers(
            cur,
            [
                {"event_type": "t", "payload": {key: 1}},
                {"event_type": "t", "payload": {"other": 1, "a": {"b": 1}, "": 1}},
            ],
        )
    assert received[0] >= {exact} and not received[0] & {other_value, negated}
    assert exact not in received[1] and other_value not in received[1]
    assert negated in received[1]


def test_hostile_values_are_only_values(db: Database) -> None:
    hostile = '") || exists($) || ("'
    with db.cursor() as cur:
        endpoint = _filtered_endpoint(cur, {"a": hostile})
        received = _receivers(
            cur,
            [
                {"event_type": "t", "payload": {"a": "x"}},
                {"event_type": "t", "payload": {"a": hostile}},
            ],
        )
    assert [endpoint in r for r in received] == [False, True]


def test_a_filter_sees_the_event_type(db: Database) -> None:
    with db.cursor() as cur:
        paid = _filtered_endpoint(cur, {"$event_type": "order.paid", "total": {"$gte": 100}})
        not_paid = _filtered_endpoint(cur, {"$event_type": {"$ne": "order.paid"}})
        received = _receivers(
            cur,
            [
                {"event_type": "order.paid", "payload": {"total": 150}},
                {"event_type": "order.paid", "payload": {"total": 50}},
                {"event_type": "order.refunded", "payload": {"total": 150}},
            ],
        )
    assert [(paid in r, not_paid in r) for r in received] == [
        (True, False),
        (False, False),
        (False, True),
    ]


def test_an_endpoint_with_channels_gets_only_events_that_share_one(db: Database) -> None:
    with db.cursor() as cur:
        everything = _filtered_endpoint(cur)
        eu = _filtered_endpoint(cur, channels=["eu"])
        eu_or_us = _filtered_endpoint(cur, channels=["eu", "us"])
        received = _receivers(
            cur,
            [
                {"event_type": "t", "payload": 1},
                {"event_type": "t", "payload": 1, "channels": ["eu"]},
                {"event_type": "t", "payload": 1, "channels": ["us", "apac"]},
                {"event_type": "t", "payload": 1, "channels": []},
                {"event_type": "t", "payload": 1, "channels": None},
            ],
        )
        cur.execute("SELECT channels FROM tidings.events ORDER BY id")
        stored = sorted((row[0] for row in cur.fetchall()), key=str)
    assert received == [
        {everything},
        {everything, eu, eu_or_us},
        {everything, eu_or_us},
        {everything},
        {everything},
    ]
    assert stored == sorted([None, ["eu"], ["us", "apac"], None, None], key=str)


def test_channels_and_filters_go_with_the_types_and_not_with_named_endpoints(
    db: Database,
) -> None:
    with db.cursor() as cur:
        typed = _filtered_endpoint(cur, {"n": 1}, channels=["c"], event_types=("a",))
        received = _receivers(
            cur,
            [
                {"event_type": "a", "payload": {"n": 1}, "channels": ["c"]},
                {"event_type": "b", "payload": {"n": 1}, "channels": ["c"]},
                {"event_type": "a", "payload": {"n": 2}, "channels": ["c"]},
                # Named endpoints receive the event whatever their filter and channels.
                {"event_type": "b", "payload": {"n": 2}, "endpoint_ids": [typed]},
            ],
        )
    assert received == [{typed}, set(), set(), {typed}]


@pytest.mark.parametrize(
    "channels",
    [
        "eu",
        ["-eu"],
        ["eu", 1],
        [""],
        ["a" * 201],
        ["with space"],
        [f"c{i}" for i in range(11)],
        {"eu": True},
    ],
)
def test_bad_channels_are_refused_naming_the_field(db: Database, channels: Any) -> None:
    with db.cursor() as cur:
        make_endpoint(cur)
        with pytest.raises(psycopg2.Error) as refused:
            cur.execute(
                "SELECT * FROM tidings.enqueue_batch(%s::jsonb)",
                (
                    json.dumps(
                        [
                            {"event_type": "t", "payload": 1},
                            {"event_type": "t", "payload": 1, "channels": channels},
                        ]
                    ),
                ),
            )
        assert refused.value.pgcode == "22023"
        assert refused.value.diag.message_detail == "events[1].channels"
        cur.execute("SELECT count(*) FROM tidings.events")
        assert cur.fetchone() == (0,)


def test_every_application_uid_is_a_channel(db: Database) -> None:
    uid = "A" + "b.c_d:e-f" * 22  # 199 characters of every kind the uid syntax allows
    with db.cursor() as cur:
        cur.execute("INSERT INTO tidings.applications (uid, name) VALUES (%s, '')", (uid,))
        endpoint = _filtered_endpoint(cur, channels=[uid])
        received = _receivers(cur, [{"event_type": "t", "payload": 1, "channels": [uid]}])
    assert received == [{endpoint}]


def test_the_endpoints_table_refuses_a_filter_without_its_predicate(db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
        with pytest.raises(psycopg2.errors.CheckViolation):
            cur.execute("UPDATE tidings.endpoints SET filter = '{}' WHERE id = %s", (endpoint,))
        with pytest.raises(psycopg2.errors.CheckViolation):
            cur.execute(
                "UPDATE tidings.endpoints SET channels = '{\"bad name\"}' WHERE id = %s",
                (endpoint,),
            )
