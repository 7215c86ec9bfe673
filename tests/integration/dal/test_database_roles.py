"""The database roles hold exactly the privileges their statements need.

``tidings.dal.access`` says which named queries each group role's holders run. Connected as a
login member of each role:

- every query of the role runs (a query whose privileges were not granted fails here);
- every privilege the role holds (read from the catalogs: on the schema, a table, a column, a
  function) is needed: revoked, some query of the role then fails with SQLSTATE 42501;
- every named query is run by some role (or by the schema's owner only).

Statements run with their parameters NULL (or with the few values of ``SAMPLE`` where NULL would
break a constraint before anything else), each inside a savepoint that is rolled back. That is
enough: PostgreSQL checks a statement's privileges on tables, columns and functions when it
starts, before it reads or writes a row; what a role reaches inside a SECURITY DEFINER function
is the owner's business, and needs EXECUTE only.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from tests.support.seed import make_endpoint
from tidings.config import Settings
from tidings.dal.access import (
    DEFINER_SEARCH_PATH,
    OWNER,
    OWNER_QUERIES,
    PREVIOUS_RELEASE_FUNCTIONS,
    ROLES,
    ROLES_BY_NAME,
    SECURITY_DEFINER_FUNCTIONS,
)
from tidings.dal.connection import Database
from tidings.dal.queries import all_queries
from tidings.deployment import FUNCTION_SPECS, PRODUCER_ROLE

INSUFFICIENT_PRIVILEGE = "42501"
PARAMETER = re.compile(r"%\((\w+)\)s")
NOW = datetime(2026, 1, 1, tzinfo=UTC)

# Parameters for the statements that cannot run with every parameter NULL.
SAMPLE: dict[str, dict[str, Any]] = {
    "claim_alert_firing": {
        "alert_key": "k",
        "kind": "k",
        "now": NOW,
        "details": "{}",
        "subject": "s",
        "body": "b",
        "attributes": "{}",
        "claim_s": 60,
    },
    "enqueue_batch": {"events": '[{"event_type": "roles.test", "payload": {}}]'},
    "enqueue_event": {"event_type": "roles.test", "payload": "{}"},
    "ensure_attempt_partitions": {"from_day": date(2026, 1, 1), "days": 1, "lock_timeout_ms": 1000},
    "insert_application": {"uid": "roles-test", "name": "", "metadata": "{}"},
    "insert_token": {
        "prefix": "tdg_rolestes",
        "hash": bytes(32),
        "scope": "admin",
        "description": "",
    },
    # Real times: with NULLs the planner drops the parts of the statement that read the tallies
    # (they could find nothing), and with them the privileges they need.
    "health_summary": {"since": NOW, "now": NOW},
    # Today's partitions, which migrating made.
    "prune_tallied_messages": {
        "partition": f"attempt_tallies_{datetime.now(UTC):%Y%m%d}",
        "after_ctid": "(0,0)",
        "batch_size": 1,
        "cutoff": NOW,
        "events_cutoff": NOW,
    },
    "keep_live_attempts": {
        "partition": f"attempts_{datetime.now(UTC):%Y%m%d}",
        "after_id": 0,
        "batch_size": 1,
    },
    # Wrapped for its own row, as the database insists (0092).
    "insert_data_key": {
        "id": 900_001,
        "master_key": "local:roles-test",
        "wrapped": b"tdg\x02" + (900_001).to_bytes(8, "big") + b"\x00",
    },
    "insert_endpoint": {"url": "https://r.example/", "description": "", "event_types": ["*"]},
    "insert_event_type": {
        "name": "roles.test",
        "description": "",
        "deprecated": False,
        "archived": False,
        "validate_payloads": False,
        "examples": "[]",
    },
    "set_endpoint_secret": {"overlap_s": 0, "max_secrets": 5},
    "update_endpoint": {"changed": [], "report_update": False},
    "store_operational_settings": {"application": "roles-operational", "failing_attempt": 4},
    "update_endpoint_percentiles": {
        "growth": 1.02,
        "rebuilt": False,
        "now": NOW,
        "slow_p95_ms": 5000,
        "slow_threshold": 5,
        "normal_threshold": 10,
    },
}


def statement(name: str) -> tuple[str, dict[str, Any]]:
    sql = all_queries()[name].sql
    params: dict[str, Any] = dict.fromkeys(PARAMETER.findall(sql))
    params.update(SAMPLE.get(name, {}))
    return sql, params


def failures(conn: psycopg2.extensions.connection, names: frozenset[str]) -> dict[str, str]:
    """Each named statement run in a savepoint as ``conn``'s user: the SQLSTATE of those that
    failed, by name. Nothing is committed."""
    failed: dict[str, str] = {}
    with conn.cursor() as cur:
        for name in sorted(names):
            sql, params = statement(name)
            cur.execute("SAVEPOINT probe")
            try:
                cur.execute(sql, params)
            except psycopg2.Error as exc:
                failed[name] = str(exc.pgcode)
            cur.execute("ROLLBACK TO SAVEPOINT probe")
    conn.rollback()
    return failed


@dataclass(frozen=True)
class Grant:
    """One privilege a role holds, as the catalogs say."""

    kind: str  # SCHEMA, TABLE, FUNCTION
    target: str
    privilege: str
    column: str | None

    def clause(self) -> str:
        column = ' ("' + self.column.replace('"', '""') + '")' if self.column else ""
        return f"{self.privilege}{column} ON {self.kind} {self.target}"


GRANTS_OF = """
SELECT 'SCHEMA', 'tidings', x.privilege_type, NULL
FROM pg_namespace n, aclexplode(n.nspacl) x
WHERE n.nspname = 'tidings' AND x.grantee = %(role)s::regrole
UNION ALL
SELECT 'TABLE', c.oid::regclass::text, x.privilege_type, NULL
FROM pg_class c, aclexplode(c.relacl) x
WHERE c.relnamespace = 'tidings'::regnamespace AND x.grantee = %(role)s::regrole
UNION ALL
SELECT 'TABLE', c.oid::regclass::text, x.privilege_type, a.attname
FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid, aclexplode(a.attacl) x
WHERE c.relnamespace = 'tidings'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped
  AND x.grantee = %(role)s::regrole
