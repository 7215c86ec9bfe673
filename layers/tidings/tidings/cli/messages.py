"""``tidings messages list``: messages, newest first, filtered; ``tidings messages show ID``: one
message, its payload and every attempt; ``tidings messages resend ID``: deliver a delivered or
dead-lettered message again. On the database or over the API."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.endpoints import endpoint_id
from tidings.cli.support import add_app_option, app_name, parse_time, print_json, when
from tidings.local.progress import table

# The statuses a message can be in (tidings.logic.messages.MessageStatus).
STATUSES = ("pending", "waiting", "in_flight", "delivered", "failed", "dead_letter")
MAX_LISTED = 10_000


def message_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"message id {text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"message id {text!r} must be positive")
    return value


def time_arg(text: str) -> datetime:
    try:
        return parse_time(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def limit_arg(text: str) -> int:
    if not text.isascii() or not text.isdigit() or not 1 <= int(text) <= MAX_LISTED:
        raise argparse.ArgumentTypeError(f"limit {text!r} must be a whole number 1..{MAX_LISTED}")
    return int(text)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("messages", help="list, look at and resend messages")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser(
        "list", help="messages, newest first, by status, endpoint, event type and creation time"
    )
    listing.add_argument("--status", choices=STATUSES, default=None, help="only in this state")
    listing.add_argument(
        "--endpoint",
        type=endpoint_id,
        default=None,
        metavar="ID",
        help="only those to this endpoint",
    )
    listing.add_argument(
        "--event-type", default=None, metavar="TYPE", help="only events of this type"
    )
    listing.add_argument(
        "--since",
        type=time_arg,
        default=None,
        metavar="TIME",
        help="created at or after TIME: ISO 8601 (UTC unless zoned) or an age (30m, 2h, 7d)",
    )
    listing.add_argument(
        "--until", type=time_arg, default=None, metavar="TIME", help="created before TIME"
    )
    listing.add_argument(
        "--limit",
        type=limit_arg,
        default=50,
        metavar="N",
        help=f"at most N messages (1 to {MAX_LISTED}; default 50)",
    )
    _common(listing, run_list)
    show = actions.add_parser("show", help="a message with its payload and attempts")
    show.add_argument("message_id", type=message_id, metavar="ID", help="the message's id")
    _common(show, run_show)
    resend = actions.add_parser(
        "resend",
        help="deliver a delivered or dead-lettered message again (fresh attempts, same webhook-id)",
    )
    resend.add_argument("message_id", type=message_id, metavar="ID", help="the message's id")
    _common(resend, run_resend)


def _common(parser: argparse.ArgumentParser, handler: Any) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(parser)
    add_remote_options(parser, after_command=True)
    parser.set_defaults(handler=handler)


def run_list(args: argparse.Namespace) -> int:
    filters = {
        "status": args.status,
        "endpoint_id": args.endpoint,
        "event_type": args.event_type,
        "since": args.since,
        "until": args.until,
    }
    with backend_for(args) as backend:
        found = backend.messages(args.app, filters, args.limit)
    if args.json:
        print_json(found)
        return 0
    if not found:
        print(f"no messages in application {app_name(args)} match")
        return 0
    rows: list[list[object]] = [
        [
            m.id,
            m.endpoint_id,
            m.event_type,
            m.event_id,
            m.status,
            m.attempts,
            when(m.created_at),
            (m.last_error or "")[:40],
        ]
        for m in found
    ]
    headers = ("id", "endpoint", "event type", "event id", "status", "attempts", "created (UTC)")
    print(table((*headers, "last error"), rows))
    return 0


def run_resend(args: argparse.Namespace) -> int:
    from tidings.delivery.attempt import webhook_id

    with backend_for(args) as backend:
        resent = backend.resend_message(args.app, args.message_id)
    if args.json:
        print_json(resent)
        return 0
    print(
        f"message {resent.id} is pending again: a new delivery to endpoint {resent.endpoint_id} "
        f"with a fresh attempt budget, webhook-id {webhook_id(resent.id)}"
    )
    return 0


def run_show(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        found = backend.message(args.app, args.message_id)
    if args.json:
        print_json(found)
        return 0
    facts = [
        ("message", found.id),
        ("endpoint", found.endpoint_id),
        (
            "event",
            f"{found.event_type} {found.event_id}"
            + (" (an example from the event catalog)" if found.example else ""),
        ),
        *([] if found.ordering_key is None else [("ordering key", found.ordering_key)]),
        ("status", found.status),
        ("attempts", f"{found.attempts} of {found.max_attempts or 'the default'}"),
        ("created", when(found.created_at)),
        (
            "next attempt",
            when(found.next_attempt_at) if found.status in ("pending", "failed") else "-",
        ),
        ("delivered", when(found.delivered_at)),
        ("dead-lettered", when(found.dead_lettered_at)),
        ("last error", found.last_error or "-"),
        ("last status", found.last_status_code or "-"),
        ("waiting for", _waiting(found.waiting_for)),
    ]
    width = max(len(name) for name, _ in facts)
    for name, value in facts:
        print(f"{name.ljust(width)}  {value}")
    print(f"{'payload'.ljust(width)}  {json.dumps(found.payload, ensure_ascii=False)[:500]}")
    if found.attempt_history:
        print()
        rows: list[list[object]] = [
            [
                a.attempt_number,
                when(a.attempted_at),
                a.status_code,
                a.response_ms,
                a.error_class or "",
                (a.response_excerpt or "")[:60].replace("\n", " "),
            ]
            for a in found.attempt_history
        ]
        print(table(("#", "at (UTC)", "status", "ms", "error", "response"), rows))
    return 0


def _waiting(wait: Any) -> str:
    until = f" (until {when(wait.until)})" if wait.until is not None else ""
    return f"{wait.explanation}{until}"
