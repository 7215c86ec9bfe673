"""Preparing the database as RDS's master user does it: not a superuser, only CREATEROLE and
CREATEDB, on a server where no role of Tidings exists yet (a fresh throwaway cluster, of each
PostgreSQL version at hand: CREATEROLE means different things in 15 and 16).

The migrator makes the group roles, hands the schema to tidings_owner, makes the login users of
the functions and producers with passwords the server only ever sees as SCRAM verifiers, and can
do all of it again, and for a second database on the same server.
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg2
import psycopg2.extensions
import pytest

from tests.integration.dal.test_database_roles import INSUFFICIENT_PRIVILEGE, failures
from tests.support.clusters import Cluster, binaries, throwaway_cluster
from tests.support.secrets import secrets_keyring
from tidings.config import Settings
from tidings.dal.access import SENDER
from tidings.logic.schema import DatabaseLogin, prepare_database

# The deployment's payload limit, which the migrator writes where the SQL functions read it.
LIMIT = Settings().max_payload_bytes

MASTER_PASSWORD = "master-password-for-tests"


def _connect(dsn: str) -> psycopg2.extensions.connection:
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    return conn


@pytest.mark.parametrize("server", sorted(binaries()))
def test_migrating_without_superuser(server: str) -> None:
    with throwaway_cluster(binaries()[server]) as cluster:
        admin = _connect(cluster.dsn())
        with admin.cursor() as cur:
            cur.execute(
                "CREATE ROLE tidings LOGIN CREATEROLE CREATEDB PASSWORD %s", (MASTER_PASSWORD,)
            )
            cur.execute("CREATE DATABASE tidings OWNER tidings")
            cur.execute("CREATE DATABASE tidings_second OWNER tidings")
        master = _connect(cluster.dsn("tidings", "tidings", MASTER_PASSWORD))
        logins = [
            DatabaseLogin("tidings_fn_sender", "tidings_sender", "sender-password-1"),
            DatabaseLogin("tidings_producer_app", "tidings_producer", "producer-password"),
        ]
        first = prepare_database(master, secrets_keyring(), max_payload_bytes=LIMIT, logins=logins)
        assert "0072_grants" in first.applied
        assert first.logins == ("tidings_fn_sender", "tidings_producer_app")

        # Again (every deploy does it), with the sender's password changed since.
        logins[0] = DatabaseLogin("tidings_fn_sender", "tidings_sender", "sender-password-2")
        again = prepare_database(master, secrets_keyring(), max_payload_bytes=LIMIT, logins=logins)
        assert again.applied == ()
        # And a second database on the same server, where the roles exist already.
        second = _connect(cluster.dsn("tidings_second", "tidings", MASTER_PASSWORD))
        assert (
            "0072_grants"
            in prepare_database(second, secrets_keyring(), max_payload_bytes=LIMIT).applied
        )
        second.close()

        with master.cursor() as cur:
            cur.execute(
                "SELECT count(*) FROM pg_class WHERE relnamespace = 'tidings'::regnamespace"
                " AND relowner <> 'tidings_owner'::regrole"
            )
            assert cur.fetchone() == (0,)
            cur.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
            assert cur.fetchone() == (False,)
        with admin.cursor() as cur:
            cur.execute(
                "SELECT rolname, rolpassword LIKE 'SCRAM-SHA-256$%%' FROM pg_authid"
                " WHERE rolname LIKE 'tidings\\_%%' AND rolcanlogin ORDER BY 1"
            )
            assert cur.fetchall() == [
                ("tidings_fn_sender", True),
                ("tidings_producer_app", True),
            ]

        # The sender logs in with its current password (the old one no longer works) and
        # runs what the sender runs.
        with pytest.raises(psycopg2.OperationalError):
            psycopg2.connect(cluster.dsn("tidings", "tidings_fn_sender", "sender-password-1"))
        sender = psycopg2.connect(cluster.dsn("tidings", "tidings_fn_sender", "sender-password-2"))
        try:
            assert failures(sender, SENDER.queries) == {}
        finally:
            sender.close()
        producer = _connect(cluster.dsn("tidings", "tidings_producer_app", "producer-password"))
        try:
            with producer.cursor() as cur:
                cur.execute("SELECT count(*) FROM tidings.enqueue('order.created', '{}')")
                assert cur.fetchone() == (0,)
                with pytest.raises(psycopg2.Error) as caught:
                    cur.execute("SELECT count(*) FROM tidings.messages")
                assert caught.value.pgcode == INSUFFICIENT_PRIVILEGE
        finally:
            producer.close()
        master.close()
        admin.close()


@pytest.fixture(scope="module")
def migrated_by_master() -> Iterator[tuple[Cluster, psycopg2.extensions.connection]]:
    """A fresh PostgreSQL 16 cluster with Tidings migrated by a master user as on RDS."""
    with throwaway_cluster(binaries()["pg16"]) as cluster:
        admin = _connect(cluster.dsn())
        with admin.cursor() as cur:
            cur.execute(
                "CREATE ROLE tidings LOGIN CREATEROLE CREATEDB PASSWORD %s", (MASTER_PASSWORD,)
            )
            cur.execute("CREATE DATABASE tidings OWNER tidings")
        admin.close()
        master = _connect(cluster.dsn("tidings", "tidings", MASTER_PASSWORD))
        prepare_database(master, secrets_keyring(), max_payload_bytes=LIMIT)
        yield cluster, master
        master.close()


@pytest.mark.parametrize(
    ("user", "group", "refused"),
    [
        ("tidings", "tidings_sender", "tidings cannot be a login user"),
        ("tidings_sender", "tidings_sender", "tidings_sender cannot be a login user"),
        ("tidings_fn_x", "tidings_owner", "tidings_owner is not a group role of Tidings"),
        ("tidings_fn_x", "pg_read_server_files", "is not a group role of Tidings"),
    ],
)
def test_the_login_maker_refuses_administrators_group_roles_and_other_roles(
    migrated_by_master: tuple[Cluster, psycopg2.extensions.connection],
    user: str,
    group: str,
    refused: str,
) -> None:
    cluster, master = migrated_by_master
    with pytest.raises(psycopg2.Error, match=refused) as caught:
        prepare_database(
            master,
            secrets_keyring(),
            max_payload_bytes=LIMIT,
            logins=[DatabaseLogin(user, group, "a-password")],
        )
    assert caught.value.pgcode == "22023"
    # Nothing was made, and the master's own password still works.
    _connect(cluster.dsn("tidings", "tidings", MASTER_PASSWORD)).close()
    with master.cursor() as cur:
        cur.execute("SELECT count(*) FROM pg_roles WHERE rolname = 'tidings_fn_x'")
        assert cur.fetchone() == (0,)
