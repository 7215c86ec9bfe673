"""``tidings migrate``: apply pending migrations to DATABASE_URL."""

from __future__ import annotations

import argparse
from typing import Any

import psycopg2

from tidings import migrations
from tidings.cli import CommandError
from tidings.config import get_settings
from tidings.dal.connection import connect


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("migrate", help="apply pending database migrations")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    settings = get_settings()
    if not settings.database_url and not settings.database_secret_arn:
        raise CommandError("DATABASE_URL is not set")
    try:
        conn = connect(settings)
    except psycopg2.OperationalError as exc:
        raise CommandError(f"cannot connect to the database: {exc}".strip()) from exc
    try:
        applied = migrations.migrate(conn, policy=migrations.LockPolicy.from_settings(settings))
    except migrations.MigrationError as exc:
        raise CommandError(str(exc)) from exc
    finally:
        conn.close()
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    return 0
