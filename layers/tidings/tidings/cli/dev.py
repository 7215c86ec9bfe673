"""``tidings dev``: run the whole system on this machine (see ``tidings.local.runtime``)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

from tidings.cli import CommandError, UsageError
from tidings.cli.support import secrets_key_notice
from tidings.deployment import SCHEDULED_INTERVALS_S as DEFAULT_INTERVALS_S


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be positive")
    return value


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def port_number(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not within 0..65535")
    return value


def add_runtime_arguments(parser: argparse.ArgumentParser) -> None:
    """Options shared by ``dev`` and ``demo``."""
    parser.add_argument(
        "--senders",
        type=positive_int,
        default=4,
        help="sender execution environments consuming the queue (default 4)",
    )
    parser.add_argument(
        "--sender-processes",
        action="store_true",
        help="run each sender environment in a process of its own, as on Lambda, instead of on "
        "a thread of this one: slower to start, more deliveries per second on several cores",
    )
    parser.add_argument(
        "--claimer-slice",
        type=positive_float,
        default=10.0,
        metavar="SECONDS",
        help="length of each claimer invocation before the next starts (default 10)",
    )
    for name, interval in DEFAULT_INTERVALS_S.items():
        flag = name.replace("_", "-")
        parser.add_argument(
            f"--{flag}-every",
            dest=f"{name}_every",
            type=positive_float,
            default=None,
            metavar="SECONDS",
            help=f"run the {flag} function every SECONDS (default {interval:.0f})",
        )
    parser.add_argument(
        "--functions-dir",
        type=Path,
        metavar="DIR",
        default=None,
        help="run stand-in handlers from DIR/<name>/app.py, each a whole handler, instead of the "
        "package's own (tidings.handlers)",
    )


def intervals_from(args: argparse.Namespace, defaults: Mapping[str, float]) -> dict[str, float]:
    return {name: getattr(args, f"{name}_every") or defaults[name] for name in DEFAULT_INTERVALS_S}


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dev",
        help="run Tidings locally: embedded PostgreSQL, local queue, the Lambda handlers, the API",
        description=(
            "Run the whole system on this machine with the same handlers as on Lambda. Uses "
            "DATABASE_URL when set, else an embedded PostgreSQL in DATA_DIR; real SQS/SNS when "
            "AWS_ENDPOINT_URL is set, else a local queue. Stop with Ctrl-C."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="API address (default 127.0.0.1)")
    parser.add_argument(
        "--port", type=port_number, default=8080, help="API port, 0 for any free one (default 8080)"
    )
    parser.add_argument("--no-api", action="store_true", help="do not serve the ingest API")
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=Path(".tidings"),
        metavar="DIR",
        help="embedded database and alerts file (default ./.tidings)",
    )
    add_runtime_arguments(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tidings.config import ConfigError
    from tidings.local.runtime import RuntimeConfig, dev_settings

    try:
        settings = dev_settings()
        config = RuntimeConfig(
            data_dir=args.data_dir,
            host=args.host,
            port=args.port,
            serve_api=not args.no_api,
            sender_environments=args.senders,
            sender_processes=args.sender_processes,
            claimer_slice_s=args.claimer_slice,
            intervals_s=intervals_from(args, DEFAULT_INTERVALS_S),
            functions_dir=args.functions_dir,
        )
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from exc
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    # The lines printed here are for people, on standard output; what the handlers print (their
    # EMF metrics, as on Lambda) joins their logs on standard error.
    out = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):
        _serve(settings, config, stop, out)
    return 0


def _serve(settings: Any, config: Any, stop: threading.Event, out: TextIO) -> None:
    from tidings.local.lambda_env import HandlerNotFound
    from tidings.local.runtime import DevRuntime
    from tidings.local.sender_environments import EnvironmentNotReady
    from tidings.secrets.master_keys import KeyUnavailable

    runtime = DevRuntime(settings, config)
    try:
        runtime.start()
    except (HandlerNotFound, EnvironmentNotReady) as exc:
        runtime.stop()
        raise CommandError(str(exc)) from exc
    except OSError as exc:
        runtime.stop()
        raise CommandError(f"cannot start: {exc}") from exc
    except (KeyUnavailable, ValueError) as exc:
        # The signing secrets' key: TIDINGS_SECRETS_KEY malformed, or the wrong key for them.
        runtime.stop()
        raise CommandError(str(exc)) from exc
    if runtime.keyring is not None:
        print(secrets_key_notice(runtime.keyring.master), file=out, flush=True)
    if runtime.api is not None:
        if runtime.open_access():
            print(
                "tidings dev: no API token exists yet, so requests from loopback are accepted "
                "without one (sent to 127.0.0.1, localhost or [::1], and by no web page from "
                "elsewhere); the first token (tidings tokens create --scope admin) ends that, "
                "and from then on every request needs Authorization: Bearer <token>, as on AWS",
                file=out,
                flush=True,
            )
        else:
            print(
                "tidings dev: every API request needs Authorization: Bearer <token>, as on AWS",
                file=out,
                flush=True,
            )
    where = runtime.api.url if runtime.api is not None else "no API"
    database = "embedded PostgreSQL" if runtime.embedded is not None else "DATABASE_URL"
    queue = "SQS at AWS_ENDPOINT_URL" if settings.aws_endpoint_url else "local queue"
    print(
        f"tidings dev: ready  api={where}  database={database}  queue={queue}  "
        f"alerts={config.alerts_path}",
        file=out,
        flush=True,
    )
    while not stop.wait(0.5) and runtime.failure is None:
        pass
    print("tidings dev: stopping (finishing in-flight work)", file=sys.stderr, flush=True)
    runtime.stop()
    print("tidings dev: stopped", file=sys.stderr, flush=True)
    if runtime.failure is not None:
        raise CommandError(runtime.failure)
