"""Numbered SQL migrations, applied in order, each exactly once, without stalling the queue.

``migrate`` is safe to run twice, and twice at once: it holds the migration lock for its whole
run, so a second migrator waits for the first and then finds nothing left to do. The lock is a row
of ``tidings.migration_lock`` naming the session that holds it, not an advisory lock: PostgreSQL
lets every role take any advisory lock, so a producer's login could hold that one and stop every
deploy, while only the migrating user may write this table. A session holds it, so that it spans
the migrations that run outside a transaction, and it is released with the session: a holder
whose session is gone (its process id no longer there, or there with another start time) is
replaced by the next migrator. A migration that was
applied and later edited is refused (its checksum no longer matches) instead of being silently
skipped.

Online: each migration runs in its own transaction with its record, under a lock timeout
(``LockPolicy``). A migration that would wait longer than that for a table's lock gives up at
once, so the claims, sends and API requests that queue behind its lock request wait no longer
than the timeout; it is tried again after a pause, a bounded number of times, and only then
reported as failed (the migrations before it stay applied). A migration whose file says

    -- tidings:no-transaction

on a line of its own runs outside a transaction, one statement at a time, for statements that
cannot run in one (``CREATE INDEX CONCURRENTLY``). Such a migration is recorded only after all
its statements succeeded, so it must be safe to run again after a failure part way: drop what a
failed run may have left (``DROP INDEX CONCURRENTLY IF EXISTS``) before creating it. Its
statements are separated by semicolons at the ends of lines and may not use dollar quoting.

Migrations run as the connected user (the RDS master user on AWS, a member of ``tidings_owner``);
at the end of every run ``ownership.sql`` hands whatever they created to ``tidings_owner`` and
keeps new functions from PUBLIC, so ownership and grants never depend on who ran a migration.
What must happen after the migrations but needs more than SQL (encrypting secrets an earlier
release kept in clear: the key is not in the database) is passed in as ``finish`` and runs in
that last transaction.
"""

from __future__ import annotations

import hashlib
import random
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from importlib import resources
from typing import Protocol

import psycopg2.errors
import psycopg2.extensions

from tidings.observability import logger

_FILE_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_NO_TRANSACTION = re.compile(r"^--\s*tidings:no-transaction\s*$", re.MULTILINE)
# A statement of a no-transaction migration ends with a semicolon at the end of a line.
_STATEMENT_END = re.compile(r";[ \t]*(?:--[^\n]*)?$", re.MULTILINE)
# How often a migrator waiting for the migration lock looks again.
_LOCK_POLL_S = 0.5


_OWNERSHIP_SQL = resources.files(__name__).joinpath("ownership.sql").read_text(encoding="utf-8")


class MigrationError(RuntimeError):
    """The migrations on disk and the ones recorded in the database disagree, or one of them
    could not take its locks within its tries."""


class MigrationSettings(Protocol):
    """What applying migrations reads of the settings."""

    @property
    def migration_lock_timeout_ms(self) -> int: ...
    @property
    def migration_lock_attempts(self) -> int: ...


