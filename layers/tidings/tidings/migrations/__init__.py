"""Numbered SQL migrations, applied in order, each exactly once.

``migrate`` is safe to run twice, and twice at once: it takes a transaction-scoped advisory lock,
so a second migrator waits for the first and then finds nothing left to do. Every migration and
its record commit together, so a failed migration leaves no trace. A migration that was applied
and later edited is refused (its checksum no longer matches) instead of being silently skipped.

Migrations run as the connected user (the RDS master user on AWS, a member of ``tidings_owner``);
at the end of every run ``ownership.sql`` hands whatever they created to ``tidings_owner`` and
keeps new functions from PUBLIC, so ownership and grants never depend on who ran a migration.
What must happen in the same transaction but needs more than SQL (encrypting secrets an earlier
release kept in clear: the key is not in the database) is passed in as ``finish``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources

import psycopg2.extensions

from tidings.observability import logger

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# An arbitrary constant that identifies the migration lock among advisory locks.
_LOCK_KEY = 7_462_839_104


_OWNERSHIP_SQL = resources.files(__name__).joinpath("ownership.sql").read_text(encoding="utf-8")


class MigrationError(RuntimeError):
    """The migrations on disk and the ones recorded in the database disagree."""


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def available() -> list[Migration]:
    """The migrations shipped with the package, in version order."""
    found = []
    for entry in resources.files(__name__).iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migrations share a version number: {versions}")
    return found


def migrate(
    conn: psycopg2.extensions.connection,
    *,
    finish: Callable[[psycopg2.extensions.cursor], object] | None = None,
    until: int | None = None,
) -> list[str]:
    """Apply the pending migrations (up to version ``until`` when given), hand what they made
    to the owner role, run ``finish`` in the same transaction, and return the names of the
    migrations applied now."""
    migrations = [m for m in available() if until is None or m.version <= until]
    applied_now: list[str] = []
    previous_autocommit = conn.autocommit
    conn.autocommit = False
    try:
        with conn, conn.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            cur.execute("CREATE SCHEMA IF NOT EXISTS tidings")
            cur.execute(
                """CREATE TABLE IF NOT EXISTS tidings.schema_migrations (
                       version     integer PRIMARY KEY,
                       name        text NOT NULL,
                       checksum    text NOT NULL,
                       applied_at  timestamptz NOT NULL DEFAULT now())"""
            )
            cur.execute("SELECT version, name, checksum FROM tidings.schema_migrations")
            recorded = {version: (name, checksum) for version, name, checksum in cur.fetchall()}
            for migration in migrations:
                if migration.version in recorded:
                    _, checksum = recorded[migration.version]
                    if checksum != migration.checksum:
                        raise MigrationError(
                            f"migration {migration.version:04d}_{migration.name} was changed "
                            "after it was applied; add a new migration instead"
                        )
                    continue
                cur.execute(migration.sql)
                cur.execute(
                    "INSERT INTO tidings.schema_migrations (version, name, checksum)"
                    " VALUES (%s, %s, %s)",
                    (migration.version, migration.name, migration.checksum),
                )
                applied_now.append(f"{migration.version:04d}_{migration.name}")
            unknown = sorted(set(recorded) - {m.version for m in available()})
            if unknown:
                raise MigrationError(
                    f"the database has migrations this version does not know: {unknown}"
                )
            cur.execute(_OWNERSHIP_SQL)
            if finish is not None:
                finish(cur)
    finally:
        conn.autocommit = previous_autocommit
    for name in applied_now:
        logger.info("applied migration", extra={"migration": name})
    return applied_now
