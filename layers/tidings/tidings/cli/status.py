"""``tidings status``: the health summary, each application's part and every endpoint's
figures; ``--app`` narrows all of it to one application. On the database, or over the API
(the whole queue: an admin token's; one application: its own tokens too)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import add_app_option, print_json
from tidings.local.progress import ENDPOINT_HEADERS, endpoint_rows, table

if TYPE_CHECKING:
    from tidings.client.models import ApplicationQueue, EndpointFigures, QueueSummary


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="queue health and per-endpoint figures")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser, "only this application's figures (default: the whole queue)")
    add_remote_options(parser, after_command=True)
    parser.set_defaults(handler=run)


def summary_rows(summary: QueueSummary) -> list[list[object]]:
    recent = f"last {summary.recent_s / 3600:g} h"
    age = summary.oldest_undelivered_age_s
    oldest = "-" if age is None else f"{age:,.0f} s"
    if age is not None and summary.oldest_undelivered_application:
        oldest += f" ({summary.oldest_undelivered_application})"
    return [
        ["pending", summary.pending],
        ["awaiting retry", summary.awaiting_retry],
        ["in flight", summary.in_flight],
        ["dead letters", summary.dead_letters],
        [f"delivered ({recent})", summary.delivered_recently],
        [f"failed attempts ({recent})", summary.failed_attempts_recently],
        [f"dead-lettered ({recent})", summary.dead_lettered_recently],
        ["oldest undelivered", oldest],
        ["delivery latency mean", _ms(summary.delivery_mean_ms)],
        ["delivery latency p95", _ms(summary.delivery_p95_ms)],
        ["open circuits", summary.open_circuits],
        ["disabled endpoints", summary.disabled_endpoints],
    ]


def application_rows(figures: list[ApplicationQueue]) -> list[list[object]]:
    return [
        [
            f.app_uid,
            f.pending,
            f.awaiting_retry,
            f.in_flight,
            f.dead_letters,
            "-" if f.oldest_undelivered_age_s is None else f"{f.oldest_undelivered_age_s:,.0f} s",
        ]
        for f in figures
    ]


def lane_cell(endpoint: EndpointFigures) -> str:
    """``slow (≤ 10 in flight)``: the lane, and the cap on its deliveries in flight if any."""
    cap = endpoint.in_flight_limit
    return endpoint.lane if cap is None else f"{endpoint.lane} (≤ {cap} in flight)"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def run(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        report = backend.status(args.app)
    if args.json:
        print_json(report)
        return 0
    heading = "queue" if report.application is None else f"application {report.application}"
    print(table((heading, "now"), summary_rows(report.summary)))
    print()
    if report.applications:
        headers = ("application", "pending", "retrying", "in flight", "dead", "oldest")
        print(table(headers, application_rows(report.applications)))
        print()
    if report.endpoints:
        rows = [
            [e.app_uid, *row, lane_cell(e)]
            for e, row in zip(report.endpoints, endpoint_rows(report.endpoints), strict=True)
        ]
        print(table(("app", *ENDPOINT_HEADERS, "lane"), rows))
    else:
        print("no endpoints")
    return 0
