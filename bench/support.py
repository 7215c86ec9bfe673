"""What the benchmarks share: a fresh migrated database on the chosen server, and timing."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import psycopg2.extensions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "layers" / "tidings"))

from tidings import migrations  # noqa: E402


def _with_dbname(dsn: str, dbname: str) -> str:
    params = psycopg2.extensions.parse_dsn(dsn)
    params["dbname"] = dbname
    return psycopg2.extensions.make_dsn(**params)


@contextlib.contextmanager
def server_dsn() -> Iterator[str]:
    """``DATABASE_URL`` when set, else an embedded PostgreSQL in a temporary folder."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    import pgserver

    server = pgserver.get_server(
        Path(tempfile.mkdtemp(prefix="tidings-bench-pg-")), cleanup_mode="delete"
    )
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@contextlib.contextmanager
def fresh_database(dsn: str) -> Iterator[str]:
    """A new database with the migrations applied, dropped afterwards."""
    name = f"tidings_bench_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    url = _with_dbname(dsn, name)
    conn = psycopg2.connect(url)
    migrations.migrate(conn)
    conn.close()
    try:
        yield url
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


class Stopwatch:
    """Wall time and this process's CPU time of a block."""

    def __enter__(self) -> Stopwatch:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
