"""Throwaway PostgreSQL clusters with chosen settings, for the tests that need a server of their
own: one started fresh (no roles yet, as on a new RDS instance), or one configured like the
deployed parameter group.

Binaries: ``TIDINGS_TEST_POSTGRES_BIN`` when set; the machine's PostgreSQL 15
(``/usr/lib/postgresql/15/bin``, as on CI) when present; and the PostgreSQL 16 that the pgserver
package ships, which is always there. As root, the server runs as the ``postgres`` (else
``pgserver``) system user, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import psycopg2.extensions

SYSTEM_POSTGRES_15 = Path("/usr/lib/postgresql/15/bin")


def binaries() -> dict[str, Path]:
    """The PostgreSQL binaries a test can start clusters from, by a name for each."""
    import pgserver

    found: dict[str, Path] = {}
    chosen = os.environ.get("TIDINGS_TEST_POSTGRES_BIN")
    if chosen:
        found["chosen"] = Path(chosen)
    if (SYSTEM_POSTGRES_15 / "initdb").exists():
        found["pg15"] = SYSTEM_POSTGRES_15
    found["pg16"] = Path(pgserver.__file__).parent / "pginstall" / "bin"
    return found


def deployed_like_binaries() -> Path:
    """Binaries for a cluster configured like the deployment: the machine's PostgreSQL 15 when
    there is one (CI), else pgserver's PostgreSQL 16."""
    found = binaries()
    return found.get("chosen") or found.get("pg15") or found["pg16"]


@dataclass
class Cluster:
    bin_dir: Path
    root: Path
    port: int

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def log_file(self) -> Path:
        return self.root / "server.log"

    def dsn(self, dbname: str = "postgres", user: str = "postgres", password: str = "") -> str:
        """A TCP connection (which checks passwords) when a password is given, else the Unix
        socket (trusted) as ``user``."""
        if password:
            return psycopg2.extensions.make_dsn(
                host="127.0.0.1", port=self.port, dbname=dbname, user=user, password=password
            )
        return psycopg2.extensions.make_dsn(
            host=str(self.root), port=self.port, dbname=dbname, user=user
        )

    def log_text(self) -> str:
        return self.log_file.read_text(encoding="utf-8", errors="replace")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _server_user() -> pwd.struct_passwd | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "pgserver"):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            continue
    raise RuntimeError("running as root, but there is no postgres or pgserver user to run as")


def _run(bin_dir: Path, args: list[str], user: pwd.struct_passwd | None) -> None:
    subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        check=True,
        capture_output=True,
        user=user.pw_uid if user else None,
        group=user.pw_gid if user else None,
        timeout=120,
    )


@contextlib.contextmanager
def throwaway_cluster(bin_dir: Path, settings: Mapping[str, str] = {}) -> Iterator[Cluster]:
    """A new cluster from ``bin_dir`` with ``settings`` in its postgresql.conf, started on a free
    port (TCP connections need a password; the Unix socket in its folder is trusted), its
    server log in ``Cluster.log_file``; stopped and removed afterwards."""
    user = _server_user()
    root = Path(tempfile.mkdtemp(prefix="tidings-cluster-"))
    os.chmod(root, 0o755)
    if user is not None:
        os.chown(root, user.pw_uid, user.pw_gid)
    cluster = Cluster(bin_dir, root, _free_port())
    started = False
    try:
        _run(
            bin_dir,
            [
                "initdb",
                "-D",
                str(cluster.data_dir),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "-E",
                "UTF8",
                "--no-sync",
            ],
            user,
        )
        conf = {
            "port": str(cluster.port),
            "listen_addresses": "'127.0.0.1'",
            "unix_socket_directories": f"'{root}'",
            "fsync": "off",
            **settings,
        }
        with (cluster.data_dir / "postgresql.conf").open("a", encoding="utf-8") as handle:
            handle.write("".join(f"{name} = {value}\n" for name, value in conf.items()))
        _run(
            bin_dir,
            ["pg_ctl", "-D", str(cluster.data_dir), "-l", str(cluster.log_file), "-w", "start"],
            user,
        )
        started = True
        yield cluster
    finally:
        if started:
            _run(bin_dir, ["pg_ctl", "-D", str(cluster.data_dir), "-m", "fast", "-w", "stop"], user)
        shutil.rmtree(root, ignore_errors=True)
