"""Every route against its OpenAPI document, with generated and hostile input.

For any request: no 5xx; the status is one the document lists for the operation (or 404 for a
path no route matches); an error has the documented shape and no internals; a success body
validates against the documented model; and a refused request writes nothing.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import quote

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.api.conftest import Api, api_event
from tests.support.seed import make_endpoint, seed_messages
from tidings.api import models
from tidings.api.app import handle
from tidings.cli.openapi import document
from tidings.dal.connection import Database

DOC = json.loads(document())
TABLES = ("events", "messages", "endpoints", "subscriptions")
LEAKS = ("Traceback", "psycopg2", "SELECT ", "INSERT ", "UPDATE ", "CONTEXT", "PL/pgSQL", 'File "')

SQL_LOOKING = [
    "'; DROP TABLE tidings.events; --",
    "1 OR 1=1",
    '" OR ""="',
    "$$; SELECT pg_sleep(10); $$",
    "%(payload)s",
    "%s%s%s",
    "../../etc/passwd",
]
NASTY_TEXT = st.one_of(
    st.sampled_from([*SQL_LOOKING, "\x00", "a\x00b", "\ud800", "\udfff", "", " ", "é" * 300]),
    st.text(max_size=30),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=190, max_size=210),
    st.just("x" * 300_000),
)
NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.sampled_from([0, -1, 1, 2**63 - 1, 2**63, 10**30]),
    st.floats(allow_nan=True, allow_infinity=True),
)
json_leaf = st.one_of(st.none(), st.booleans(), NUMBERS, NASTY_TEXT)
json_value = st.recursive(
    json_leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(NASTY_TEXT, inner, max_size=4)
    ),
    max_leaves=12,
)
ids = st.one_of(st.integers(1, 6), NUMBERS, NASTY_TEXT, st.none())
id_lists = st.one_of(st.lists(ids, max_size=4), json_value)


def deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": [value]}
    return value


payloads = st.one_of(
    json_value,
    st.fixed_dictionaries({"order": st.integers(0, 100), "note": NASTY_TEXT}),
    st.integers(30, 200).map(deep),
)
valid_events = st.fixed_dictionaries(
    {
        "event_type": st.sampled_from(["order.paid", "user.new", "lonely"]),
        "payload": st.one_of(
            st.fixed_dictionaries({"order": st.integers(0, 100)}),
            st.lists(st.integers(), max_size=3),
            st.text(max_size=10),
        ),
    },
    optional={
        "event_id": st.sampled_from(["k1", "k2", "k3"]),
        "endpoint_ids": st.lists(st.integers(1, 3), min_size=1, max_size=3),
    },
)
valid_endpoints = st.fixed_dictionaries(
    {"url": st.just("https://93.184.215.14/hook")},
    optional={
        "description": st.text(max_size=20),
        "event_types": st.lists(st.sampled_from(["order.paid", "*"]), min_size=1, max_size=2),
        "rate_limit_per_s": st.floats(0.5, 100),
        "max_attempts": st.integers(1, 100),
        "timeout_ms": st.integers(100, 60_000),
    },
)
valid_replays = st.one_of(
    st.fixed_dictionaries({"message_ids": st.lists(st.integers(1, 10), min_size=1, max_size=4)}),
    st.fixed_dictionaries({"endpoint_id": st.integers(1, 4)}),
    st.just({"since": "2020-01-01T00:00:00Z"}),
)


def mutated(valid: st.SearchStrategy[dict], hostile: st.SearchStrategy[dict]) -> Any:
    """Mostly well-formed bodies with one or two fields swapped for hostile values."""

    @st.composite
    def swap(draw: st.DrawFn) -> dict:
        body = dict(draw(valid))
        bad = draw(hostile)
        for key in draw(st.lists(st.sampled_from(sorted(bad) or ["x"]), max_size=2)):
            if key in bad:
                body[key] = bad[key]
        return body

    return st.one_of(valid, swap(), hostile)


event_bodies = st.fixed_dictionaries(
    {
        "event_type": st.one_of(st.sampled_from(["order.paid", "user.new"]), NASTY_TEXT, NUMBERS),
        "payload": payloads,
    },
    optional={
        "event_id": st.one_of(st.sampled_from(["k1", "k2"]), NASTY_TEXT, json_value),
        "endpoint_ids": id_lists,
        "unexpected": json_value,
    },
)
endpoint_bodies = st.fixed_dictionaries(
    {},
    optional={
        "url": st.one_of(
            st.sampled_from(
                [
                    "https://93.184.215.14/hook",
                    "http://10.0.0.1/",
                    "https://u:p@93.184.215.14/",
                    "javascript:alert(1)",
                    "https://93.184.215.14/" + "a" * 3000,
                    "http://[::ffff:127.0.0.1]/",
                    "https://93.184.215.14/'; DROP TABLE tidings.endpoints; --",
                ]
            ),
            NASTY_TEXT,
        ),
        "description": st.one_of(NASTY_TEXT, json_value),
        "event_types": st.one_of(st.lists(NASTY_TEXT, max_size=3), json_value),
        "rate_limit_per_s": st.one_of(NUMBERS, json_value),
        "max_attempts": st.one_of(NUMBERS, json_value),
        "timeout_ms": st.one_of(NUMBERS, json_value),
        "enabled": st.one_of(st.booleans(), json_value),
    },
)
replay_bodies = st.fixed_dictionaries(
    {},
    optional={
        "message_ids": id_lists,
        "endpoint_id": ids,
        "since": st.one_of(st.sampled_from(["2026-01-01T00:00:00Z", "yesterday"]), json_value),
        "until": st.one_of(st.sampled_from(["2030-01-01T00:00:00+02:00"]), json_value),
    },
)
event_bodies = mutated(valid_events, event_bodies)
endpoint_bodies = mutated(valid_endpoints, endpoint_bodies)
replay_bodies = mutated(valid_replays, replay_bodies)
# (method, documented path, body strategy or None)
OPERATIONS: list[tuple[str, str, Any]] = [
    ("POST", "/v1/events", event_bodies),
    (
        "POST",
        "/v1/events/batch",
        st.fixed_dictionaries({"events": st.lists(event_bodies, min_size=1, max_size=5)}),
    ),
    ("POST", "/v1/events/batch", st.fixed_dictionaries({"events": json_value})),
    ("GET", "/v1/messages/{message_id}", None),
    ("GET", "/v1/messages", None),
    ("POST", "/v1/endpoints", endpoint_bodies),
    ("GET", "/v1/endpoints", None),
    ("GET", "/v1/endpoints/{endpoint_id}", None),
    ("PATCH", "/v1/endpoints/{endpoint_id}", endpoint_bodies),
    ("DELETE", "/v1/endpoints/{endpoint_id}", None),
    ("POST", "/v1/endpoints/{endpoint_id}/rotate-secret", None),
    ("GET", "/v1/endpoints/{endpoint_id}/health", None),
    ("POST", "/v1/dead-letters/replay", replay_bodies),
]
path_values = st.one_of(
    st.integers(1, 6).map(str),
    NUMBERS.map(str),
    st.text(min_size=1, max_size=20).map(lambda t: quote(t, safe="")),
    st.sampled_from(["0", "-1", "1.5", "1e3", "%00", "1;DROP", "99999999999999999999"]),
)
query_values = st.dictionaries(
    st.sampled_from(["status", "endpoint_id", "event_type", "cursor", "limit", "other"]),
    st.one_of(
        st.sampled_from(["pending", "dead_letter", "1", "100", "0", "101", "aWQ6MQ", "aWQ6eA"]),
        st.text(max_size=20),
        NUMBERS.map(str),
    ),
    max_size=4,
)


def raw_bodies() -> st.SearchStrategy[tuple[str, bool]]:
    """Bodies that are not plain JSON: broken, non-UTF-8, deeply nested, oversized."""
    return st.one_of(
        st.sampled_from(
            [
                ('{"event_type": ', False),
                ("[" * 50_000 + "]" * 50_000, False),
                ('{"payload": ' + "[" * 5_000 + "]" * 5_000 + ', "event_type": "t"}', False),
                ('{"event_type": "t", "payload": ' + "7" * 6000 + "}", False),
                ('{"event_type": "t", "payload": NaN}', False),
                ('{"event_type": "t", "payload": {"a": "\\ud800"}}', False),
                ('{"event_type": "t", "payload": {"a": "\\u0000"}}', False),
                ("%%% not base64", True),
                ("", False),
                ("null", False),
            ]
        ),
        st.binary(max_size=64).map(lambda b: (base64.b64encode(b).decode(), True)),
        st.binary(max_size=64).map(
            lambda b: (base64.b64encode(b'{"event_type": "' + b + b'"}').decode(), True)
        ),
    )


def seed_once(db: Database) -> None:
    """Endpoints 1-3, a few messages and dead letters, so ids in requests often exist."""
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.endpoints")
        row = cur.fetchone()
        if row is not None and row[0] > 0:
            return
        for types in (["*"], ["order.paid"], ["user.new"]):
            make_endpoint(cur, url="https://93.184.215.14/hook", event_types=types)
        seed_messages(cur, 1, 6)
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now()"
            " WHERE id <= 3"
        )


def counts(db: Database) -> dict[str, int]:
    with db.cursor() as cur:
        found = {}
        for table in TABLES:
            cur.execute(f"SELECT count(*) FROM tidings.{table}")
            row = cur.fetchone()
            assert row is not None
            found[table] = int(row[0])
        return found


def check_reply(
    method: str, template: str, path_params: dict[str, str], response: dict, sent: str = ""
) -> int:
    status = int(response["statusCode"])
    raw = response.get("body") or ""
    assert status < 500, raw
    for leak in LEAKS:
        # A reply may echo what the caller sent, SQL-looking text included; nothing else.
        if leak not in sent:
            assert leak not in raw, raw
    documented = DOC["paths"][template][method.lower()]["responses"]
    if status == 404 and any(not v.isdigit() for v in path_params.values()):
        documented = {**documented, "404": {}}
    assert str(status) in documented, (status, raw)
    if status == 204:
        assert raw == ""
        return status
    body = json.loads(raw)
    if status >= 400:
        error = models.ErrorBody.model_validate(body).error
        assert error.code and error.message
        return status
    ref = documented[str(status)]["content"]["application/json"]["schema"]["$ref"]
    getattr(models, ref.rsplit("/", 1)[1]).model_validate(body)
    return status


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_input_breaks_the_api(api: Api, db: Database, data: st.DataObject) -> None:
    seed_once(db)
    method, template, bodies = data.draw(st.sampled_from(OPERATIONS), label="operation")
    params = {
        name: data.draw(path_values, label=name)
        for name in ("message_id", "endpoint_id")
        if "{" + name + "}" in template
    }
    path = template.format(**params)
    query = data.draw(query_values, label="query") if method == "GET" else None
    raw: str | None = None
    base64_encoded = False
    if bodies is not None:
        if data.draw(st.integers(0, 4), label="raw?") == 0:
            raw, base64_encoded = data.draw(raw_bodies(), label="raw body")
        else:
            raw = json.dumps(data.draw(bodies, label="body"), allow_nan=True)
    before = counts(db)
    event = api_event(method, path, raw_body=raw, base64_encoded=base64_encoded, query=query)
    status = check_reply(
        method,
        template,
        params,
        handle(event, None),  # type: ignore[arg-type]
        sent=json.dumps(params) + (raw or "") + json.dumps(query or {}),
    )
    after = counts(db)
    if status >= 400:
        assert after == before, (status, path)
    elif method == "GET":
        assert after == before