UNION ALL
SELECT 'FUNCTION', p.oid::regprocedure::text, x.privilege_type, NULL
FROM pg_proc p, aclexplode(p.proacl) x
WHERE p.pronamespace = 'tidings'::regnamespace AND x.grantee = %(role)s::regrole
ORDER BY 1, 2, 4, 3
"""


def grants_of(cur: psycopg2.extensions.cursor, role: str) -> list[Grant]:
    cur.execute(GRANTS_OF, {"role": role})
    return [Grant(*row) for row in cur.fetchall()]


class Members:
    """A login member of each group role, made for this test session (roles belong to the whole
    server, so their names are unique per session) and dropped afterwards."""

    def __init__(self, admin_dsn: str) -> None:
        self.admin_dsn = admin_dsn
        self.prefix = f"tidings_t{uuid.uuid4().hex[:8]}"
        self.password = uuid.uuid4().hex
        self.names: dict[str, str] = {}

    def login(self, role: str) -> str:
        if role not in self.names:
            name = f"{self.prefix}_{role.removeprefix('tidings_')}"
            with _admin(self.admin_dsn) as cur:
                cur.execute(
                    f"CREATE ROLE {name} LOGIN PASSWORD %s IN ROLE {role}",
                    (self.password,),
                )
            self.names[role] = name
        return self.names[role]

    def connect(self, database_url: str, role: str) -> psycopg2.extensions.connection:
        params = psycopg2.extensions.parse_dsn(database_url)
        params.update(user=self.login(role), password=self.password)
        return psycopg2.connect(**params)

    def drop(self) -> None:
        with _admin(self.admin_dsn) as cur:
            for name in self.names.values():
                cur.execute(f"DROP ROLE IF EXISTS {name}")


class _admin:
    def __init__(self, dsn: str) -> None:
        self.conn = psycopg2.connect(dsn)
        self.conn.autocommit = True

    def __enter__(self) -> psycopg2.extensions.cursor:
        return self.conn.cursor()

    def __exit__(self, *exc: object) -> None:
        self.conn.close()


@pytest.fixture(scope="module")
def members(postgres_admin_dsn: str) -> Iterator[Members]:
    found = Members(postgres_admin_dsn)
    yield found
    found.drop()


@pytest.fixture
def admin(database_url: str) -> Iterator[psycopg2.extensions.cursor]:
    """The test database as its superuser, autocommit: grants change at once."""
    conn = psycopg2.connect(database_url)
    conn.autocommit = True
    yield conn.cursor()
    conn.close()


def test_every_query_is_run_by_some_role_and_every_role_query_exists() -> None:
    queries = set(all_queries())
    listed = set(OWNER_QUERIES).union(*(role.queries for role in ROLES))
    assert queries - listed == set(), "queries no role runs: add them to tidings.dal.access"
    assert listed - queries == set(), "tidings.dal.access names queries that do not exist"


def test_each_function_connects_with_a_role_of_the_table() -> None:
    for spec in FUNCTION_SPECS:
        if spec.database_role is not None:
            assert spec.database_role in ROLES_BY_NAME, spec.name
    used = {spec.database_role for spec in FUNCTION_SPECS} | {PRODUCER_ROLE, "tidings_operator"}
    assert set(ROLES_BY_NAME) <= used


def test_the_roles_are_group_roles_that_cannot_log_in(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute(
            "SELECT rolname, rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls"
            " FROM pg_roles WHERE rolname = ANY (%s) ORDER BY rolname",
            ([*ROLES_BY_NAME, OWNER],),
        )
        rows = cur.fetchall()
    assert sorted(r[0] for r in rows) == sorted([*ROLES_BY_NAME, OWNER])
    assert all(r[1:] == (False, False, False, False, False) for r in rows)


def test_the_owner_role_owns_the_schema_and_everything_in_it(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute(
            """
            SELECT 'schema', nspname FROM pg_namespace
            WHERE nspname = 'tidings' AND nspowner <> 'tidings_owner'::regrole
            UNION ALL
            SELECT 'relation', relname FROM pg_class
            WHERE relnamespace = 'tidings'::regnamespace AND relowner <> 'tidings_owner'::regrole
            UNION ALL
            SELECT 'function', proname FROM pg_proc
            WHERE pronamespace = 'tidings'::regnamespace AND proowner <> 'tidings_owner'::regrole
            UNION ALL
            SELECT 'type', typname FROM pg_type
            WHERE typnamespace = 'tidings'::regnamespace AND typowner <> 'tidings_owner'::regrole
            """
        )
        assert cur.fetchall() == []
        # And nobody else may execute the schema's functions unless a grant says so.
        cur.execute(
            "SELECT p.proname FROM pg_proc p, aclexplode(coalesce(p.proacl,"
            " acldefault('f', p.proowner))) x"
            " WHERE p.pronamespace = 'tidings'::regnamespace AND x.grantee = 0"
        )
        assert cur.fetchall() == []


@pytest.mark.parametrize("role", [role.name for role in ROLES])
def test_a_member_of_each_role_runs_every_query_of_its_role(
    role: str, members: Members, database_url: str
) -> None:
    conn = members.connect(database_url, role)
    try:
        assert failures(conn, ROLES_BY_NAME[role].queries) == {}
    finally:
        conn.close()


def test_a_member_of_the_owner_role_runs_the_owners_queries(
    members: Members, database_url: str
) -> None:
    conn = members.connect(database_url, OWNER)
    try:
        # Making login users needs CREATEROLE besides; the migrator has it (see
        # test_migrating_without_superuser).
        assert failures(conn, OWNER_QUERIES - {"ensure_login"}) == {}
    finally:
        conn.close()


@pytest.mark.parametrize("role", [role.name for role in ROLES])
def test_every_privilege_of_each_role_is_needed_by_one_of_its_queries(
    role: str, members: Members, database_url: str, admin: psycopg2.extensions.cursor
) -> None:
    conn = members.connect(database_url, role)
    granted = grants_of(admin, role)
    assert granted, f"{role} holds no privilege at all"
    unused = []
    try:
        for grant in granted:
            if _kept_for_previous_release(role, grant):
                continue
            admin.execute(f"REVOKE {grant.clause()} FROM {role}")
            try:
                refused = failures(conn, ROLES_BY_NAME[role].queries)
            finally:
                admin.execute(f"GRANT {grant.clause()} TO {role}")
            if INSUFFICIENT_PRIVILEGE not in refused.values():
                unused.append(grant.clause())
    finally:
        conn.close()
    assert unused == [], f"{role} holds privileges none of its queries needs"
    # The loop put everything back.
    assert grants_of(admin, role) == granted


def test_a_producer_may_enqueue_and_nothing_else(
    members: Members, database_url: str, admin: psycopg2.extensions.cursor
) -> None:
    endpoint_id = make_endpoint(admin, event_types=("order.created",))
    conn = members.connect(database_url, PRODUCER_ROLE)
    conn.autocommit = True
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT * FROM tidings.enqueue('order.created', '{\"id\": 42}', 'order-42')"
            )
            [(message_id,)] = cur.fetchall()
            cur.execute(
                "SELECT item, created FROM tidings.enqueue_batch("
                '\'[{"event_type": "order.created", "payload": {"id": 43}}]\')'
            )
            assert cur.fetchall() == [(0, True)]
        admin.execute(
            "SELECT endpoint_id, status::text FROM tidings.messages WHERE id = %s", (message_id,)
        )
        assert admin.fetchone() == (endpoint_id, "pending")

        admin.execute(
            "SELECT c.oid::regclass::text FROM pg_class c"
            " WHERE c.relnamespace = 'tidings'::regnamespace AND c.relkind IN ('r', 'p')"
        )
        tables = [row[0] for row in admin.fetchall()]
        assert "tidings.endpoint_secrets" in tables and "tidings.message_rows" in tables
        assert "tidings.queue" in tables
        refused = {f"SELECT * FROM {table} LIMIT 1" for table in tables} | {
            "SELECT * FROM tidings.messages LIMIT 1",
            "SELECT * FROM tidings.attempts LIMIT 1",
            "UPDATE tidings.messages SET attempts = 0",
            "DELETE FROM tidings.events",
            "SELECT ciphertext FROM tidings.endpoint_secrets",
            "SELECT secret, previous_secret FROM tidings.endpoints",
            "SELECT * FROM tidings.begin_attempts_v3('{1}', '{}', '{1}', '{t}', 60, 1)",
            "SELECT tidings.set_endpoint_secret_v2(1, 1, 1, '\\x00', 0, 5)",
            "SELECT * FROM tidings.claim_due_v2(10, 60, 60, 0, 100, 10, 1)",
            "SELECT tidings.mark_slow_v1('{1}', 60)",
            "SELECT tidings.mark_quick_v1('{1}', now(), 10, 60)",
            "CREATE TABLE tidings.intruder (id int)",
        }
        with conn.cursor() as cur:
            for sql in sorted(refused):
                with pytest.raises(psycopg2.Error) as caught:
                    cur.execute(sql)
                assert caught.value.pgcode == INSUFFICIENT_PRIVILEGE, sql
    finally:
        conn.close()


@pytest.mark.parametrize("role", [role.name for role in ROLES])
def test_signing_secrets_leave_the_database_only_through_their_two_functions(
    role: str, members: Members, database_url: str
) -> None:
    """No role may select a secret's ciphertext or the columns that held secrets in clear; only
    the sender may call the function that returns a leased row's secrets, and only the API the
    one that reveals an endpoint's current secret on request."""
    conn = members.connect(database_url, role)
    try:
        with conn.cursor() as cur:
            for sql in (
                "SELECT ciphertext FROM tidings.endpoint_secrets",
                "SELECT secret FROM tidings.endpoints",
                "SELECT previous_secret FROM tidings.endpoints",
                "SELECT * FROM tidings.begin_attempts_v4('{1}', '{}', '{1}', '{t}', 60, 1)",
                "SELECT * FROM tidings.endpoint_signing_secret_v1(1, 1)",
            ):
                cur.execute("SAVEPOINT probe")
                try:
                    cur.execute(sql)
                    code = None
                except psycopg2.Error as exc:
                    code = exc.pgcode
                cur.execute("ROLLBACK TO SAVEPOINT probe")
                allowed = (role == "tidings_sender" and "begin_attempts_v4" in sql) or (
                    role == "tidings_ingest" and "endpoint_signing_secret_v1" in sql
                )
                assert (code is None) == allowed, (role, sql, code)
    finally:
        conn.close()


