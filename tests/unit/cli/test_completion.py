"""``tidings completion bash|zsh``: a script that knows every command and subcommand, and that
bash runs to complete commands, choices and paths."""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings.cli import build_parser, main
from tidings.cli.completion import SHELLS, script


def _command_names(parser: argparse.ArgumentParser) -> Iterator[str]:
    """The name of every command and subcommand, at any depth."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, subparser in action.choices.items():
                yield name
                yield from _command_names(subparser)


@pytest.mark.parametrize("shell", SHELLS)
def test_the_script_names_every_command_and_subcommand(shell: str) -> None:
    text = script(shell)
    names = sorted(set(_command_names(build_parser())))
    assert {"completion", "tokens", "create", "dead-letters", "rotate-secret"} <= set(names)
    missing = [
        name for name in names if not re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
    ]
    assert missing == []
    assert text.endswith("\n")


def test_the_command_prints_the_script(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    assert capsys.readouterr().out == script("bash")


def test_another_shell_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["completion", "cmd.exe"])
    assert exit_info.value.code == 2
    assert "invalid choice: 'cmd.exe'" in capsys.readouterr().err


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_commands_choices_and_paths(tmp_path: Path) -> None:
    (tmp_path / "completion.bash").write_text(script("bash"))
    (tmp_path / "a-folder").mkdir()
    (tmp_path / "a-file").touch()
    # What bash offers for the last word of each line, as it calls the completion function.
    probe = r"""
source ./completion.bash
offer() {
  COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
  COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
  _shtab_tidings; echo "${COMPREPLY[*]}"
}
offer tidings tok
offer tidings tokens ''
offer tidings tokens create --scope ''
offer tidings dev --data-dir ''
offer tidings schema --output ''
"""
    done = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", probe],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    offers = done.stdout.splitlines()
    assert offers[0] == "tokens"
    assert offers[1].split() == ["create", "list", "revoke"]
    assert offers[2].split() == ["admin", "producer", "app", "app_read"]
    assert offers[3].split() == ["a-folder"]
    assert sorted(offers[4].split()) == ["a-file", "a-folder", "completion.bash"]