@dataclass(frozen=True, slots=True)
class LockPolicy:
    """How long a migration may wait for a lock, and how often it is tried."""

    # The longest a migration waits for any one lock; whatever queues behind it waits no longer.
    lock_timeout_ms: int = 3000
    # Tries of a migration that could not get its locks; waits between them grow to max_wait_s.
    attempts: int = 20
    first_wait_s: float = 0.5
    max_wait_s: float = 15.0

    @classmethod
    def from_settings(cls, settings: MigrationSettings) -> LockPolicy:
        return cls(
            lock_timeout_ms=settings.migration_lock_timeout_ms,
            attempts=settings.migration_lock_attempts,
        )

    def wait_s(self, attempt: int) -> float:
        """The pause after the ``attempt``-th failed try: growing, jittered."""
        ceiling = min(self.max_wait_s, self.first_wait_s * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not security


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
    def transactional(self) -> bool:
        """False when the file asks to run outside a transaction."""
        return _NO_TRANSACTION.search(self.sql) is None

    def statements(self) -> list[str]:
        """The statements of a no-transaction migration, in order."""
        if "$$" in self.sql:
            raise MigrationError(f"{self.label} runs outside a transaction: no dollar quoting")
        found: list[str] = []
        start = 0
        for end in _STATEMENT_END.finditer(self.sql):
            found.append(self.sql[start : end.start()])
            start = end.end()
        found.append(self.sql[start:])
        return [s.strip() for s in found if _code(s)]


def _code(text: str) -> str:
    """``text`` without its comment lines and blank space."""
    lines = (line for line in text.splitlines() if not line.strip().startswith("--"))
    return "\n".join(lines).strip()


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
    policy: LockPolicy | None = None,
    migrations: Sequence[Migration] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    finish: Callable[[psycopg2.extensions.cursor], object] | None = None,
    until: int | None = None,
) -> list[str]:
    """Apply the pending migrations (default: those shipped; up to version ``until`` when
    given), then hand what they made to the owner role and run ``finish`` in one transaction;
    return the names of the migrations applied now."""
    rules = policy or LockPolicy()
    known = list(available() if migrations is None else migrations)
    wanted = [m for m in known if until is None or m.version <= until]
    applied_now: list[str] = []
    previous_autocommit = conn.autocommit
    conn.autocommit = True
    try:
        _take_migration_lock(conn, sleep)
        try:
            for migration in _pending(conn, wanted, known):
                _with_retries(
                    migration.label, partial(_apply, conn, migration, rules), rules, sleep
                )
                applied_now.append(migration.label)
                logger.info("applied migration", extra={"migration": migration.label})
            _with_retries("ownership", partial(_finish, conn, rules, finish), rules, sleep)
        finally:
            if not conn.closed:
                _release_migration_lock(conn)
    finally:
        if not conn.closed:
            conn.autocommit = previous_autocommit
    return applied_now


_LOCK_TABLE_SQL = """
CREATE SCHEMA IF NOT EXISTS tidings;
CREATE TABLE IF NOT EXISTS tidings.migration_lock (
    singleton       boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    holder_pid      integer,
    holder_started  timestamptz,
    taken_at        timestamptz);
INSERT INTO tidings.migration_lock (singleton) VALUES (true) ON CONFLICT DO NOTHING;
"""

# One statement, so two migrators cannot both take it: the second waits for the first's row lock
# and then finds a live holder. The holder is alive while a session with its process id and start
# time exists. A session of another user shows no start time to a reader without
# pg_read_all_stats: then its process id alone keeps it alive (failing closed: a process id
# reused by someone else's session makes the next migrator wait for that session to end).
_TAKE_LOCK_SQL = """
UPDATE tidings.migration_lock l
SET holder_pid = me.pid, holder_started = me.backend_start, taken_at = now()
FROM pg_stat_activity me
WHERE me.pid = pg_backend_pid()
  AND (l.holder_pid IS NULL
       OR NOT EXISTS (SELECT 1 FROM pg_stat_activity h
                      WHERE h.pid = l.holder_pid
                        AND (h.backend_start IS NULL
                             OR h.backend_start = l.holder_started)))
RETURNING l.holder_pid
"""

_HOLDER_SQL = "SELECT holder_pid, taken_at FROM tidings.migration_lock"

_RELEASE_LOCK_SQL = """
UPDATE tidings.migration_lock
SET holder_pid = NULL, holder_started = NULL, taken_at = NULL
WHERE holder_pid = pg_backend_pid()
"""


def _take_migration_lock(
    conn: psycopg2.extensions.connection, sleep: Callable[[float], None]
) -> None:
    """Wait until this session holds the migration lock (``conn`` in autocommit)."""
    _bootstrap_lock_table(conn)
    waited = False
    while True:
        with conn.cursor() as cur:
            cur.execute(_TAKE_LOCK_SQL)
            if cur.fetchone() is not None:
                return
            if not waited:
                cur.execute(_HOLDER_SQL)
                holder = cur.fetchone()
                logger.info(
                    "waiting for another migrator to finish",
                    extra={"holder_pid": holder[0] if holder else None},
                )
                waited = True
        sleep(_LOCK_POLL_S)