# What a definer function may set besides its search path: the begin and the claim plan their
# statements once per session (migration 0150); the begin plans without sequential scans
# (migration 0152).
DEFINER_EXTRA_SETTINGS = {
    "begin_attempts_v4": ["plan_cache_mode=force_generic_plan", "enable_seqscan=off"],
    "claim_due_v2": ["plan_cache_mode=force_generic_plan"],
}


def definer_problems(cur: psycopg2.extensions.cursor) -> list[str]:
    """What is wrong with the SECURITY DEFINER functions: listed ones without the attribute or
    without their fixed search path, and functions with it that are not listed."""
    cur.execute(
        "SELECT p.oid::regprocedure::text, p.proname, p.prosecdef, p.proconfig FROM pg_proc p"
        " WHERE p.pronamespace = 'tidings'::regnamespace ORDER BY 1"
    )
    rows = cur.fetchall()
    problems = [
        f"no function named {name}"
        for name in sorted(SECURITY_DEFINER_FUNCTIONS - {r[1] for r in rows})
    ]
    for signature, name, definer, config in rows:
        listed = name in SECURITY_DEFINER_FUNCTIONS
        if listed and not definer:
            problems.append(f"{signature} is not SECURITY DEFINER")
        if listed and config != [
            f"search_path={DEFINER_SEARCH_PATH}",
            *DEFINER_EXTRA_SETTINGS.get(name, []),
        ]:
            problems.append(f"{signature} has no fixed search_path")
        if definer and not listed:
            problems.append(f"{signature} is SECURITY DEFINER without being listed")
    return problems


