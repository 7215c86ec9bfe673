"""``tidings schema``: write the schema as the migrations leave it (committed as
``docs/schema.sql``), read from a database migrated for the purpose and then dropped."""

from __future__ import annotations

import argparse
import tempfile
import uuid
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tidings.cli import CommandError
from tidings.cli.support import write_output


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "schema",
        help="write the schema as the migrations leave it (docs/schema.sql)",
        description=(
            "Migrate a new, empty database (a scratch database on the server of DATABASE_URL "
            "when it is set, else a temporary embedded PostgreSQL), write its schema, drop it."
        ),
    )
    parser.add_argument(
        "-o",
        "--output",
        default="-",
        metavar="FILE",
        help="file to write (default: standard output)",
    )
    parser.set_defaults(handler=run)


def generate() -> str:
    """The schema text of a freshly migrated database."""
    from tidings import migrations
    from tidings.dal.connection import open_connection
    from tidings.dal.schema import dump_schema
    from tidings.observability import logger

    # The schema may be written to standard output: the migrations' log lines must not join it.
    logger.setLevel("WARNING")
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    with _scratch_database() as dsn:
        conn = open_connection(dsn)
        try:
            migrations.migrate(conn)
            with conn.cursor() as cur:
                return dump_schema(cur)
        finally:
            conn.close()


@contextmanager
def _scratch_database() -> Iterator[str]:
    import psycopg2.extensions

    from tidings.config import get_settings
    from tidings.dal.connection import open_connection

    server_dsn = get_settings().database_url
    if not server_dsn:
        from tidings.local.embedded import EmbeddedPostgres

        with tempfile.TemporaryDirectory(prefix="tidings-schema-") as folder:
            server = EmbeddedPostgres(Path(folder) / "pgdata", delete_on_stop=True)
            try:
                yield server.dsn
            finally:
                server.stop()
        return
    name = f"tidings_schema_{uuid.uuid4().hex[:12]}"
    admin = open_connection(server_dsn)
    try:
        with admin.cursor() as cur:
            cur.execute(f"CREATE DATABASE {name}")
        params = psycopg2.extensions.parse_dsn(server_dsn)
        params["dbname"] = name
        try:
            yield psycopg2.extensions.make_dsn(**params)
        finally:
            with admin.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    finally:
        admin.close()


def run(args: argparse.Namespace) -> int:
    import psycopg2

    try:
        text = generate()
    except psycopg2.OperationalError as exc:
        raise CommandError(f"cannot reach the database: {exc}".strip()) from exc
    write_output(args.output, text)
    return 0
