"""Migrations under traffic: a migration never makes the claimer wait longer than its lock
timeout, runs outside a transaction when its file asks, and is applied once or not at all."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

import psycopg2
import pytest

from tests.support.seed import make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Cursor, Database, open_connection
from tidings.migrations import LockPolicy, Migration, MigrationError, available, migrate

LOCK_TIMEOUT_MS = 300
# A claim normally takes milliseconds; this much on top of the lock timeout absorbs a busy machine.
MARGIN_S = 0.6
BLOCKER_HOLDS_S = 2.5
# Claims made before a test's lock and migration, and again after them.
CLAIMS_AROUND = 10
T = TypeVar("T")
FAST = LockPolicy(lock_timeout_ms=LOCK_TIMEOUT_MS, attempts=40, first_wait_s=0.2, max_wait_s=0.4)

# On the queue, which every claim writes.
INDEX_IN_TRANSACTION = Migration(
    9001, "test_index", "CREATE INDEX queue_test_due ON tidings.queue (next_attempt_at);"
)
INDEX_CONCURRENTLY = Migration(
    9002,
    "test_index_concurrently",
    """-- tidings:no-transaction
-- A failed run may have left an invalid index behind: it goes first.
DROP INDEX CONCURRENTLY IF EXISTS tidings.queue_test_endpoint;
CREATE INDEX CONCURRENTLY queue_test_endpoint ON tidings.queue (endpoint_id, status);
""",
)


@dataclass
class ClaimTraffic:
    """Claimers leasing and releasing rows in a loop, each statement timed."""

    database_url: str
    longest_s: float = 0.0
    claims: int = 0
    errors: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    counted: threading.Condition = field(default_factory=threading.Condition)

    def run(self) -> None:
        db = Database(self.database_url)
        try:
            while not self.stop.is_set():
                # Both statements write the queue, so either may be the one that queues behind a
                # migration's lock: each is timed.
                rows = self.timed(
                    db, lambda cur: delivery.claim_due(cur, batch_size=20, lease_s=60)
                )
                with self.counted:
                    self.claims += 1
                    self.counted.notify_all()
                leases = [row.lease for row in rows]
                self.timed(db, lambda cur, leases=leases: delivery.release_leases(cur, leases))
                time.sleep(0.01)
        except BaseException as exc:  # the test reports it
            with self.counted:
                self.errors.append(exc)
                # A claimer that failed wakes whoever awaits claims: none are coming from it.
                self.counted.notify_all()
        finally:
            db.close()

    def await_claims(self, count: int, timeout_s: float = 20.0) -> bool:
        """Whether the claimers reach ``count`` claims (or fail) within ``timeout_s``."""
        with self.counted:
            return self.counted.wait_for(
                lambda: self.claims >= count or bool(self.errors), timeout_s
            )

    def timed(self, db: Database, statement: Callable[[Cursor], T]) -> T:
        started = time.monotonic()
        result = db.run(statement)
        self.longest_s = max(self.longest_s, time.monotonic() - started)
        return result


@contextmanager
def claim_traffic(database_url: str, claimers: int = 2) -> Iterator[ClaimTraffic]:
    """Claimers at work before the block of the ``with`` begins and still after it ends: the
    claims are counted, not timed, so a busy machine slows the test without failing it."""
    traffic = ClaimTraffic(database_url)
    threads = [threading.Thread(target=traffic.run) for _ in range(claimers)]
    for thread in threads:
        thread.start()
    try:
        assert traffic.await_claims(CLAIMS_AROUND), "the claimers did not start"
        yield traffic
        assert traffic.await_claims(traffic.claims + CLAIMS_AROUND), "the claimers did not go on"
    finally:
        traffic.stop.set()
        for thread in threads:
            thread.join(30)
    assert not traffic.errors, traffic.errors


def hold_queue_lock(database_url: str, mode: str, seconds: float) -> threading.Thread:
    """A transaction that holds a lock on the queue for ``seconds`` (the long transaction a
    migration must not let the claims wait behind)."""
    ready = threading.Event()

    def hold() -> None:
        conn = psycopg2.connect(database_url)
        try:
            with conn.cursor() as cur:
                cur.execute(f"LOCK TABLE tidings.queue IN {mode} MODE")
                ready.set()
                time.sleep(seconds)
            conn.commit()
        finally:
            conn.close()

    thread = threading.Thread(target=hold)
    thread.start()
    assert ready.wait(10)
    return thread


@pytest.fixture
def queued(db: Database) -> Database:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 300)
    return db


def applied(database_url: str) -> list[int]:
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT version FROM tidings.schema_migrations ORDER BY version")
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def index_valid(database_url: str, name: str) -> bool | None:
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
                " WHERE c.relname = %s",
                (name,),
            )
            row = cur.fetchone()
            return None if row is None else bool(row[0])
    finally:
        conn.close()


def migrate_extra(database_url: str, extra: Migration, policy: LockPolicy) -> list[str]:
    conn = open_connection(database_url)
    try:
        return migrate(conn, policy=policy, migrations=[*available(), extra])
    finally:
        conn.close()


def test_an_index_migration_never_blocks_a_claim_longer_than_the_lock_timeout(
    database_url: str, queued: Database
) -> None:
    with claim_traffic(database_url) as traffic:
        # A long transaction writes messages: the index build's lock waits for it, and every
        # claim that comes after queues behind that wait.
        blocker = hold_queue_lock(database_url, "ROW EXCLUSIVE", BLOCKER_HOLDS_S)
        started = time.monotonic()
        names = migrate_extra(database_url, INDEX_IN_TRANSACTION, FAST)
        took = time.monotonic() - started
        blocker.join()
        time.sleep(0.2)

    assert names == ["9001_test_index"]
    # It was applied once the long transaction had ended, after tries that gave up in between.
    assert took >= BLOCKER_HOLDS_S - 0.5
    assert index_valid(database_url, "queue_test_due") is True
    assert traffic.longest_s < LOCK_TIMEOUT_MS / 1000 + MARGIN_S, traffic.longest_s


def test_without_a_lock_timeout_the_claims_wait_for_the_whole_long_transaction(
    database_url: str, queued: Database
) -> None:
    # What the lock timeout prevents: the migrator of earlier releases waited as long as it took,
    # and the claimer with it.
    unbounded = LockPolicy(lock_timeout_ms=0, attempts=1)
    with claim_traffic(database_url) as traffic:
        blocker = hold_queue_lock(database_url, "ROW EXCLUSIVE", BLOCKER_HOLDS_S)
        migrate_extra(database_url, INDEX_IN_TRANSACTION, unbounded)
        blocker.join()
    assert traffic.longest_s > BLOCKER_HOLDS_S - 1.0, traffic.longest_s


def test_an_index_built_concurrently_outside_a_transaction_leaves_the_claims_alone(
    database_url: str, queued: Database
) -> None:
    assert not INDEX_CONCURRENTLY.transactional
    with claim_traffic(database_url) as traffic:
        # CREATE INDEX CONCURRENTLY waits for this transaction to end, past its lock timeout:
        # the first tries fail (leaving an invalid index), a later one drops it and succeeds.
        blocker = hold_queue_lock(database_url, "ROW EXCLUSIVE", 1.5)
        names = migrate_extra(database_url, INDEX_CONCURRENTLY, FAST)
        blocker.join()
        time.sleep(0.2)

    assert names == ["9002_test_index_concurrently"]
    assert index_valid(database_url, "queue_test_endpoint") is True
    assert traffic.longest_s < LOCK_TIMEOUT_MS / 1000 + MARGIN_S, traffic.longest_s
    assert 9002 in applied(database_url)


def test_a_migration_that_never_gets_its_locks_fails_naming_itself_and_leaves_no_trace(
    database_url: str, queued: Database
) -> None:
    blocker = hold_queue_lock(database_url, "ACCESS SHARE", 3.0)
    try:
        with pytest.raises(MigrationError, match="9003_test_column could not take its locks"):
            migrate_extra(
                database_url,
                Migration(9003, "test_column", "ALTER TABLE tidings.queue ADD COLUMN x int;"),
                LockPolicy(lock_timeout_ms=100, attempts=3, first_wait_s=0.05, max_wait_s=0.1),
            )
    finally:
        blocker.join()
    assert 9003 not in applied(database_url)
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM information_schema.columns"
                " WHERE table_schema = 'tidings' AND table_name = 'queue' AND column_name = 'x'"
            )
            assert cur.fetchone() == (0,)
    finally:
        conn.close()


def test_a_failing_migration_keeps_those_before_it_and_records_nothing_of_itself(
    database_url: str,
) -> None:
    good = Migration(9004, "test_good", "CREATE TABLE tidings.test_good (id int);")
    bad = Migration(9005, "test_bad", "CREATE TABLE tidings.test_bad (id int); SELECT 1/0;")
    conn = open_connection(database_url)
    try:
        with pytest.raises(psycopg2.errors.DivisionByZero):
            migrate(conn, policy=FAST, migrations=[*available(), good, bad])
    finally:
        conn.close()
    versions = applied(database_url)
    assert 9004 in versions and 9005 not in versions
    conn = psycopg2.connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT to_regclass('tidings.test_bad'), to_regclass('tidings.test_good')")
            assert cur.fetchone() == (None, "tidings.test_good")
    finally:
        conn.close()


def test_an_edited_or_unknown_migration_is_refused(database_url: str) -> None:
    shipped = available()
    edited = [*shipped[:-1], Migration(shipped[-1].version, shipped[-1].name, "SELECT 1;")]
    conn = open_connection(database_url)
    try:
        with pytest.raises(MigrationError, match="was changed after it was applied"):
            migrate(conn, migrations=edited)
        with pytest.raises(MigrationError, match="migrations this version does not know"):
            migrate(conn, migrations=shipped[:-1])
        assert migrate(conn) == []
    finally:
        conn.close()


def test_two_migrators_at_once_apply_each_migration_once(database_url: str) -> None:
    extra = Migration(9006, "test_slow", "SELECT pg_sleep(0.5); CREATE TABLE tidings.t6 (i int);")
    results: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.append(migrate_extra(database_url, extra, FAST))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    assert sorted(results) == [[], ["9006_test_slow"]]
