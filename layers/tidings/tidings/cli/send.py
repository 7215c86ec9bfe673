"""``tidings send EVENT_TYPE JSON``: record an event for every endpoint subscribed to it, on the
database or over the API."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tidings.cli import UsageError
from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import add_app_option, print_json


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("send", help="send an event to its subscribed endpoints")
    parser.add_argument(
        "event_type", metavar="EVENT_TYPE", help="the event's type, such as order.paid"
    )
    parser.add_argument("payload", metavar="JSON", help="the event's payload, a JSON value")
    parser.add_argument(
        "--event-id",
        default=None,
        help="your idempotency key (default: a new UUID); over the API, a request with one is "
        "sent again after a failure that may pass",
    )
    parser.add_argument(
        "--channel",
        dest="channels",
        action="append",
        default=None,
        metavar="NAME",
        help="a channel the event carries (endpoints with channels receive it only if they "
        "share one); repeat for more, up to 10",
    )
    parser.add_argument(
        "--ordering-key",
        default=None,
        metavar="KEY",
        help="for FIFO endpoints: the line the event joins (a customer id, an account; 1 to "
        "200 characters): events of one key are delivered in the order they were accepted, "
        "different keys side by side; events without one share a line",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser)
    add_remote_options(parser, after_command=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"JSON is not valid JSON: {exc}") from None
    with backend_for(args) as backend:
        result = backend.send_event(
            args.app,
            args.event_type,
            payload,
            args.event_id,
            channels=args.channels,
            ordering_key=args.ordering_key,
        )
    if args.json:
        print_json(result)
        return 0
    ids = ", ".join(str(i) for i in result.message_ids) or "none (no endpoint subscribes)"
    verb = "recorded" if result.created else "already recorded earlier"
    print(f"event {result.event_type} {result.event_id} {verb}; messages: {ids}")
    return 0
