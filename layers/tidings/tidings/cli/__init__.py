"""The ``tidings`` command line.

Each command lives in a module of this package with a ``register(subparsers)`` function that adds
its parser and sets ``handler`` (a callable taking the parsed arguments and returning an exit
code). A command module imports at its top only what its parser needs: ``tidings --help`` loads
every parser, and the database driver, the AWS SDK or the X-Ray SDK would make it slow.

Every command that has an API counterpart (status, apps, tokens, portal-link, endpoints,
event-types, send, messages, dead-letters, replay) works on a database or, given an API URL and a
token (``--api-url`` and ``--token``, or ``TIDINGS_API_URL`` and ``TIDINGS_TOKEN``), over a
deployed stack's API (``tidings.cli.backend``).

What the commands print is for standard output; their logs (the structured log lines of the code
they run, and the EMF metrics of the handlers ``tidings dev`` runs) go to standard error, so that
``--json`` output is one JSON document that can be piped.

Exit codes: 0 done; 1 the command failed at run time (the database, the API or a service out of
reach, a refusal such as an unknown id or, over the API, a 401, 403, 404 or 409); 2 the command
was not asked properly (bad or conflicting arguments, input the API or a use case cannot take, a
misnamed or invalid setting in the environment, nothing configured to act on), with a message
naming the problem, as argparse does. A command that needs the embedded PostgreSQL of the
``local`` extra, run without it, is such a problem too (2): nothing is tried, and trying again
cannot help until the extra is installed.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from tidings import __version__

COMMAND_MODULES = (
    "tidings.cli.migrate",
    "tidings.cli.dev",
    "tidings.cli.demo",
    "tidings.cli.status",
    "tidings.cli.apps",
    "tidings.cli.tokens",
    "tidings.cli.portal",
    "tidings.cli.endpoints",
    "tidings.cli.event_types",
    "tidings.cli.send",
    "tidings.cli.messages",
    "tidings.cli.dead_letters",
    "tidings.cli.replay",
    "tidings.cli.secrets",
    "tidings.cli.openapi",
    "tidings.cli.schema",
    "tidings.cli.completion",
)


EXIT_FAILURE = 1
EXIT_USAGE = 2


class CommandError(Exception):
    """A command cannot do what was asked; the message says why. Exit code 1."""

    exit_code = EXIT_FAILURE


class UsageError(CommandError):
    """A command was not asked properly (arguments, settings); the message says why. Exit code 2."""

    exit_code = EXIT_USAGE


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is when written to (tests swap it)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidings",
        description="Reliable outbound webhooks with PostgreSQL as the source of truth.",
    )
    parser.add_argument("--version", action="version", version=f"tidings {__version__}")
    from tidings.cli.backend import add_remote_options

    add_remote_options(parser, after_command=False)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from tidings.config import ConfigError, check_environment
    from tidings.local.embedded import LocalExtraMissing
    from tidings.observability import send_logs_to

    try:
        # Before any command, whether it reads settings or not: a misspelt TIDINGS_* variable
        # is named at once rather than silently ignored.
        check_environment(os.environ)
    except ConfigError as exc:
        print(f"tidings: {exc}", file=sys.stderr)
        return EXIT_USAGE
    before = send_logs_to(_CurrentStderr())  # type: ignore[arg-type]
    try:
        from tidings.cli.backend import remote_settings

        # Before any command: --api-url given to one that works locally only is refused.
        remote_settings(args)
        return int(args.handler(args))
    except CommandError as exc:
        print(f"tidings {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except (ConfigError, LocalExtraMissing) as exc:
        print(f"tidings {args.command}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    finally:
        if before is not None:
            send_logs_to(before)


if __name__ == "__main__":
    sys.exit(main())
