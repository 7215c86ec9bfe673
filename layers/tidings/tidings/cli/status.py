"""``tidings status``: the health summary and every endpoint's figures."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import Any

from tidings.cli.support import print_json, target
from tidings.dal.operator import endpoint_progress
from tidings.local.progress import ENDPOINT_HEADERS, endpoint_rows, table
from tidings.maintenance.health import HealthSummary, health_summary


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("status", help="queue health and per-endpoint figures")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def summary_rows(summary: HealthSummary) -> list[list[object]]:
    recent = f"last {summary.recent_s / 3600:g} h"
    age = summary.oldest_undelivered_age_s
    return [
        ["pending", summary.pending],
        ["awaiting retry", summary.awaiting_retry],
        ["in flight", summary.in_flight],
        ["dead letters", summary.dead_letters],
        [f"delivered ({recent})", summary.delivered_recently],
        [f"failed attempts ({recent})", summary.failed_attempts_recently],
        [f"dead-lettered ({recent})", summary.dead_lettered_recently],
        ["oldest undelivered", "-" if age is None else f"{age:,.0f} s"],
        ["delivery latency mean", _ms(summary.delivery_mean_ms)],
        ["delivery latency p95", _ms(summary.delivery_p95_ms)],
        ["open circuits", summary.open_circuits],
        ["disabled endpoints", summary.disabled_endpoints],
    ]


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f} ms"


def run(args: argparse.Namespace) -> int:
    with target() as where:
        summary = where.db.run(lambda cur: health_summary(cur, where.settings))
        since = summary.checked_at - timedelta(seconds=summary.recent_s)
        endpoints = where.db.run(lambda cur: endpoint_progress(cur, since))
    if args.json:
        print_json({"summary": summary.to_dict(), "endpoints": endpoints})
        return 0
    print(table(("queue", "now"), summary_rows(summary)))
    print()
    if endpoints:
        print(table(ENDPOINT_HEADERS, endpoint_rows(endpoints)))
    else:
        print("no endpoints")
    return 0
