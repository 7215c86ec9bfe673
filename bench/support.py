"""What the benchmarks share: a fresh migrated database on the chosen server, and timing."""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg2
import psycopg2.extensions

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "layers" / "tidings"))

from tidings import migrations  # noqa: E402
from tidings.config import Settings  # noqa: E402
from tidings.dal.secrets import set_endpoint_secret  # noqa: E402
from tidings.secrets.keyring import Keyring  # noqa: E402
from tidings.secrets.master_keys import configured_master_key  # noqa: E402

# Signing secrets are encrypted with a key of the benchmarks' own unless one is given, in this
# process and in the handlers and runtimes it starts.
os.environ.setdefault("TIDINGS_SECRETS_KEY", base64.b64encode(bytes(32)).decode("ascii"))


@functools.cache
def keyring() -> Keyring:
    return Keyring(configured_master_key(Settings.from_env()), data_key_max_age_s=86400)


def give_secret(cur: psycopg2.extensions.cursor, endpoint_ids: list[int], secret: str) -> None:
    """Make ``secret`` the signing secret of each endpoint, encrypted as Tidings stores it."""
    for endpoint_id in endpoint_ids:
        secret_id, sealed = keyring().seal(cur, endpoint_id, secret)
        set_endpoint_secret(
            cur,
            endpoint_id,
            secret_id=secret_id,
            data_key_id=sealed.data_key_id,
            ciphertext=sealed.ciphertext,
            overlap_s=0,
            max_secrets=1,
        )


def _with_dbname(dsn: str, dbname: str) -> str:
    params = psycopg2.extensions.parse_dsn(dsn)
    params["dbname"] = dbname
    return psycopg2.extensions.make_dsn(**params)


@contextlib.contextmanager
def server_dsn() -> Iterator[str]:
    """``DATABASE_URL`` when set, else an embedded PostgreSQL in a temporary folder."""
    if os.environ.get("DATABASE_URL"):
        yield os.environ["DATABASE_URL"]
        return
    import pgserver

    server = pgserver.get_server(
        Path(tempfile.mkdtemp(prefix="tidings-bench-pg-")), cleanup_mode="delete"
    )
    try:
        yield server.get_uri()
    finally:
        server.cleanup()


@contextlib.contextmanager
def fresh_database(dsn: str) -> Iterator[str]:
    """A new database with the migrations applied, dropped afterwards."""
    name = f"tidings_bench_{uuid.uuid4().hex[:10]}"
    admin = psycopg2.connect(dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute(f"CREATE DATABASE {name}")
    url = _with_dbname(dsn, name)
    conn = psycopg2.connect(url)
    migrations.migrate(conn)
    conn.close()
    try:
        yield url
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
        admin.close()


def make_naive_tables(cur: psycopg2.extensions.cursor) -> None:
    """The naive baselines' own tables, ``naive_messages`` (a copy of the seeded message rows)
    and ``naive_attempts`` (empty), each as a plain table with the columns, constraints and
    indexes of Tidings' own (``tidings.message_rows``, ``tidings.attempt_log``) and no foreign
    key. Tidings' ``messages`` and ``attempts`` are views whose writes its triggers spread over
    several tables; a naive loop writing there would pay for that bookkeeping, which it would
    not have."""
    cur.execute("CREATE TABLE public.naive_messages (LIKE tidings.message_rows INCLUDING ALL)")
    cur.execute(
        "INSERT INTO public.naive_messages OVERRIDING SYSTEM VALUE"
        " SELECT * FROM tidings.message_rows"
    )
    cur.execute("CREATE TABLE public.naive_attempts (LIKE tidings.attempt_log INCLUDING ALL)")


class Stopwatch:
    """Wall time and this process's CPU time of a block, and the part of that CPU time the kernel
    spent on its behalf (``system``: sockets, locks, thread switches)."""

    def __enter__(self) -> Stopwatch:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()
        self.system = os.times().system
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.wall
        self.cpu = time.process_time() - self.cpu
        self.system = os.times().system - self.system


def process_stats() -> dict[int, list[str]]:
    """Every readable process's /proc/<pid>/stat, as the fields after its command name (so the
    first is its state, the second its parent's pid, the twelfth and thirteenth its CPU)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            found[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
    return found


def process_cpu_s(pid: int) -> float | None:
    """CPU seconds so far of one process (user and system), or None when it is not here."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ServerCpu:
    """CPU seconds spent by a PostgreSQL server: the postmaster, the processes it started that
    are still running, and those that ended (counted in the postmaster's children's times).

    Read from /proc, so only where the server runs on this machine (``available`` says whether
    it does). The server is found by the pid in the first line of its ``postmaster.pid``.
    """

    def __init__(self, postmaster_pid: int | None) -> None:
        self.pid = postmaster_pid
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    @classmethod
    def of(cls, dsn: str) -> ServerCpu:
        """The server behind ``dsn``, when its data folder is readable here."""
        try:
            conn = psycopg2.connect(dsn)
            with conn.cursor() as cur:
                cur.execute("SELECT current_setting('data_directory')")
                data_dir = Path(cur.fetchone()[0])
            conn.close()
            pid = int((data_dir / "postmaster.pid").read_text().splitlines()[0])
            Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError, psycopg2.Error):
            return cls(None)
        return cls(pid)

    @property
    def available(self) -> bool:
        return self.pid is not None

    def seconds(self) -> float | None:
        """The server's CPU time so far, every process of it included."""
        if self.pid is None:
            return None
        total = self._times(self.pid, with_children=True)
        for child in self._children():
            total += self._times(child, with_children=False)
        return total / self.tick

    def _children(self) -> list[int]:
        # Field 4 of stat: the parent's pid.
        return [pid for pid, fields in process_stats().items() if int(fields[1]) == self.pid]

    @staticmethod
    def _times(pid: int, *, with_children: bool) -> int:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            return 0  # ended meanwhile: its time is in the postmaster's children's times
        # utime, stime (fields 14, 15), and the times of waited-for children (16, 17).
        used = int(fields[11]) + int(fields[12])
        return used + (int(fields[13]) + int(fields[14]) if with_children else 0)
