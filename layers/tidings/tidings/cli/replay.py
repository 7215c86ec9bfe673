"""``tidings replay``: send dead letters again (attempts reset, history kept), with progress on
the database; over the API in one request (a thousand ids at a time)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from tidings.cli import UsageError
from tidings.cli.backend import REPLAY_CHUNK, add_remote_options, backend_for
from tidings.cli.endpoints import endpoint_id
from tidings.cli.messages import message_id
from tidings.cli.support import add_app_option, parse_time, print_json
from tidings.local.progress import LiveDisplay, progress_bar


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
    add_remote_options(parser, after_command=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.endpoint is None and args.since is None and args.ids is None:
        raise UsageError("name what to replay: --endpoint ID, --since TIME or --ids ID ...")
    display = LiveDisplay(sys.stderr, every_s=2.0)

    def progress(done: int, total: int) -> None:
        if total > REPLAY_CHUNK and not args.json:
            display.show("replaying " + progress_bar(done, total))

    with backend_for(args) as backend:
        outcome = backend.replay(
            args.app,
            endpoint_id=args.endpoint,
            since=args.since,
            message_ids=args.ids,
            progress=progress,
        )
    if args.json:
        print_json({"matched": outcome.matched, "requeued": outcome.requeued})
        return 0
    if outcome.matched is None:
        print(f"requeued {outcome.requeued} matching dead letter(s)")
    else:
        # A dead letter can leave that state between listing and replay (pruned, replayed
        # elsewhere).
        print(f"requeued {outcome.requeued} of {outcome.matched} matching dead letter(s)")
    return 0
