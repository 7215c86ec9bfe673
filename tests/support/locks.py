"""Waiting, in a test, until another connection's statement waits for a lock."""

from __future__ import annotations

import time

import psycopg2.extensions

from tidings.dal.connection import Database


def wait_until_blocked(db: Database, conn: psycopg2.extensions.connection) -> None:
    """Until ``conn``'s backend waits for a lock (read through ``db``); fails after 5 s."""
    pid = conn.get_backend_pid()
    with db.cursor() as cur:
        for _ in range(500):
            cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,))
            if cur.fetchone() == ("Lock",):
                return
            time.sleep(0.01)
    raise AssertionError("the call never waited for the lock")
