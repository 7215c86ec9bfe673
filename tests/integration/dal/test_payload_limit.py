"""The payload limit on the SQL path: a producer's tidings.enqueue and enqueue_batch are held to
the API's limit (one setting, TIDINGS_MAX_PAYLOAD_BYTES, which the migrator writes into
tidings.settings), measured as the API measures it, with SQLSTATE 54000 naming the field."""

from __future__ import annotations

import json
from collections.abc import Iterator

import psycopg2
import psycopg2.extensions
import pytest

from tests.integration.dal.test_database_roles import Members, members  # noqa: F401 - fixture
from tests.support.secrets import secrets_keyring
from tests.support.seed import make_endpoint
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.deployment import PRODUCER_ROLE
from tidings.logic.schema import prepare_database

DEFAULT_LIMIT = Settings().max_payload_bytes
PROGRAM_LIMIT_EXCEEDED = "54000"


@pytest.fixture
def admin(database_url: str) -> Iterator[psycopg2.extensions.cursor]:
    conn = psycopg2.connect(database_url)
    conn.autocommit = True
    yield conn.cursor()
    conn.close()


@pytest.fixture
def producer(
    members: Members,  # noqa: F811 - the fixture imported above
    database_url: str,
    admin: psycopg2.extensions.cursor,
) -> Iterator[psycopg2.extensions.cursor]:
    """A login member of the producers' role, autocommit, with one endpoint subscribed to all."""
    make_endpoint(admin, event_types=("*",))
    conn = members.connect(database_url, PRODUCER_ROLE)
    conn.autocommit = True
    yield conn.cursor()
    conn.close()


def set_limit(admin: psycopg2.extensions.cursor, limit: int) -> None:
    admin.execute(
        "UPDATE tidings.settings SET value = %s WHERE name = 'max_payload_bytes'", (limit,)
    )


def events_count(admin: psycopg2.extensions.cursor) -> int:
    admin.execute("SELECT count(*) FROM tidings.events")
    row = admin.fetchone()
    assert row is not None
    return int(row[0])


def a_string_of_bytes(size: int) -> str:
    """A JSON string payload whose compact text is ``size`` bytes (its two quotes included)."""
    return json.dumps("x" * (size - 2))


def test_the_migrations_hold_the_settings_default_until_the_migrator_writes_its_own(
    db: Database,
) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT value FROM tidings.settings WHERE name = 'max_payload_bytes'")
        assert cur.fetchone() == (DEFAULT_LIMIT,)


def test_a_producer_login_cannot_enqueue_a_payload_over_the_limit(
    producer: psycopg2.extensions.cursor, admin: psycopg2.extensions.cursor
) -> None:
    # The case: 5 MB through tidings.enqueue.
    with pytest.raises(psycopg2.Error) as caught:
        producer.execute(
            "SELECT * FROM tidings.enqueue('order.created', %s, 'big')",
            (a_string_of_bytes(5_000_000),),
        )
    error = caught.value
    assert error.pgcode == PROGRAM_LIMIT_EXCEEDED
    assert error.diag.message_primary == (
        f"tidings.enqueue: payload is over {2 * DEFAULT_LIMIT} bytes; "
        f"the limit is {DEFAULT_LIMIT} bytes"
    )
    assert error.diag.message_detail == "payload"
    assert "TIDINGS_MAX_PAYLOAD_BYTES" in (error.diag.message_hint or "")
    # Just over: the exact size is named.
    with pytest.raises(psycopg2.Error) as caught:
        producer.execute(
            "SELECT * FROM tidings.enqueue('order.created', %s, 'over')",
            (a_string_of_bytes(DEFAULT_LIMIT + 1),),
        )
    assert caught.value.pgcode == PROGRAM_LIMIT_EXCEEDED
    assert caught.value.diag.message_primary == (
        f"tidings.enqueue: payload is {DEFAULT_LIMIT + 1} bytes; the limit is {DEFAULT_LIMIT} bytes"
    )
    # Exactly at the limit is fine, as on the API.
    producer.execute(
        "SELECT * FROM tidings.enqueue('order.created', %s, 'fits')",
        (a_string_of_bytes(DEFAULT_LIMIT),),
    )
    assert len(producer.fetchall()) == 1
    assert events_count(admin) == 1


def test_a_batch_with_one_payload_over_the_limit_writes_nothing(
    producer: psycopg2.extensions.cursor, admin: psycopg2.extensions.cursor
) -> None:
    set_limit(admin, 1000)
    batch = [
        {"event_type": "t", "payload": {"n": 1}},
        {"event_type": "t", "payload": "x" * 1500},
        {"event_type": "t", "payload": {"n": 3}},
    ]
    with pytest.raises(psycopg2.Error) as caught:
        producer.execute("SELECT * FROM tidings.enqueue_batch(%s)", (json.dumps(batch),))
    assert caught.value.pgcode == PROGRAM_LIMIT_EXCEEDED
    assert caught.value.diag.message_detail == "events[1].payload"
    assert caught.value.diag.message_primary == (
        "tidings.enqueue: events[1]: payload is 1502 bytes; the limit is 1000 bytes"
    )
    assert events_count(admin) == 0


def test_the_size_is_the_compact_json_text_as_the_api_measures_it(
    producer: psycopg2.extensions.cursor, admin: psycopg2.extensions.cursor
) -> None:
    set_limit(admin, 1000)
    # jsonb prints a space after every separator: this payload's jsonb text is far over 1000
    # bytes, its compact text (what the API measures) exactly 1000, strings with ", " and ": "
    # inside them counted whole.
    payload: dict[str, object] = {"a, b": "c: d", "list": [1] * 400, "pad": ""}
    need = 1000 - len(json.dumps(payload, separators=(",", ":")).encode())
    payload["pad"] = "é" * (need // 2) + "x" * (need % 2)
    compact = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    assert len(compact.encode()) == 1000
    producer.execute("SELECT * FROM tidings.enqueue('t', %s, 'fits')", (compact,))
    admin.execute("SELECT octet_length(payload::text) FROM tidings.events")
    [(jsonb_text_bytes,)] = admin.fetchall()
    assert jsonb_text_bytes > 1300
    payload["pad"] = str(payload["pad"]) + "x"
    with pytest.raises(psycopg2.Error) as caught:
        producer.execute("SELECT * FROM tidings.enqueue('t', %s, 'over')", (json.dumps(payload),))
    assert caught.value.diag.message_primary == (
        "tidings.enqueue: payload is 1001 bytes; the limit is 1000 bytes"
    )


def test_the_migrator_writes_the_deployments_limit(database_url: str, producer) -> None:
    conn = psycopg2.connect(database_url)
    try:
        prepare_database(conn, secrets_keyring(), max_payload_bytes=500)
    finally:
        conn.close()
    producer.execute("SELECT * FROM tidings.enqueue('t', %s, 'fits')", (a_string_of_bytes(500),))
    with pytest.raises(psycopg2.Error) as caught:
        producer.execute("SELECT * FROM tidings.enqueue('t', %s)", (a_string_of_bytes(501),))
    assert caught.value.pgcode == PROGRAM_LIMIT_EXCEEDED