def test_the_definer_functions_have_their_attributes_and_no_other_function_has_them(
    db: Database,
) -> None:
    with db.cursor() as cur:
        assert definer_problems(cur) == []


def test_a_redefinition_that_forgets_the_attributes_is_caught_and_fails_closed(
    members: Members, database_url: str, admin: psycopg2.extensions.cursor
) -> None:
    """CREATE OR REPLACE resets SECURITY DEFINER and the search path (ownership and grants stay):
    a later migration that restates tidings.enqueue without them makes the guard above fail,
    and producers get 42501 rather than more rights."""
    admin.execute(
        """
        CREATE OR REPLACE FUNCTION tidings.enqueue(
            event_type text, payload jsonb, event_id text DEFAULT NULL,
            endpoint_ids bigint[] DEFAULT NULL, application text DEFAULT NULL
        ) RETURNS SETOF bigint
        LANGUAGE sql AS $$
            SELECT unnest(e.message_ids)
            FROM tidings.enqueue_event(enqueue.event_type, enqueue.payload, enqueue.event_id,
                                       enqueue.endpoint_ids, enqueue.application) AS e
        $$
        """
    )
    problems = definer_problems(admin)
    restated = "tidings.enqueue(text,jsonb,text,bigint[],text)"
    assert f"{restated} is not SECURITY DEFINER" in problems
    assert f"{restated} has no fixed search_path" in problems
    conn = members.connect(database_url, PRODUCER_ROLE)
    try:
        with conn.cursor() as cur, pytest.raises(psycopg2.Error) as caught:
            cur.execute("SELECT * FROM tidings.enqueue('x', '{}')")
        assert caught.value.pgcode == INSUFFICIENT_PRIVILEGE
    finally:
        conn.close()


