"""``tidings migrate``: apply pending migrations to DATABASE_URL, and keep the signing secrets
encrypted under the current key (those an earlier release stored in clear are encrypted)."""

from __future__ import annotations

import argparse
from typing import Any

import psycopg2

from tidings import migrations
from tidings.cli import CommandError
from tidings.cli.support import DEV_DATA_DIR, secrets_key_notice
from tidings.config import ConfigError, get_settings
from tidings.dal.connection import connect
from tidings.secrets.keyring import Keyring
from tidings.secrets.master_keys import KeyUnavailable, configured_master_key


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply pending database migrations and encrypt stored signing secrets",
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tidings.logic.schema import prepare_database

    try:
        settings = get_settings()
        master = configured_master_key(settings, data_dir=DEV_DATA_DIR)
    except (ConfigError, ValueError) as exc:
        raise CommandError(str(exc)) from exc
    if not (settings.database_url or settings.database_user or settings.database_secret_arn):
        raise CommandError("DATABASE_URL is not set")
    try:
        conn = connect(settings)
    except psycopg2.OperationalError as exc:
        raise CommandError(f"cannot connect to the database: {exc}".strip()) from exc
    keyring = Keyring(master, data_key_max_age_s=settings.secrets_data_key_max_age_s)
    try:
        prepared = prepare_database(
            conn,
            keyring,
            max_payload_bytes=settings.max_payload_bytes,
            policy=migrations.LockPolicy.from_settings(settings),
        )
    except (migrations.MigrationError, KeyUnavailable) as exc:
        raise CommandError(str(exc)) from exc
    finally:
        conn.close()
    applied = prepared.applied
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    if prepared.secrets.encrypted_endpoints:
        print(
            f"encrypted the signing secrets of {prepared.secrets.encrypted_endpoints} "
            "endpoint(s) that were stored in clear"
        )
    print(secrets_key_notice(master))
    return 0
