"""One PostgreSQL connection per process (per Lambda execution environment), reused across
invocations and reconnected after the server or RDS Proxy drops it.

The connection runs in autocommit mode: a single statement is its own transaction, which is how
most queue operations are written (one atomic statement each). Such a statement is sent together
with ``set_config('statement_timeout', ..., true)`` in one query string, so it runs as one
implicit transaction bounded by the timeout, in one round trip. ``Database.transaction`` opens an
explicit transaction and sets its timeouts the same way in the round trip of ``BEGIN``. Nothing
here changes session state, so RDS Proxy never pins the session.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol, TypeVar

import psycopg2
import psycopg2.extensions
import psycopg2.extras

from tidings.observability import logger

T = TypeVar("T")
Cursor = psycopg2.extensions.cursor

# SQLSTATEs after which the whole transaction can safely run again.
RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock_detected


class DatabaseSettings(Protocol):
    """What connecting to the database reads of the settings."""

    @property
    def database_host(self) -> str: ...
    @property
    def database_max_retries(self) -> int: ...
    @property
    def database_name(self) -> str: ...
    @property
    def database_port(self) -> int: ...
    @property
    def database_root_cert(self) -> str: ...
    @property
    def database_secret_arn(self) -> str: ...
    @property
    def database_user(self) -> str: ...
    @property
    def database_url(self) -> str: ...
    @property
    def idle_in_transaction_timeout_ms(self) -> int: ...
    @property
    def statement_timeout_ms(self) -> int: ...


def dsn_from_settings(settings: DatabaseSettings) -> str:
    """The libpq connection string: ``DATABASE_URL``; or a login user with an IAM token for RDS
    Proxy (a new token on every call: each lasts 15 minutes and is checked only at connect); or
    the credentials in a Secrets Manager secret.

    The last two check the server's certificate and name (``sslmode=verify-full``) against the
    CA bundle ``TIDINGS_DATABASE_ROOT_CERT``: the token or the password goes over that
    connection, so it must reach the proxy or the instance and nobody else. ``DATABASE_URL``
    carries its own ``sslmode``.
    """
    if settings.database_url:
        return settings.database_url
    if settings.database_user:
        if not settings.database_host:
            raise ValueError("TIDINGS_DATABASE_USER needs TIDINGS_DATABASE_HOST (the RDS Proxy)")
        root_cert = _root_cert(settings)
        from tidings.aws_clients import rds_client

        token = rds_client().generate_db_auth_token(
            DBHostname=settings.database_host,
            Port=settings.database_port,
            DBUsername=settings.database_user,
        )
        return psycopg2.extensions.make_dsn(
            host=settings.database_host,
            port=settings.database_port,
            dbname=settings.database_name,
            user=settings.database_user,
            password=token,
            sslmode="verify-full",
            sslrootcert=root_cert,
            connect_timeout=5,
            application_name="tidings",
        )
    if not settings.database_secret_arn:
        raise ValueError(
            "no database configured: set DATABASE_URL, TIDINGS_DATABASE_USER or "
            "TIDINGS_DATABASE_SECRET_ARN"
        )
    root_cert = _root_cert(settings)
    from aws_lambda_powertools.utilities import parameters

    secret = json.loads(parameters.get_secret(settings.database_secret_arn, max_age=300))
    return psycopg2.extensions.make_dsn(
        host=settings.database_host or secret["host"],
        port=secret.get("port", 5432),
        dbname=settings.database_name or secret.get("dbname", "postgres"),
        user=secret["username"],
        password=secret["password"],
        sslmode="verify-full",
        sslrootcert=root_cert,
        connect_timeout=5,
        application_name="tidings",
    )


def _root_cert(settings: DatabaseSettings) -> str:
    """The CA bundle to check the server against; refused before any credential is fetched or
    sent when it is not configured or not there."""
    path = settings.database_root_cert
    if not path:
        raise ValueError(
            "TIDINGS_DATABASE_ROOT_CERT is not set: name a file of the CA certificates that sign "
            "the database's (the Amazon RDS CAs for an instance, the Amazon Trust Services roots "
            "for RDS Proxy), such as certs/amazon-rds-ca.pem of the dependencies layer"
        )
    if not os.path.isfile(path):
        raise ValueError(f"TIDINGS_DATABASE_ROOT_CERT names {path}, which is not a file")
    return path


class BoundedCursor(psycopg2.extensions.cursor):
    """A cursor whose every statement carries its own statement timeout."""

    timeout_prefix = ""

    def execute(self, query: Any, vars: Any = None) -> None:
        super().execute(self.timeout_prefix + query, vars)


def open_connection(dsn: str) -> psycopg2.extensions.connection:
    """A new autocommit connection that reads and writes uuid values as ``uuid.UUID``."""
    conn = psycopg2.connect(dsn)
    conn.autocommit = True
    psycopg2.extras.register_uuid(conn_or_curs=conn)  # type: ignore[no-untyped-call]
    return conn


def connect(settings: DatabaseSettings) -> psycopg2.extensions.connection:
    """A new autocommit connection to the configured database."""
    return open_connection(dsn_from_settings(settings))


class Database:
    """The process's connection, with transactions that retry what is safe to retry."""

    def __init__(
        self,
        dsn: str | Callable[[], str],
        *,
        statement_timeout_ms: int = 30_000,
        idle_in_transaction_timeout_ms: int = 10_000,
        max_retries: int = 5,
    ) -> None:
        self._dsn = dsn
        self._conn: psycopg2.extensions.connection | None = None
        self.statement_timeout_ms = statement_timeout_ms
        self.idle_in_transaction_timeout_ms = idle_in_transaction_timeout_ms
        self.max_retries = max_retries

    @classmethod
    def from_settings(cls, settings: DatabaseSettings) -> Database:
        return cls(
            lambda: dsn_from_settings(settings),
            statement_timeout_ms=settings.statement_timeout_ms,
            idle_in_transaction_timeout_ms=settings.idle_in_transaction_timeout_ms,
            max_retries=settings.database_max_retries,
        )

    @property
    def connection(self) -> psycopg2.extensions.connection:
        if self._conn is None or self._conn.closed:
            self._conn = open_connection(self._dsn() if callable(self._dsn) else self._dsn)
        return self._conn

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None

    @contextmanager
    def cursor(self) -> Iterator[Cursor]:
        """A cursor in autocommit mode: every statement is its own transaction, bounded by the
        statement timeout. (Statements that cannot run in a transaction block, such as VACUUM,
        need ``connection.cursor()`` instead.)"""
        with self.connection.cursor(cursor_factory=BoundedCursor) as cur:
            cur.timeout_prefix = (
                f"SELECT set_config('statement_timeout', '{int(self.statement_timeout_ms)}', true);"
            )
            yield cur

    @contextmanager
    def transaction(self) -> Iterator[Cursor]:
        """An explicit transaction with per-transaction timeouts; committed when the block ends."""
        conn = self.connection
        with conn.cursor() as cur:
            cur.execute(
                "BEGIN; SELECT set_config('statement_timeout', %s, true),"
                " set_config('idle_in_transaction_session_timeout', %s, true)",
                (str(self.statement_timeout_ms), str(self.idle_in_transaction_timeout_ms)),
            )
            try:
                yield cur
            except BaseException:
                if not conn.closed:
                    try:
                        cur.execute("ROLLBACK")
                    except psycopg2.Error:
                        # The connection is gone (the server rolls back what it held) or in an
                        # unknown state: drop it, and let the error that ended the work be the
                        # one that surfaces, not a "lost connection" that would run it again.
                        self.close()
                raise
            cur.execute("COMMIT")

    def run(self, work: Callable[[Cursor], T], *, transaction: bool = False) -> T:
        """Run ``work`` with a cursor (in a transaction if asked) and return its result.

        Runs it again, up to ``max_retries`` times with growing jittered waits, when PostgreSQL
        reports a deadlock or serialization failure (waits under a second), or when the
        connection was lost before the work finished (waits long enough, about 8 to 15 s in all,
        to ride out a server restart or a failover). A connection lost during COMMIT is not
        retried: the outcome is unknown, so the error surfaces. ``work`` must therefore be safe
        to run again from the start.
        """
        attempt = 0
        while True:
            committing = False
            lost = False
            try:
                if transaction:
                    with self.transaction() as cur:
                        result = work(cur)
                        committing = True
                    return result
                with self.cursor() as cur:
                    return work(cur)
            except (psycopg2.OperationalError, psycopg2.InterfaceError) as exc:
                retryable_code = getattr(exc, "pgcode", None) in RETRYABLE_SQLSTATES
                lost = self._conn is None or self._conn.closed != 0
                if committing and not retryable_code:
                    raise
                if not (retryable_code or lost) or attempt >= self.max_retries:
                    raise
                if lost:
                    logger.warning(
                        "database connection lost; reconnecting", extra={"error": str(exc)}
                    )
                    self.close()
            except psycopg2.Error as exc:
                if exc.pgcode not in RETRYABLE_SQLSTATES or attempt >= self.max_retries:
                    raise
            attempt += 1
            time.sleep(_reconnect_wait_s(attempt) if lost else _retry_wait_s(attempt))


def _retry_wait_s(attempt: int) -> float:
    # Growing, jittered waits so that sessions that collided do not collide again in lockstep.
    return random.uniform(0, min(1.0, 0.01 * 2**attempt))  # noqa: S311 - jitter, not security


def _reconnect_wait_s(attempt: int) -> float:
    # 0.25-0.5 s, then doubling up to 4-8 s: a restarting server is back within seconds.
    ceiling = min(8.0, 0.5 * 2 ** (attempt - 1))
    return random.uniform(ceiling / 2, ceiling)  # noqa: S311 - jitter, not security


def fetch_dicts(cur: Cursor) -> list[dict[str, Any]]:
    """The rows of the last statement as dictionaries keyed by column name."""
    if cur.description is None:
        return []
    names = [col.name for col in cur.description]
    return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