def test_what_a_later_migration_creates_is_handed_to_the_owner_and_closed_to_public(
    admin: psycopg2.extensions.cursor, database_url: str
) -> None:
    from tidings import migrations

    # As a later migration would, run by the migrating user.
    admin.execute("CREATE TABLE tidings.later_table (id int)")
    admin.execute("CREATE FUNCTION tidings.later_function() RETURNS int LANGUAGE sql RETURN 1")
    conn = psycopg2.connect(database_url)
    try:
        assert migrations.migrate(conn) == []
    finally:
        conn.close()
    admin.execute(
        "SELECT c.relowner::regrole::text, p.proowner::regrole::text,"
        " has_function_privilege('public', p.oid, 'EXECUTE')"
        " FROM pg_class c, pg_proc p"
        " WHERE c.oid = 'tidings.later_table'::regclass"
        " AND p.oid = 'tidings.later_function()'::regprocedure"
    )
    assert admin.fetchone() == (OWNER, OWNER, False)


def _kept_for_previous_release(role: str, grant: Grant) -> bool:
    name = grant.target.removeprefix("tidings.").split("(")[0]
    return grant.kind == "FUNCTION" and name in PREVIOUS_RELEASE_FUNCTIONS.get(role, frozenset())


@pytest.mark.parametrize("role", sorted(PREVIOUS_RELEASE_FUNCTIONS))
def test_a_function_kept_for_the_previous_release_is_still_granted_and_unused(
    role: str, admin: psycopg2.extensions.cursor
) -> None:
    granted = {
        g.target.removeprefix("tidings.").split("(")[0]
        for g in grants_of(admin, role)
        if g.kind == "FUNCTION"
    }
    kept = PREVIOUS_RELEASE_FUNCTIONS[role]
    assert kept <= granted, f"{role} lost {sorted(kept - granted)}: running code calls it"
    # No query of this release calls it: else it is no longer the previous release's alone.
    texts = [all_queries()[name].sql for name in ROLES_BY_NAME[role].queries]
    assert not [name for name in kept if any(f"tidings.{name}(" in text for text in texts)]


