"""``tidings migrate``: apply pending migrations to DATABASE_URL, and keep the signing secrets
encrypted under the current key (those an earlier release stored in clear are encrypted)."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.cli import CommandError, UsageError
from tidings.cli.support import DEV_DATA_DIR, print_json, secrets_key_notice


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply pending database migrations and encrypt stored signing secrets",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import psycopg2

    from tidings import migrations
    from tidings.config import ConfigError, Settings
    from tidings.dal.connection import connect
    from tidings.logic.schema import prepare_database
    from tidings.secrets.keyring import Keyring
    from tidings.secrets.master_keys import KeyUnavailable, configured_master_key

    try:
        # Read now, not from the process's cached settings: a command runs once, with the
        # environment it is given.
        settings = Settings.from_env()
        master = configured_master_key(settings, data_dir=DEV_DATA_DIR)
    except ConfigError as exc:
        raise UsageError(str(exc)) from exc
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    if not (settings.database_url or settings.database_user or settings.database_secret_arn):
        raise UsageError("DATABASE_URL is not set")
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
            operational_application=settings.operational_application,
            operational_failing_attempt=settings.operational_failing_attempt,
            policy=migrations.LockPolicy.from_settings(settings),
        )
    except (migrations.MigrationError, KeyUnavailable) as exc:
        raise CommandError(str(exc)) from exc
    finally:
        conn.close()
    applied = prepared.applied
    if args.json:
        print_json(
            {
                "applied": list(applied),
                "encrypted_endpoints": prepared.secrets.encrypted_endpoints,
                "secrets_key": master.ref,
                "secrets_key_where": master.where,
            }
        )
        return 0
    print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else ""))
    if prepared.secrets.encrypted_endpoints:
        print(
            f"encrypted the signing secrets of {prepared.secrets.encrypted_endpoints} "
            "endpoint(s) that were stored in clear"
        )
    print(secrets_key_notice(master))
    return 0
