"""``tidings status``: the health summary, each application's part and every endpoint's
figures; ``--app`` narrows all of it to one application."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from tidings.cli.support import add_app_option, chosen_app, print_json, target
from tidings.local.progress import ENDPOINT_HEADERS, endpoint_rows, table

if TYPE_CHECKING:
    from tidings.dal.health import ApplicationFigures
    from tidings.dal.operator import EndpointProgress
    from tidings.maintenance.health import HealthSummary


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="queue health and per-endpoint figures")
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser, "only this application's figures (default: the whole queue)")
    parser.set_defaults(handler=run)


def summary_rows(summary: HealthSummary) -> list[list[object]]:
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


def application_rows(figures: list[ApplicationFigures]) -> list[list[object]]:
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


def lane_cell(endpoint: EndpointProgress) -> str:
    """``slow (≤ 10 in flight)``: the lane, and the cap on its deliveries in flight if any."""
    cap = endpoint.in_flight_limit
    return endpoint.lane if cap is None else f"{endpoint.lane} (≤ {cap} in flight)"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def run(args: argparse.Namespace) -> int:
    from tidings.dal.health import application_figures
    from tidings.dal.operator import endpoint_progress
    from tidings.maintenance.health import health_summary

    with target() as where:
        app = None if args.app is None else chosen_app(where, args.app)
        app_id = None if app is None else app.id
        summary = where.db.run(lambda cur: health_summary(cur, where.settings, app_id=app_id))
        since = summary.checked_at - timedelta(seconds=summary.recent_s)
        apps = where.db.run(
            lambda cur: application_figures(
                cur, now=summary.checked_at, uids=None if app is None else [app.uid]
            )
        )
        endpoints = where.db.run(
            lambda cur: endpoint_progress(
                cur,
                since,
                app_id,
                slow_lane_max_in_flight=where.settings.slow_lane_max_in_flight,
                untried_max_in_flight=where.settings.untried_max_in_flight,
            )
        )
    if args.json:
        print_json(
            {
                "application": None if app is None else app.uid,
                "summary": summary.to_dict(),
                "applications": apps,
                "endpoints": endpoints,
            }
        )
        return 0
    heading = "queue" if app is None else f"application {app.uid}"
    print(table((heading, "now"), summary_rows(summary)))
    print()
    if apps:
        headers = ("application", "pending", "retrying", "in flight", "dead", "oldest")
        print(table(headers, application_rows(apps)))
        print()
    if endpoints:
        rows = [
            [e.app_uid, *row, lane_cell(e)]
            for e, row in zip(endpoints, endpoint_rows(endpoints), strict=True)
        ]
        print(table(("app", *ENDPOINT_HEADERS, "lane"), rows))
    else:
        print("no endpoints")
    return 0
