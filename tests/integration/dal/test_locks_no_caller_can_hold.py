"""Nothing a producer can lock is waited on by intake, an application's deletion or a migration.

PostgreSQL lets every role take any advisory lock, so a producer's login can hold whatever key
Tidings might use. These tests hold, as a producer, every advisory key that intake, deletion and
the migrator ever used (the deletion class for the application's id, exclusively and shared, and
the migration key), and check that another producer's events, the deletion and the migrator go on
as if nothing were held. Each victim runs under a short statement timeout, so a wait fails the
test instead of hanging it.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import psycopg2
import psycopg2.extensions
import pytest

from tests.integration.dal.test_database_roles import Members
from tests.support.seed import make_endpoint
from tidings.dal.connection import Database
from tidings.deployment import PRODUCER_ROLE
from tidings.logic import applications
from tidings.migrations import Migration, migrate

# The keys intake and deletion (class 1953064041, the application's id) and the migrator used.
DELETION_CLASS = 1953064041
MIGRATION_KEY = 7_462_839_104
# Longer than any statement here takes, far shorter than a wait for a held lock would last.
VICTIM_TIMEOUT_MS = 1000


@pytest.fixture(scope="module")
def members(postgres_admin_dsn: str) -> Iterator[Members]:
    found = Members(postgres_admin_dsn)
    yield found
    found.drop()


def _connect(database_url: str, **params: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(database_url, **params)
    conn.autocommit = True
    return conn


@pytest.fixture
def beta(database_url: str) -> tuple[int, int]:
    """An application 'beta' with one endpoint: (application id, endpoint id)."""
    conn = _connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO tidings.applications (uid) VALUES ('beta') RETURNING id",
            )
            row = cur.fetchone()
            assert row is not None
            app_id = int(row[0])
            endpoint_id = make_endpoint(cur, app_id=app_id, event_types=("order.created",))
    finally:
        conn.close()
    return app_id, endpoint_id


@pytest.fixture
def hostile_producer(
    members: Members, database_url: str, beta: tuple[int, int]
) -> Iterator[psycopg2.extensions.connection]:
    """A producer login holding, for its whole session, every advisory key Tidings ever used
    for 'beta' and for migrations: exclusively, and the deletion key shared as well."""
    app_id, _ = beta
    conn = members.connect(database_url, PRODUCER_ROLE)
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(
            "SELECT pg_advisory_lock(%(class)s, %(app)s), pg_advisory_lock(%(migration)s),"
            " pg_advisory_lock_shared(%(class)s, %(app)s),"
            # And the application keys of ids around it, as a loop over ids would.
            " (SELECT count(pg_advisory_lock(%(class)s, i)) FROM generate_series(1, 50) i)",
            {"class": DELETION_CLASS, "app": app_id, "migration": MIGRATION_KEY},
        )
    yield conn
    conn.close()


def test_a_producer_holding_the_keys_does_not_delay_another_producers_events(
    members: Members,
    database_url: str,
    beta: tuple[int, int],
    hostile_producer: psycopg2.extensions.connection,
) -> None:
    _, endpoint_id = beta
    params = psycopg2.extensions.parse_dsn(database_url)
    params.update(
        user=members.login(PRODUCER_ROLE),
        password=members.password,
        options=f"-c statement_timeout={VICTIM_TIMEOUT_MS}",
    )
    victim = psycopg2.connect(**params)
    try:
        started = time.monotonic()
        with victim, victim.cursor() as cur:
            cur.execute(
                "SELECT * FROM tidings.enqueue('order.created', '{\"id\": 1}', 'o-1',"
                " application => 'beta')"
            )
            [(message_id,)] = cur.fetchall()
            cur.execute(
                "SELECT item, created FROM tidings.enqueue_batch("
                '\'[{"event_type": "order.created", "payload": {"id": 2}}]\', \'beta\')'
            )
            assert cur.fetchall() == [(0, True)]
        assert time.monotonic() - started < 1.0
    finally:
        victim.close()
    assert message_id > 0
    assert endpoint_id > 0


def test_a_producer_holding_the_keys_does_not_stop_a_deletion(
    database_url: str,
    beta: tuple[int, int],
    hostile_producer: psycopg2.extensions.connection,
) -> None:
    app_id, endpoint_id = beta
    db = Database(database_url)
    impatient = Database(database_url, statement_timeout_ms=VICTIM_TIMEOUT_MS)
    try:
        app = applications.find(db, "beta")
        assert app is not None
        deleted = applications.delete_application(impatient, app)
    finally:
        impatient.close()
        db.close()
    assert deleted.id == app_id
    assert deleted.endpoints_disabled == 1
    conn = _connect(database_url)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT enabled FROM tidings.endpoints WHERE id = %s", (endpoint_id,))
            assert cur.fetchone() == (False,)
    finally:
        conn.close()


def test_a_producer_holding_the_keys_does_not_stop_the_migrator(
    database_url: str, hostile_producer: psycopg2.extensions.connection
) -> None:
    extra = Migration(9101, "test_after_hostile_lock", "CREATE TABLE tidings.t9101 (i int);")
    migrator = _connect(database_url, options=f"-c statement_timeout={VICTIM_TIMEOUT_MS}")
    try:
        from tidings.migrations import available

        assert migrate(migrator, migrations=[*available(), extra]) == [
            "9101_test_after_hostile_lock"
        ]
    finally:
        migrator.close()


def test_a_producer_cannot_take_the_migration_lock(members: Members, database_url: str) -> None:
    conn = members.connect(database_url, PRODUCER_ROLE)
    try:
        for statement in (
            "UPDATE tidings.migration_lock SET holder_pid = pg_backend_pid()",
            "SELECT * FROM tidings.migration_lock FOR UPDATE",
            "LOCK TABLE tidings.migration_lock IN ACCESS EXCLUSIVE MODE",
        ):
            with pytest.raises(psycopg2.errors.InsufficientPrivilege), conn.cursor() as cur:
                cur.execute(statement)
            conn.rollback()
    finally:
        conn.close()


def test_a_migrator_waits_for_a_live_holder_and_replaces_a_dead_one(database_url: str) -> None:
    from tidings.migrations import available

    first = _connect(database_url)
    second = _connect(database_url)
    extra = Migration(9102, f"test_wait_{uuid.uuid4().hex[:6]}", "SELECT 1;")
    done = threading.Event()
    errors: list[BaseException] = []

    def run_second() -> None:
        try:
            migrate(second, migrations=[*available(), extra])
            done.set()
        except BaseException as exc:  # reported below
            errors.append(exc)

    try:
        with first.cursor() as cur:
            # The first session takes the lock as a migrator does, and keeps it.
            cur.execute(
                "UPDATE tidings.migration_lock l SET holder_pid = s.pid,"
                " holder_started = s.backend_start, taken_at = now()"
                " FROM pg_stat_activity s WHERE s.pid = pg_backend_pid()"
            )
        waiter = threading.Thread(target=run_second)
        waiter.start()
        assert not done.wait(1.5), "a second migrator ran while the lock was held"
        # The holder's session ends without releasing: the waiting migrator takes over.
        first.close()
        waiter.join(10)
        assert not errors, errors
        assert done.is_set()
        with second.cursor() as cur:
            cur.execute("SELECT holder_pid FROM tidings.migration_lock")
            assert cur.fetchone() == (None,)
    finally:
        if not first.closed:
            first.close()
        second.close()


def test_a_deletion_stopped_after_its_first_step_is_completed_by_the_health_monitor(
    database_url: str, beta: tuple[int, int]
) -> None:
    """The deletion commits its mark, with its endpoints disabled, before it waits for earlier
    writers; should its second step fail (a statement timeout behind a producer's long
    transaction), the application stays deleted, nothing is delivered to it, and the health
    monitor's unreachable job dead-letters what that transaction queued."""
    from tidings.config import Settings
    from tidings.dal import applications as applications_dal
    from tidings.maintenance.unreachable import dead_letter_unreachable

    app_id, endpoint_id = beta
    db = Database(database_url)
    writer = _connect(database_url)
    try:
        with writer.cursor() as cur:
            cur.execute("BEGIN")
            cur.execute(
                "SELECT * FROM tidings.enqueue('order.created', '{}', 'late',"
                " application => 'beta')"
            )
        impatient = Database(database_url, statement_timeout_ms=300)
        app = applications.find(db, "beta")
        assert app is not None
        with pytest.raises(psycopg2.errors.QueryCanceled):
            applications.delete_application(impatient, app)
        impatient.close()
        # Marked deleted: new events are refused at once, and its endpoint is disabled, so
        # nothing more is delivered to it.
        assert applications.find(db, "beta") is None
        with db.cursor() as cur:
            cur.execute("SELECT enabled FROM tidings.endpoints WHERE id = %s", (endpoint_id,))
            assert cur.fetchone() == (False,)
        with db.cursor() as cur, pytest.raises(psycopg2.errors.ForeignKeyViolation):
            cur.execute(
                "SELECT * FROM tidings.enqueue('order.created', '{}', 'x', application => 'beta')"
            )
        with writer.cursor() as cur:
            cur.execute("COMMIT")
    finally:
        writer.close()

    assert dead_letter_unreachable(db, Settings()) == 1
    with db.cursor() as cur:
        cur.execute(
            "SELECT e.enabled, e.disabled_reason, m.status::text, m.last_error"
            " FROM tidings.endpoints e JOIN tidings.messages m ON m.endpoint_id = e.id"
            " WHERE e.id = %s",
            (endpoint_id,),
        )
        assert cur.fetchall() == [
            (False, "application deleted", "dead_letter", "endpoint disabled: application deleted")
        ]
        # Running the retirement again dead-letters nothing more.
        assert applications_dal.retire_application(cur, app_id)[1] == 0
    db.close()


