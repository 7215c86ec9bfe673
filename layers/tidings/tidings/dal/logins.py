"""Login users: each deployed function's own, and each producer's, made by the migrator."""

from __future__ import annotations

import psycopg2.extensions

from tidings.dal.connection import Cursor
from tidings.dal.queries import sql


def ensure_login(cur: Cursor, *, user: str, group: str, password: str) -> None:
    """``user`` can log in with ``password`` and is a member of ``group``. Only the password's
    SCRAM verifier is sent: the server never sees (nor logs) the password."""
    verifier = psycopg2.extensions.encrypt_password(
        password, user, scope=cur.connection, algorithm="scram-sha-256"
    )
    cur.execute(sql("ensure_login"), {"user": user, "group": group, "verifier": verifier})
