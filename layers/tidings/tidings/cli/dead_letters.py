"""``tidings dead-letters``: the dead letters of a time window, per endpoint (its origin), with
the action to take. A read-only view: it marks nothing, so the scheduled report still names each
dead letter. On the database, or over the API."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import AppChoice, add_app_option, parse_time, print_json, when
from tidings.local.progress import table

if TYPE_CHECKING:
    from tidings.client.models import DeadLetterReport
    from tidings.config import Settings
    from tidings.dal.connection import Database


def window_seconds(text: str) -> float:
    """An age such as ``30m``, ``2h`` or ``7d``, in seconds."""
    now = datetime.now(UTC)
    try:
        start = parse_time(text, now)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    seconds = (now - start).total_seconds()
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"window {text!r} must be an age like 30m, 2h or 7d")
    return seconds


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dead-letters", help="the dead-letter report: per endpoint, its pattern and the action"
    )
    parser.add_argument(
        "--window",
        type=window_seconds,
        default=None,
        metavar="AGE",
        help="report the dead letters of the last AGE (30m, 2h, 7d; at most 90d); default: the "
        "report's window",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser, "only this application's dead letters (default: every application's)")
    add_remote_options(parser, after_command=True)
    parser.set_defaults(handler=run)


def build(
    db: Database, settings: Settings, window_s: float | None = None, app: AppChoice | None = None
) -> DeadLetterReport:
    """The report from the database, as the API answers it."""
    from tidings.cli.backend import as_api_answer
    from tidings.client.models import DeadLetterReport
    from tidings.logic import status

    return as_api_answer(DeadLetterReport, status.dead_letter_report(db, settings, window_s, app))


def render(report: DeadLetterReport) -> str:
    """The report as a table, then each endpoint's action."""
    head = f"{report.total} dead letter(s) from {when(report.since)} to {when(report.until)} UTC"
    if report.is_empty:
        return head + "\nNothing was dead-lettered."
    rows: list[list[object]] = [
        [
            e.endpoint_id,
            e.application,
            e.url,
            e.dead_letters,
            e.pattern.replace("_", " "),
            e.top_error or "-",
            e.top_status_code,
            when(e.first_at),
            when(e.last_at),
            round(e.mean_attempts, 1),
        ]
        for e in report.endpoints
    ]
    headers = (
        "id",
        "app",
        "url",
        "dead",
        "pattern",
        "top error",
        "status",
        "first",
        "last",
        "attempts",
    )
    actions = [f"endpoint {e.endpoint_id} ({e.application}): {e.action}" for e in report.endpoints]
    return "\n".join([head, "", table(headers, rows), "", "What to do:", *actions])


def report_text(db: Database, settings: Settings) -> str:
    return render(build(db, settings))


def run(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        report = backend.dead_letters(args.window, args.app)
    if args.json:
        print_json(report)
    else:
        print(render(report))
    return 0
