"""The process's connection: per-statement and per-transaction timeouts without session state."""

from __future__ import annotations

import psycopg2
import psycopg2.errors
import pytest

from tidings.dal.connection import Database


def test_every_autocommit_statement_is_bounded_by_the_statement_timeout(database_url: str) -> None:
    db = Database(database_url, statement_timeout_ms=200)
    with db.cursor() as cur:
        with pytest.raises(psycopg2.errors.QueryCanceled):
            cur.execute("SELECT pg_sleep(2)")
        cur.execute("SELECT %s::int + 1", (41,))
        assert cur.fetchone() == (42,)
    # The bound lived in each statement's own transaction: the session is untouched.
    with db.connection.cursor() as raw:
        raw.execute("SHOW statement_timeout")
        assert raw.fetchone() != ("200ms",)
    db.close()


def test_a_transaction_is_bounded_and_leaves_no_session_state(database_url: str) -> None:
    db = Database(database_url, statement_timeout_ms=200, idle_in_transaction_timeout_ms=5000)
    with pytest.raises(psycopg2.errors.QueryCanceled), db.transaction() as cur:
        cur.execute("SELECT pg_sleep(2)")
    with db.transaction() as cur:
        cur.execute("SHOW idle_in_transaction_session_timeout")
        assert cur.fetchone() == ("5s",)
    with db.connection.cursor() as cur:
        cur.execute("SHOW idle_in_transaction_session_timeout")
        assert cur.fetchone() != ("5s",)
    db.close()


def test_run_reconnects_after_the_server_drops_the_connection(database_url: str) -> None:
    db = Database(database_url)
    pid = db.run(lambda cur: (cur.execute("SELECT pg_backend_pid()"), cur.fetchone())[1][0])
    killer = psycopg2.connect(database_url)
    killer.autocommit = True
    with killer.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (pid,))
    killer.close()
    again = db.run(lambda cur: (cur.execute("SELECT pg_backend_pid()"), cur.fetchone())[1][0])
    assert again != pid
    db.close()


def test_run_retries_a_deadlock_victim(database_url: str) -> None:
    db = Database(database_url)
    calls = []

    def work(cur: psycopg2.extensions.cursor) -> str:
        calls.append(1)
        if len(calls) < 3:
            cur.execute("DO $$ BEGIN RAISE EXCEPTION 'simulated' USING ERRCODE = '40P01'; END $$")
        return "done"

    assert db.run(work, transaction=True) == "done"
    assert len(calls) == 3
    db.close()


def test_run_surfaces_other_errors_at_once(database_url: str) -> None:
    db = Database(database_url)
    calls = []

    def work(cur: psycopg2.extensions.cursor) -> None:
        calls.append(1)
        cur.execute("DO $$ BEGIN RAISE EXCEPTION 'dup' USING ERRCODE = '23505'; END $$")

    with pytest.raises(psycopg2.errors.UniqueViolation):
        db.run(work, transaction=True)
    assert len(calls) == 1
    db.close()


def test_an_error_in_a_transaction_on_a_dropped_connection_surfaces_as_itself(
    database_url: str,
) -> None:
    """Its ROLLBACK fails too; that failure must not replace the error (and so pass for a lost
    connection worth running the work again)."""
    db = Database(database_url)
    calls = []

    class PublishFailed(Exception):
        pass

    def work(cur: psycopg2.extensions.cursor) -> None:
        calls.append(1)
        cur.execute("SELECT pg_backend_pid()")
        (pid,) = cur.fetchone()  # type: ignore[misc]
        killer = psycopg2.connect(database_url)
        killer.autocommit = True
        with killer.cursor() as other:
            other.execute("SELECT pg_terminate_backend(%s)", (pid,))
        killer.close()
        raise PublishFailed("the notifier refused the report")

    with pytest.raises(PublishFailed):
        db.run(work, transaction=True)
    assert len(calls) == 1
    # The dropped connection is replaced on next use.
    assert db.run(lambda cur: (cur.execute("SELECT 1"), cur.fetchone())[1]) == (1,)
    db.close()
