"""Upgrading a deployment that has events to applications (migrations 0050-0052)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg2
import psycopg2.extensions
import pytest

from tidings import migrations


@pytest.fixture
def empty_database(postgres_admin_dsn: str) -> Iterator[str]:
    name = f"tidings_upgrade_{uuid.uuid4().hex[:12]}"
    admin = psycopg2.connect(postgres_admin_dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    params = psycopg2.extensions.parse_dsn(postgres_admin_dsn)
    params["dbname"] = name
    try:
        yield psycopg2.extensions.make_dsn(**params)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def _connect(dsn: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def test_an_upgrade_keeps_every_event_in_default_and_rewrites_no_table(empty_database: str) -> None:
    conn = _connect(empty_database)
    before_applications = [m for m in migrations.available() if m.version < 50]
    migrations.migrate(conn, migrations=before_applications)
    with conn.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url, secret) VALUES ('https://r.example/h', 'whsec_x')"
            " RETURNING id"
        )
        (endpoint,) = cur.fetchone()
        cur.execute(
            "INSERT INTO tidings.subscriptions (endpoint_id, event_type) VALUES (%s, '*')",
            (endpoint,),
        )
        cur.execute("SELECT array_agg(x) FROM tidings.enqueue('order.paid', '{}', 'o-1') x")
        (first_ids,) = cur.fetchone()
        cur.execute(
            "SELECT pg_relation_filenode('tidings.events'),"
            " pg_relation_filenode('tidings.messages')"
        )
        files_before = cur.fetchone()

    applied = migrations.migrate(conn)
    assert applied[:3] == [
        "0050_application_scoped_rows",
        "0051_events_application_key_index",
        "0052_enqueue_to_applications",
    ]
    with conn.cursor() as cur:
        # Adding the column and the key rewrote neither events nor messages (whose table is
        # tidings.message_rows since migration 0150: renamed, not rewritten).
        cur.execute(
            "SELECT pg_relation_filenode('tidings.events'),"
            " pg_relation_filenode('tidings.message_rows')"
        )
        assert cur.fetchone() == files_before
        cur.execute("SELECT app_id FROM tidings.events")
        assert cur.fetchall() == [(1,)]
        cur.execute("SELECT app_id FROM tidings.subscriptions")
        assert cur.fetchall() == [(1,)]
        cur.execute(
            "SELECT pg_get_constraintdef(oid), convalidated FROM pg_constraint"
            " WHERE conrelid = 'tidings.events'::regclass AND contype IN ('u', 'f')"
            " ORDER BY conname"
        )
        assert cur.fetchall() == [
            ("FOREIGN KEY (app_id) REFERENCES tidings.applications(id)", True),
            ("UNIQUE (app_id, event_type, event_id)", True),
        ]
        # The event sent before the upgrade is still found by its key, without an application
        # and with the default one named.
        cur.execute("SELECT array_agg(x) FROM tidings.enqueue('order.paid', '{}', 'o-1') x")
        assert cur.fetchone() == (first_ids,)
        cur.execute(
            "SELECT array_agg(x) FROM tidings.enqueue('order.paid', '{}', 'o-1',"
            " application => 'default') x"
        )
        assert cur.fetchone() == (first_ids,)
        cur.execute("SELECT count(*) FROM tidings.events")
        assert cur.fetchone() == (1,)
    conn.close()


def test_an_interrupted_build_of_the_events_key_is_built_again(empty_database: str) -> None:
    """0051 drops an invalid index that a failed run left behind, then builds it."""
    conn = _connect(empty_database)
    migrations.migrate(conn, migrations=[m for m in migrations.available() if m.version <= 50])
    with conn.cursor() as cur:
        cur.execute("CREATE UNIQUE INDEX events_app_key ON tidings.events (app_id, event_type)")
        cur.execute(
            "UPDATE pg_index SET indisvalid = false"
            " WHERE indexrelid = 'tidings.events_app_key'::regclass"
        )
    migrations.migrate(conn)
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_get_indexdef(indexrelid), indisvalid FROM pg_index"
            " WHERE indexrelid = 'tidings.events_idempotency_key'::regclass"
        )
        definition, valid = cur.fetchone()
    assert valid is True
    assert definition.endswith("(app_id, event_type, event_id)")
    conn.close()
