"""``tidings dead-letters``: the dead-letter report, per endpoint, with the action to take."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.dal.connection import Database
from tidings.local.operator import print_json, target


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("dead-letters", help="the dead-letter report")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def report_text(db: Database) -> str:
    raise NotImplementedError


def run(args: argparse.Namespace) -> int:
    with target() as where:
        text = report_text(where.db)
    if args.json:
        print_json(text)
    else:
        print(text)
    return 0
