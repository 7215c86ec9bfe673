"""Without the ``local`` extra (no pgserver), a command that would start the embedded PostgreSQL
names the extra to install and exits 2, before it starts or makes anything; no traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
# None in sys.modules makes `import pgserver` fail as it does where it is not installed.
WITHOUT_PGSERVER = (
    "import sys; sys.modules['pgserver'] = None; from tidings.cli import main; sys.exit(main())"
)


def _tidings_without_pgserver(*argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TIDINGS_") and key != "DATABASE_URL"
    }
    environ["PYTHONPATH"] = str(ROOT / "layers" / "tidings")
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_PGSERVER, *argv],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def _names_the_extra(done: subprocess.CompletedProcess[str], command: str) -> None:
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.startswith(f"tidings {command}: the embedded PostgreSQL is not installed")
    assert "pip install 'tidings[local]'" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "argv",
    [["demo", "--events", "200"], ["dev", "--no-api", "--data-dir", "data"], ["schema"]],
    ids=["demo", "dev", "schema"],
)
def test_a_command_that_starts_the_embedded_postgres_names_the_extra(
    argv: list[str], tmp_path: Path
) -> None:
    done = _tidings_without_pgserver(*argv, cwd=tmp_path)
    _names_the_extra(done, argv[0])
    assert list(tmp_path.iterdir()) == []


def test_an_operator_command_on_the_dev_runtimes_database_names_the_extra(tmp_path: Path) -> None:
    # No DATABASE_URL, and the database a `tidings dev` left in ./.tidings.
    pgdata = tmp_path / ".tidings" / "pgdata"
    pgdata.mkdir(parents=True)
    (pgdata / "PG_VERSION").write_text("16\n")
    _names_the_extra(_tidings_without_pgserver("status", cwd=tmp_path), "status")
