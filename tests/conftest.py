"""Shared fixtures: a real PostgreSQL for every test that needs one.

Which server:
- ``TIDINGS_TEST_POSTGRES=container``: a PostgreSQL 16 container through testcontainers (needs a
  Docker engine; skipped with the reason when there is none);
- otherwise ``DATABASE_URL`` when it is set;
- otherwise an embedded PostgreSQL 16 (the ``pgserver`` package) in a temporary folder.

Isolation: the migrations run once into a template database; every test gets its own database
cloned from it, dropped afterwards, so tests cannot see each other's rows.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import psycopg2.extensions
import pytest

from tests.support.secrets import TEST_SECRETS_KEY
from tidings import migrations
from tidings.dal.connection import Database

# Signing secrets are encrypted with the tests' own key, in this process and in every process a
# test starts (never a key file in the working directory, never a KMS key named outside).
os.environ["TIDINGS_SECRETS_KEY"] = TEST_SECRETS_KEY
os.environ.pop("TIDINGS_SECRETS_PREVIOUS_KEYS", None)
os.environ.pop("TIDINGS_SECRETS_KMS_KEY_ID", None)
os.environ.pop("TIDINGS_SECRETS_KEY_FILE", None)

# Unique per test session, so that runs sharing one server do not collide.
TEMPLATE_DB = f"tidings_test_template_{uuid.uuid4().hex[:8]}"


def _admin_connect(dsn: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


def _with_dbname(dsn: str, dbname: str) -> str:
    params = psycopg2.extensions.parse_dsn(dsn)
    params["dbname"] = dbname
    return psycopg2.extensions.make_dsn(**params)


@contextlib.contextmanager
def _container_server() -> Iterator[str]:
    try:
        from testcontainers.postgres import PostgresContainer

        container = PostgresContainer("postgres:16", driver=None)
        container.start()
    except Exception as exc:  # no Docker engine, no image, no socket: say which
        pytest.skip(f"TIDINGS_TEST_POSTGRES=container needs a Docker engine: {exc}")
    try:
        yield container.get_connection_url()
    finally:
        container.stop()


@contextlib.contextmanager
def _embedded_server() -> Iterator[str]:
    import pgserver

    data_dir = Path(tempfile.mkdtemp(prefix="tidings-test-pg-"))
    server = pgserver.get_server(data_dir, cleanup_mode="delete")
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def postgres_admin_dsn() -> Iterator[str]:
    """A DSN with rights to create databases on the server the tests use."""
    choice = os.environ.get("TIDINGS_TEST_POSTGRES", "")
    if choice == "container":
        server: contextlib.AbstractContextManager[str] = _container_server()
    elif os.environ.get("DATABASE_URL"):
        server = contextlib.nullcontext(os.environ["DATABASE_URL"])
    else:
        server = _embedded_server()
    with server as dsn:
        admin = _admin_connect(dsn)
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {TEMPLATE_DB}")
            cur.execute(f"CREATE DATABASE {TEMPLATE_DB}")
        template = _admin_connect(_with_dbname(dsn, TEMPLATE_DB))
        migrations.migrate(template)
        template.close()
        try:
            yield dsn
        finally:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {TEMPLATE_DB}")
            admin.close()


@contextlib.contextmanager
def migrated_database(admin_dsn: str, prefix: str = "tidings_test") -> Iterator[str]:
    """A fresh copy of the migrated template database, dropped afterwards."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = _admin_connect(admin_dsn)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}")
    try:
        yield _with_dbname(admin_dsn, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


@pytest.fixture
def database_url(postgres_admin_dsn: str) -> Iterator[str]:
    """A fresh, migrated database of this test's own."""
    with migrated_database(postgres_admin_dsn) as url:
        yield url


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = Database(database_url)
    yield database
    database.close()


@pytest.fixture
def server_version(postgres_admin_dsn: str) -> int:
    conn = _admin_connect(postgres_admin_dsn)
    try:
        return int(conn.server_version)
    finally:
        conn.close()


@pytest.fixture
def empty_database(postgres_admin_dsn: str) -> Iterator[str]:
    """A new database with nothing in it (no migration applied), dropped afterwards."""
    name = f"tidings_empty_{uuid.uuid4().hex[:12]}"
    admin = _admin_connect(postgres_admin_dsn)
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    try:
        yield _with_dbname(postgres_admin_dsn, name)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()
