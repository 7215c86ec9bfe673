"""The ``tidings`` command line.

Each command lives in a module of this package with a ``register(subparsers)`` function that adds
its parser and sets ``handler`` (a callable taking the parsed arguments and returning an exit
code). Bad arguments exit with code 2 and a message naming the problem, as argparse does.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from tidings import __version__
from tidings.config import ConfigError, check_environment

COMMAND_MODULES = (
    "tidings.cli.migrate",
    "tidings.cli.dev",
    "tidings.cli.demo",
    "tidings.cli.status",
    "tidings.cli.apps",
    "tidings.cli.tokens",
    "tidings.cli.portal",
    "tidings.cli.endpoints",
    "tidings.cli.send",
    "tidings.cli.messages",
    "tidings.cli.dead_letters",
    "tidings.cli.replay",
    "tidings.cli.secrets",
    "tidings.cli.openapi",
    "tidings.cli.schema",
)


class CommandError(Exception):
    """A command cannot do what was asked; the message says why. Exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidings",
        description="Reliable outbound webhooks with PostgreSQL as the source of truth.",
    )
    parser.add_argument("--version", action="version", version=f"tidings {__version__}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        # Before any command, whether it reads settings or not: a misspelt TIDINGS_* variable
        # is named at once rather than silently ignored.
        check_environment(os.environ)
    except ConfigError as exc:
        print(f"tidings: {exc}", file=sys.stderr)
        return 2
    try:
        return int(args.handler(args))
    except CommandError as exc:
        print(f"tidings {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
