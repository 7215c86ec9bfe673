"""``tidings replay``: send dead letters again (attempts reset, history kept), with progress."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tidings.cli import UsageError
from tidings.cli.endpoints import endpoint_id
from tidings.cli.messages import message_id
from tidings.cli.support import (
    add_app_option,
    chosen_app,
    parse_time,
    print_json,
    target,
    use_case_errors,
)
from tidings.local.progress import LiveDisplay, progress_bar

# Replays go through the use case this many messages at a time (its limit for listed ids).
CHUNK = 1000


def since_time(text: str) -> Any:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay", help="send dead letters again: by endpoint, since a time, or by id"
    )
    parser.add_argument(
        "--endpoint",
        type=endpoint_id,
        default=None,
        metavar="ID",
        help="the dead letters of this endpoint",
    )
    parser.add_argument(
        "--since",
        type=since_time,
        default=None,
        metavar="TIME",
        help="dead-lettered at or after TIME: ISO 8601 (UTC unless zoned) or an age (30m, 2h, 7d)",
    )
    parser.add_argument(
        "--ids",
        type=message_id,
        nargs="+",
        default=None,
        metavar="ID",
        help="these dead letters, by message id",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tidings.dal.dead_letters import dead_letter_ids
    from tidings.logic.replay import check_named, replay_dead_letters

    if args.endpoint is None and args.since is None and args.ids is None:
        raise UsageError("name what to replay: --endpoint ID, --since TIME or --ids ID ...")
    display = LiveDisplay(sys.stderr, every_s=2.0)
    requeued = 0
    with target() as where, use_case_errors():
        app = chosen_app(where, args.app)
        check_named(where.db, app.id, message_ids=args.ids, endpoint_id=args.endpoint)
        wanted = where.db.run(
            lambda cur: dead_letter_ids(
                cur, app.id, endpoint_id=args.endpoint, since=args.since, ids=args.ids
            )
        )
        show = len(wanted) > CHUNK and not args.json
        for start in range(0, len(wanted), CHUNK):
            chunk = wanted[start : start + CHUNK]
            requeued += replay_dead_letters(where.db, message_ids=chunk, app_id=app.id).requeued
            if show:
                display.show("replaying " + progress_bar(start + len(chunk), len(wanted)))
    if args.json:
        print_json({"matched": len(wanted), "requeued": requeued})
        return 0
    # A dead letter can leave that state between listing and replay (pruned, replayed elsewhere).
    print(f"requeued {requeued} of {len(wanted)} matching dead letter(s)")
    return 0
