"""Numbered SQL migrations, applied in order, each exactly once.

``migrate`` is safe to run twice, and twice at once: it holds an advisory lock for the whole run,
so a second migrator waits for the first and then finds nothing left to do. Pending migrations run
in one transaction with their records, so a failed migration leaves no trace; a migration is
refused (its checksum no longer matches) when it was applied and later edited, instead of being
silently skipped.

A migration whose first line is ``-- tidings: outside a transaction`` holds statements that
PostgreSQL refuses to run in a transaction block (``CREATE INDEX CONCURRENTLY``, which builds an
index on a large table without blocking its writes). The migrations pending before it are
committed first; its statements (separated by lines ``-- tidings: next statement``) run one by
one, each on its own, and it is recorded once the last succeeded; the migrations after it run in
a transaction of their own. It must be safe to run again from its first statement after failing
part-way, since it is not recorded until it is done.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import resources

import psycopg2.extensions

from tidings.observability import logger

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
# An arbitrary constant that identifies the migration lock among advisory locks.
_LOCK_KEY = 7_462_839_104
OUTSIDE_A_TRANSACTION = "-- tidings: outside a transaction"
NEXT_STATEMENT = "-- tidings: next statement"


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

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"

    @property
    def in_transaction(self) -> bool:
        first_line = self.sql.lstrip().split("\n", 1)[0].strip()
        return first_line != OUTSIDE_A_TRANSACTION

    def statements(self) -> list[str]:
        """The statements of a migration that runs outside a transaction, in order."""
        parts: list[list[str]] = [[]]
        for line in self.sql.splitlines():
            if line.strip() == NEXT_STATEMENT:
                parts.append([])
            else:
                parts[-1].append(line)
        return [text for text in ("\n".join(p).strip() for p in parts) if text]


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
    conn: psycopg2.extensions.connection, migrations: Sequence[Migration] | None = None
) -> list[str]:
    """Apply the pending migrations (default: those shipped with the package); return the
    names of those applied now."""
    wanted = list(available() if migrations is None else migrations)
    applied_now: list[str] = []
    previous_autocommit = conn.autocommit
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            # A session lock, held across the transactions below and released at the end.
            cur.execute("SELECT pg_advisory_lock(%s)", (_LOCK_KEY,))
        try:
            pending = _pending(conn, wanted)
            for group in _groups(pending):
                _apply(conn, group)
                applied_now.extend(m.label for m in group)
        finally:
            if not conn.closed:
                with conn.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    finally:
        if not conn.closed:
            conn.autocommit = previous_autocommit
    for name in applied_now:
        logger.info("applied migration", extra={"migration": name})
    return applied_now


def _pending(
    conn: psycopg2.extensions.connection, migrations: Sequence[Migration]
) -> list[Migration]:
    """The migrations not recorded yet, after checking the recorded ones against the files."""
    with conn.cursor() as cur:
        cur.execute("CREATE SCHEMA IF NOT EXISTS tidings")
        cur.execute(
            """CREATE TABLE IF NOT EXISTS tidings.schema_migrations (
                   version     integer PRIMARY KEY,
                   name        text NOT NULL,
                   checksum    text NOT NULL,
                   applied_at  timestamptz NOT NULL DEFAULT now())"""
        )
        cur.execute("SELECT version, name, checksum FROM tidings.schema_migrations")
        recorded = {version: checksum for version, _, checksum in cur.fetchall()}
    for migration in migrations:
        if migration.version in recorded and recorded[migration.version] != migration.checksum:
            raise MigrationError(
                f"migration {migration.label} was changed after it was applied; "
                "add a new migration instead"
            )
    unknown = sorted(set(recorded) - {m.version for m in migrations})
    if unknown:
        raise MigrationError(f"the database has migrations this version does not know: {unknown}")
    return [m for m in migrations if m.version not in recorded]


def _groups(pending: Sequence[Migration]) -> Iterator[list[Migration]]:
    """Runs of migrations applied together: consecutive transactional ones, or one that runs
    outside a transaction on its own."""
    group: list[Migration] = []
    for migration in pending:
        if migration.in_transaction:
            group.append(migration)
            continue
        if group:
            yield group
            group = []
        yield [migration]
    if group:
        yield group


def _apply(conn: psycopg2.extensions.connection, group: Sequence[Migration]) -> None:
    record = "INSERT INTO tidings.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)"
    if len(group) == 1 and not group[0].in_transaction:
        (migration,) = group
        with conn.cursor() as cur:
            # Each statement sent alone in autocommit mode: PostgreSQL runs it outside any
            # transaction block, as CONCURRENTLY requires.
            for statement in migration.statements():
                cur.execute(statement)
            cur.execute(record, (migration.version, migration.name, migration.checksum))
        return
    conn.autocommit = False
    try:
        with conn, conn.cursor() as cur:
            for migration in group:
                cur.execute(migration.sql)
                cur.execute(record, (migration.version, migration.name, migration.checksum))
    finally:
        if not conn.closed:
            conn.autocommit = True