def test_a_migrator_logged_in_as_another_owner_waits_for_a_live_holder(
    database_url: str, postgres_admin_dsn: str
) -> None:
    """Two migrating logins that are members of the owner role but not superusers: each sees no
    start time for the other's session, and must still wait while the holder lives."""
    suffix = uuid.uuid4().hex[:8]
    names = [f"tidings_mig_a_{suffix}", f"tidings_mig_b_{suffix}"]
    admin = _connect(postgres_admin_dsn)
    try:
        with admin.cursor() as cur:
            dbname = psycopg2.extensions.parse_dsn(database_url)["dbname"]
            for name in names:
                cur.execute(f"CREATE ROLE {name} LOGIN PASSWORD 'p' IN ROLE tidings_owner")
                # As the RDS master user may (CREATE SCHEMA IF NOT EXISTS asks for it).
                cur.execute(f"GRANT CREATE ON DATABASE {dbname} TO {name}")
        params = psycopg2.extensions.parse_dsn(database_url)
        first, second = (
            psycopg2.connect(**{**params, "user": name, "password": "p"}) for name in names
        )
        first.autocommit = second.autocommit = True
        done = threading.Event()
        errors: list[BaseException] = []
        extra = Migration(9103, "test_other_owner", "SELECT 1;")

        def run_second() -> None:
            try:
                from tidings.migrations import available

                migrate(second, migrations=[*available(), extra])
                done.set()
            except BaseException as exc:  # reported below
                errors.append(exc)

        try:
            with first.cursor() as cur:
                cur.execute(
                    "UPDATE tidings.migration_lock l SET holder_pid = s.pid,"
                    " holder_started = s.backend_start, taken_at = now()"
                    " FROM pg_stat_activity s WHERE s.pid = pg_backend_pid()"
                )
            waiter = threading.Thread(target=run_second)
            waiter.start()
            assert not done.wait(1.5), "a second migrator ran while the lock was held"
            first.close()
            waiter.join(10)
            assert not errors, errors
            assert done.is_set()
        finally:
            if not first.closed:
                first.close()
            second.close()
    finally:
        with admin.cursor() as cur:
            for name in names:
                cur.execute(f"REVOKE CREATE ON DATABASE {dbname} FROM {name}")
                cur.execute(f"DROP ROLE IF EXISTS {name}")
        admin.close()
