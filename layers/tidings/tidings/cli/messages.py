"""``tidings messages show ID``: one message, its payload and every attempt; ``tidings messages
resend ID``: deliver a delivered or dead-lettered message again."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tidings.cli.support import (
    add_app_option,
    chosen_app,
    print_json,
    target,
    use_case_errors,
    when,
)
from tidings.local.progress import table


def message_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"message id {text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"message id {text!r} must be positive")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("messages", help="look at messages")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    show = actions.add_parser("show", help="a message with its payload and attempts")
    show.add_argument("message_id", type=message_id, metavar="ID", help="the message's id")
    show.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(show)
    show.set_defaults(handler=run_show)
    resend = actions.add_parser(
        "resend",
        help="deliver a delivered or dead-lettered message again (fresh attempts, same webhook-id)",
    )
    resend.add_argument("message_id", type=message_id, metavar="ID", help="the message's id")
    resend.add_argument("--json", action="store_true", help="print JSON")
    add_app_option(resend)
    resend.set_defaults(handler=run_resend)


def run_resend(args: argparse.Namespace) -> int:
    from tidings.delivery.attempt import webhook_id
    from tidings.logic.resend import resend_message

    with target() as where, use_case_errors():
        app = chosen_app(where, args.app)
        resent = resend_message(where.db, args.message_id, app_id=app.id)
    if args.json:
        print_json(resent)
        return 0
    print(
        f"message {resent.id} is pending again: a new delivery to endpoint {resent.endpoint_id} "
        f"with a fresh attempt budget, webhook-id {webhook_id(resent.id)}"
    )
    return 0


def run_show(args: argparse.Namespace) -> int:
    from tidings.logic import messages

    with target() as where, use_case_errors():
        app = chosen_app(where, args.app)
        found = messages.get_message(
            where.db, args.message_id, app_id=app.id, settings=where.settings
        )
    if args.json:
        print_json(found)
        return 0
    facts = [
        ("message", found.id),
        ("endpoint", found.endpoint_id),
        ("event", f"{found.event_type} {found.event_id}"),
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
