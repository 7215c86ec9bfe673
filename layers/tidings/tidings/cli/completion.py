"""``tidings completion bash|zsh``: the shell completion script of the ``tidings`` command.

The script is generated from the command's own argument parser by shtab, so it knows every
command, subcommand, option and choice there is, and it never runs Python while completing.
shtab is imported by this command alone: ``tidings --help`` never loads it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

SHELLS = ("bash", "zsh")
# How to load each script, for the command's help (the README says the same).
_LOADING = """\
bash:  echo 'eval "$(tidings completion bash)"' >> ~/.bashrc
zsh:   echo 'eval "$(tidings completion zsh)"' >> ~/.zshrc   (after compinit), or save it
       as _tidings in a folder of $fpath: tidings completion zsh > ~/.zfunc/_tidings"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "completion",
        help="print the shell completion script for bash or zsh",
        description=(
            "Print the completion script of tidings for SHELL (its commands, subcommands, options "
            f"and choices). Load it from your shell's start-up file:\n\n{_LOADING}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("shell", choices=SHELLS, help="the shell to complete in: bash or zsh")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    sys.stdout.write(script(args.shell))
    return 0


def script(shell: str) -> str:
    """The completion script of the whole ``tidings`` command for ``shell``."""
    import shtab

    from tidings.cli import build_parser

    parser = build_parser()
    # An option whose metavar is FILE or DIR completes file or directory names; others complete
    # their choices, or nothing (an id or a URL is not a file).
    for action in _actions(parser):
        if action.metavar == "FILE":
            action.complete = shtab.FILE  # type: ignore[attr-defined]
        elif action.metavar == "DIR":
            action.complete = shtab.DIRECTORY  # type: ignore[attr-defined]
    text = str(shtab.complete(parser, shell=shell))
    # Ends with a newline, so that printed to a terminal it leaves the prompt on a line of its own.
    return text if text.endswith("\n") else text + "\n"


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    """Every argument of ``parser`` and of its subcommands, at any depth."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in action.choices.values():
                yield from _actions(subparser)
        else:
            yield action
