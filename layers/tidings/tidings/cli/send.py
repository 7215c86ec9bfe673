"""``tidings send EVENT_TYPE JSON``: record an event for every endpoint subscribed to it."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tidings.cli import UsageError
from tidings.cli.support import add_app_option, chosen_app, print_json, target, use_case_errors


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("send", help="send an event to its subscribed endpoints")
    parser.add_argument(
        "event_type", metavar="EVENT_TYPE", help="the event's type, such as order.paid"
    )
    parser.add_argument("payload", metavar="JSON", help="the event's payload, a JSON value")
    parser.add_argument(
        "--event-id", default=None, help="your idempotency key (default: a new UUID)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tidings.logic import events

    try:
        payload = json.loads(args.payload)
    except json.JSONDecodeError as exc:
        raise UsageError(f"JSON is not valid JSON: {exc}") from None
    with target() as where, use_case_errors():
        app = chosen_app(where, args.app)
        result = events.send_event(
            where.db,
            application=None if args.app is None else app.uid,
            event_type=args.event_type,
            payload=payload,
            event_id=args.event_id,
            settings=where.settings,
        )
    if args.json:
        print_json(result)
        return 0
    ids = ", ".join(str(i) for i in result.message_ids) or "none (no endpoint subscribes)"
    verb = "recorded" if result.created else "already recorded earlier"
    print(f"event {result.event_type} {result.event_id} {verb}; messages: {ids}")
    return 0
