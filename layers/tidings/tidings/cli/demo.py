"""``tidings demo``: the whole system at work on this machine, in about two minutes."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tidings.cli import CommandError
from tidings.cli.dev import positive_float, positive_int

if TYPE_CHECKING:
    from tidings.local.demo import DemoOutcome


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the dev runtime against demo receivers and show delivery live",
        description=(
            "Start the dev runtime (its own temporary embedded PostgreSQL) with receivers on "
            "loopback that are healthy, slow, flaky, rate limited, gone, dead, and hostile "
            "(unusable Retry-After, a 50 MB body, a redirect to a private address, 401); send "
            "events; show progress per endpoint; print the dead-letter report. Delays are "
            "shortened by settings (tidings.local.demo.DEMO_SETTINGS), which the environment can "
            "override."
        ),
    )
    parser.add_argument("--events", type=positive_int, default=5000, help="events to send (5000)")
    parser.add_argument(
        "--timeout",
        type=positive_float,
        default=170.0,
        metavar="SECONDS",
        help="give up waiting for every message to settle after this long (170)",
    )
    parser.add_argument(
        "--senders", type=positive_int, default=8, help="sender execution environments (8)"
    )
    parser.add_argument("--seed", type=int, default=None, help="make the run repeatable")
    parser.add_argument(
        "--serve",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="at the end, print a link to the consumer portal of the demo's application and keep "
        "serving until Ctrl-C (default: when the output is a terminal)",
    )
    parser.add_argument(
        "--functions-dir", type=Path, default=None, metavar="DIR", help=argparse.SUPPRESS
    )
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tidings.cli.dead_letters import report_text
    from tidings.config import ConfigError
    from tidings.local.demo import DemoOptions, run_demo
    from tidings.local.lambda_env import HandlerNotFound

    # Two warnings that say nothing to someone watching the demo: where the embedded server puts
    # its lock file, and scheduled handlers with no metric to report in a run.
    warnings.filterwarnings("ignore", message="XDG_RUNTIME_DIR is not set")
    warnings.filterwarnings("ignore", message="No application metrics to publish")
    options = DemoOptions(
        events=args.events,
        timeout_s=args.timeout,
        sender_environments=args.senders,
        seed=args.seed,
    )
    serving = sys.stdout.isatty() if args.serve is None else args.serve
    try:
        outcome = run_demo(
            options,
            sys.stdout,
            report_text,
            functions_dir=args.functions_dir,
            serve=serve_portal if serving else None,
        )
    except (ConfigError, ValueError, HandlerNotFound) as exc:
        raise CommandError(str(exc)) from exc
    if not serving:
        print_outcome(outcome)
        print(
            "\n`tidings demo --serve` ends with a link to the consumer portal, and keeps serving."
        )
    if not outcome.settled:
        print(
            f"tidings demo: messages were still in progress after {args.timeout:.0f}s",
            file=sys.stderr,
        )
        return 1
    return 0


def serve_portal(outcome: DemoOutcome, link: str, out: TextIO) -> None:
    """The demo's results, then a link to the portal while the runtime keeps serving, until
    SIGINT (Ctrl-C) or SIGTERM."""
    print_outcome(outcome, out)
    print(
        "\nConsumer portal of the demo's application (the link opens once, within an hour):\n"
        f"  {link}\nServing until Ctrl-C.",
        file=out,
        flush=True,
    )
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    stop.wait()
    print("\nstopping", file=out, flush=True)


def print_outcome(outcome: DemoOutcome, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    delivered = sum(e.delivered for e in outcome.endpoints)
    dead = sum(e.dead_letter for e in outcome.endpoints)
    print("\nDead-letter report\n------------------", file=stream)
    print(outcome.report, file=stream)
    if outcome.alerts:
        print(f"\nAlerts published ({len(outcome.alerts)}):", file=stream)
        for subject in outcome.alerts:
            print(f"  - {subject}", file=stream)
    print(
        f"\ndemo {'finished' if outcome.settled else 'stopped'} after {outcome.elapsed_s:.0f}s: "
        f"{delivered:,} delivered, {dead:,} dead letters",
        file=stream,
        flush=True,
    )
