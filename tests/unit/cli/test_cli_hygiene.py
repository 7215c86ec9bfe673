"""What every command keeps to: logs on standard error, one JSON document for --json, exit codes
(0 done, 1 failed at run time, 2 not asked properly), help for every argument, a light --help,
and one place for the version."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import tidings
from tidings.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[3]
# Commands whose output is not a result: a runtime that serves until stopped, and documents
# (the OpenAPI document, the schema, the shell completion script) written as they are.
NO_JSON = {"dev", "demo", "openapi", "schema", "completion"}
# Subcommands whose output is a JSON document already.
WRITES_JSON = {("event-types", "export")}


def _tidings(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TIDINGS_") and key != "DATABASE_URL"
    }
    environ["PYTHONPATH"] = f"{ROOT / 'layers' / 'tidings'}{os.pathsep}{ROOT}"
    environ.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", "import sys; from tidings.cli import main; sys.exit(main())", *argv],
        capture_output=True,
        text=True,
        env=environ,
        cwd=cwd,
        timeout=120,
        check=False,
    )


def test_an_unreachable_database_logs_on_stderr_only_and_exits_1() -> None:
    done = _tidings(
        "status",
        "--json",
        env={
            "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nothing?connect_timeout=2",
            "TIDINGS_DATABASE_MAX_RETRIES": "1",
        },
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    assert '"level":"WARNING"' in done.stderr
    assert "tidings status: cannot reach the database (DATABASE_URL)" in done.stderr


def test_nothing_to_act_on_is_a_usage_error_said_on_stderr(tmp_path: Path) -> None:
    # No DATABASE_URL and no dev runtime database here.
    done = _tidings("status", "--json", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert "DATABASE_URL is not set" in done.stderr


def test_a_usage_error_exits_2() -> None:
    done = _tidings("status", "--no-such-option")
    assert done.returncode == 2
    assert done.stdout == ""
    assert "unrecognized arguments: --no-such-option" in done.stderr
    assert _tidings("no-such-command").returncode == 2
    # A misspelt setting is named, as a bad argument is.
    done = _tidings("status", env={"TIDINGS_LEASE": "1"})
    assert done.returncode == 2
    assert "TIDINGS_LEASE" in done.stderr


def test_help_loads_no_x_ray_sdk_nor_database_driver_nor_completion() -> None:
    probe = (
        "import sys\n"
        "from tidings.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = ('aws_xray_sdk', 'psycopg2', 'boto3', 'botocore', 'pydantic', 'shtab')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] in heavy}))\n"
    )
    environ = dict(os.environ)
    environ["PYTHONPATH"] = f"{ROOT / 'layers' / 'tidings'}{os.pathsep}{ROOT}"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"


def _commands(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield path, parser
    for action in subcommands:
        for name, sub in action.choices.items():
            yield from _commands(sub, (*path, name))


def _arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions
        if not isinstance(
            a, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction
        )
    ]


def test_every_argument_has_help() -> None:
    missing = [
        f"tidings {' '.join(path)} {action.option_strings or action.dest}"
        for path, parser in _commands(build_parser())
        for action in _arguments(parser)
        if not action.help
    ]
    assert missing == []


def test_every_command_with_a_result_has_json() -> None:
    without = [
        " ".join(path)
        for path, parser in _commands(build_parser())
        if path[0] not in NO_JSON
        and tuple(path) not in WRITES_JSON
        and not any("--json" in action.option_strings for action in _arguments(parser))
    ]
    assert without == []


def test_the_version_is_written_once(capsys: pytest.CaptureFixture[str]) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"]
    assert "version" in project["project"]["dynamic"]
    dynamic = project["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "tidings.__version__"}
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"tidings {tidings.__version__}\n"
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## [{tidings.__version__}]" in changelog


def test_the_reencrypt_batch_default_is_the_upkeep_pass_s() -> None:
    from tidings.cli.secrets import REENCRYPT_BATCH
    from tidings.secrets import upkeep

    assert REENCRYPT_BATCH == upkeep.REENCRYPT_BATCH


def test_json_is_printed_as_one_document(capsys: pytest.CaptureFixture[str]) -> None:
    from tidings.cli.support import print_json

    print_json({"a": [1, 2]})
    assert json.loads(capsys.readouterr().out) == {"a": [1, 2]}