def test_a_producer_cannot_write_operational_events_itself(
    members: Members, database_url: str, admin: psycopg2.extensions.cursor
) -> None:
    """Operational events are written by Tidings alone: a producer's login may not call
    tidings.emit_lifecycle_v1 (a spoofed endpoint.disabled to the operator's systems)."""
    conn = members.connect(database_url, PRODUCER_ROLE)
    conn.autocommit = True
    try:
        with conn.cursor() as cur, pytest.raises(psycopg2.Error) as caught:
            cur.execute(
                'SELECT tidings.emit_lifecycle_v1(\'[{"event_type": "endpoint.disabled",'
                ' "event_id": "spoof", "application_uid": "acme", "data": {}}]\')'
            )
        assert caught.value.pgcode == INSUFFICIENT_PRIVILEGE
    finally:
        conn.close()


def test_a_producer_cannot_send_events_to_the_operational_application(
    members: Members, database_url: str, admin: psycopg2.extensions.cursor
) -> None:
    """The API refuses events for the operational application; a producer's database login,
    which calls the enqueue functions directly, must be refused them too."""
    operational = Settings().operational_application
    conn = members.connect(database_url, PRODUCER_ROLE)
    conn.autocommit = True
    spoofs = (
        "SELECT * FROM tidings.enqueue_batch("
        '\'[{"event_type": "endpoint.disabled", "payload": {"reason": "gone"}}]\', %s)',
        "SELECT * FROM tidings.enqueue('endpoint.disabled', '{\"reason\": \"gone\"}',"
        " NULL, NULL, %s)",
    )
    try:
        with conn.cursor() as cur:
            for spoof in spoofs:
                with pytest.raises(psycopg2.Error) as caught:
                    cur.execute(spoof, (operational,))
                assert caught.value.pgcode == INSUFFICIENT_PRIVILEGE, spoof
    finally:
        conn.close()
    admin.execute(
        "SELECT count(*) FROM tidings.events ev JOIN tidings.applications a ON a.id = ev.app_id"
        " WHERE a.uid = %s",
        (operational,),
    )
    assert admin.fetchone() == (0,)
