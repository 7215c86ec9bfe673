"""``tidings dead-letters``: the dead letters of a time window, per endpoint, with the action to
take. A read-only view: it marks nothing, so the scheduled report still names each dead letter."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tidings.cli.support import (
    AppChoice,
    add_app_option,
    chosen_app,
    parse_time,
    print_json,
    target,
    when,
)
from tidings.local.progress import table

if TYPE_CHECKING:
    from tidings.config import Settings
    from tidings.dal.connection import Database
    from tidings.maintenance.dead_letter_report import DeadLetterReport


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
        help="report the dead letters of the last AGE (30m, 2h, 7d); default: the report's window",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser, "only this application's dead letters (default: every application's)")
    parser.set_defaults(handler=run)


def build(
    db: Database,
    settings: Settings,
    window_s: float | None = None,
    app: AppChoice | None = None,
) -> DeadLetterReport:
    from tidings.maintenance.dead_letter_report import PatternRules, build_report

    window = window_s or settings.dead_letter_report_window_s
    rules = PatternRules.from_settings(settings)
    app_id = None if app is None else app.id
    return db.run(lambda cur: build_report(cur, window, rules=rules, app_id=app_id))


def render(report: DeadLetterReport) -> str:
    """The report as a table, then each endpoint's action."""
    head = f"{report.total} dead letter(s) from {when(report.since)} to {when(report.until)} UTC"
    if report.is_empty:
        return head + "\nNothing was dead-lettered."
    rows: list[list[object]] = [
        [
            e.stats.endpoint_id,
            e.stats.app_uid,
            e.stats.url,
            e.stats.dead_letters,
            e.pattern.value.replace("_", " "),
            e.stats.top_error or "-",
            e.stats.top_status_code,
            when(e.stats.first_at),
            when(e.stats.last_at),
            round(e.stats.mean_attempts, 1),
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
    actions = [
        f"endpoint {e.stats.endpoint_id} ({e.stats.app_uid}): {e.action}" for e in report.endpoints
    ]
    return "\n".join([head, "", table(headers, rows), "", "What to do:", *actions])


def report_text(db: Database, settings: Settings) -> str:
    return render(build(db, settings))


def run(args: argparse.Namespace) -> int:
    with target() as where:
        app = None if args.app is None else chosen_app(where, args.app)
        report = build(where.db, where.settings, args.window, app)
    if args.json:
        print_json(report.to_dict())
    else:
        print(render(report))
    return 0