def _bootstrap_lock_table(conn: psycopg2.extensions.connection) -> None:
    """Create the lock's table and row where they are missing. Two first migrators can race to
    create the table (PostgreSQL then reports a duplicate row type); the loser looks again."""
    for attempt in range(3):
        try:
            with conn.cursor() as cur:
                cur.execute(_LOCK_TABLE_SQL)
            return
        except (psycopg2.errors.UniqueViolation, psycopg2.errors.DuplicateObject):
            if attempt == 2:
                raise


def _release_migration_lock(conn: psycopg2.extensions.connection) -> None:
    with conn.cursor() as cur:
        cur.execute(_RELEASE_LOCK_SQL)


def _pending(
    conn: psycopg2.extensions.connection,
    wanted: Sequence[Migration],
    known: Sequence[Migration],
) -> list[Migration]:
    """The migrations of ``wanted`` not applied yet, after checking the applied ones against
    the files (``known``: every migration this version has)."""
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
    for migration in known:
        if migration.version in recorded and recorded[migration.version] != migration.checksum:
            raise MigrationError(
                f"migration {migration.label} was changed after it was applied; "
                "add a new migration instead"
            )
    unknown = sorted(set(recorded) - {m.version for m in known})
    if unknown:
        raise MigrationError(f"the database has migrations this version does not know: {unknown}")
    return [m for m in wanted if m.version not in recorded]


def _with_retries(
    label: str, work: Callable[[], None], policy: LockPolicy, sleep: Callable[[float], None]
) -> None:
    """``work`` tried again while it gives up waiting for a lock, up to the policy's tries."""
    for attempt in range(1, policy.attempts + 1):
        try:
            work()
            return
        except psycopg2.errors.LockNotAvailable:
            if attempt == policy.attempts:
                break
            pause = policy.wait_s(attempt)
            logger.warning(
                "migration waited too long for a lock; trying again",
                extra={"migration": label, "attempt": attempt, "pause_s": pause},
            )
            sleep(pause)
    raise MigrationError(
        f"migration {label} could not take its locks within "
        f"{policy.lock_timeout_ms} ms in {policy.attempts} tries; the tables it changes are busy "
        "(a long transaction?). Run the migrator again later."
    )


def _apply(conn: psycopg2.extensions.connection, migration: Migration, policy: LockPolicy) -> None:
    if not migration.transactional:
        _apply_outside_transaction(conn, migration, policy)
        return

    def run(cur: psycopg2.extensions.cursor) -> None:
        cur.execute(migration.sql)
        _record(cur, migration)

    _in_transaction(conn, policy, run)


def _finish(
    conn: psycopg2.extensions.connection,
    policy: LockPolicy,
    finish: Callable[[psycopg2.extensions.cursor], object] | None,
) -> None:
    def run(cur: psycopg2.extensions.cursor) -> None:
        cur.execute(_OWNERSHIP_SQL)
        if finish is not None:
            finish(cur)

    _in_transaction(conn, policy, run)


def _in_transaction(
    conn: psycopg2.extensions.connection,
    policy: LockPolicy,
    work: Callable[[psycopg2.extensions.cursor], None],
) -> None:
    """``work`` under the lock timeout, committed as a whole (or not at all)."""
    conn.autocommit = False
    try:
        with conn, conn.cursor() as cur:
            cur.execute(
                "SELECT set_config('lock_timeout', %s, true)", (str(policy.lock_timeout_ms),)
            )
            work(cur)
    finally:
        if not conn.closed:
            conn.autocommit = True


def _apply_outside_transaction(
    conn: psycopg2.extensions.connection, migration: Migration, policy: LockPolicy
) -> None:
    with conn.cursor() as cur:
        cur.execute("SELECT set_config('lock_timeout', %s, false)", (str(policy.lock_timeout_ms),))
        try:
            for statement in migration.statements():
                cur.execute(statement)
        finally:
            if not conn.closed:
                cur.execute("RESET lock_timeout")
        _record(cur, migration)


def _record(cur: psycopg2.extensions.cursor, migration: Migration) -> None:
    cur.execute(
        "INSERT INTO tidings.schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
        (migration.version, migration.name, migration.checksum),
    )
