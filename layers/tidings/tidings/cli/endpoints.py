"""``tidings endpoints add|list|disable|rotate-secret``: manage webhook endpoints."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.cli.support import (
    keyring_for,
    print_json,
    secrets_key_notice,
    target,
    use_case_errors,
    when,
)
from tidings.local.progress import table


def endpoint_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"endpoint id {text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"endpoint id {text!r} must be positive")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("endpoints", help="add, list, disable endpoints; rotate secrets")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    add = actions.add_parser("add", help="add an endpoint; prints its id and its secret (once)")
    add.add_argument("url", metavar="URL", help="where to deliver (http or https)")
    add.add_argument(
        "--event-type",
        dest="event_types",
        action="append",
        required=True,
        metavar="TYPE",
        help="an event type to receive ('*' for all); repeat for more",
    )
    add.add_argument("--description", default="", help="a note for people")
    add.add_argument("--rate-limit", type=float, default=None, metavar="PER_SECOND")
    add.add_argument("--max-attempts", type=int, default=None)
    add.add_argument("--timeout-ms", type=int, default=None)
    add.add_argument("--json", action="store_true", help="print JSON")
    add.set_defaults(handler=run_add)

    listing = actions.add_parser("list", help="list endpoints")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=run_list)

    disable = actions.add_parser("disable", help="stop delivering to an endpoint")
    disable.add_argument("endpoint_id", type=endpoint_id, metavar="ID")
    disable.add_argument("--json", action="store_true", help="print JSON")
    disable.set_defaults(handler=run_disable)

    rotate = actions.add_parser(
        "rotate-secret",
        help="new signing secret; earlier ones keep signing for their overlap (5 at most)",
    )
    rotate.add_argument("endpoint_id", type=endpoint_id, metavar="ID")
    rotate.add_argument("--json", action="store_true", help="print JSON")
    rotate.set_defaults(handler=run_rotate)


def run_add(args: argparse.Namespace) -> int:
    from tidings.logic import endpoints

    with target() as where, use_case_errors():
        keyring = keyring_for(where)
        created = endpoints.create_endpoint(
            where.db,
            keyring=keyring,
            url=args.url,
            description=args.description,
            event_types=args.event_types,
            max_attempts=args.max_attempts,
            timeout_ms=args.timeout_ms,
            rate_limit_per_s=args.rate_limit,
            settings=where.settings,
        )
    if args.json:
        print_json(created)
        return 0
    print(f"endpoint {created.id} added: {created.url}")
    print(f"  event types: {', '.join(created.event_types)}")
    print(f"  secret:      {created.secret}")
    print("  (the secret is shown this once; keep it to verify signatures)")
    print(f"  ({secrets_key_notice(keyring.master)})")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from tidings.logic import endpoints

    found = []
    with target() as where, use_case_errors():
        cursor: str | None = None
        while True:
            page = endpoints.list_endpoints(where.db, cursor=cursor, limit=100)
            found.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
    if args.json:
        print_json(found)
        return 0
    if not found:
        print("no endpoints")
        return 0
    rows: list[list[object]] = [
        [
            e.id,
            e.url,
            ", ".join(e.event_types),
            "enabled" if e.enabled else f"disabled ({e.disabled_reason or 'by an operator'})",
            e.rate_limit_per_s,
            when(e.created_at),
        ]
        for e in found
    ]
    print(table(("id", "url", "event types", "state", "rate/s", "created (UTC)"), rows))
    return 0


def run_disable(args: argparse.Namespace) -> int:
    from tidings.logic import endpoints

    with target() as where, use_case_errors():
        changed = endpoints.update_endpoint(
            where.db, args.endpoint_id, {"enabled": False}, settings=where.settings
        )
    if args.json:
        print_json(changed)
    else:
        print(f"endpoint {changed.id} disabled: {changed.url}")
    return 0


def run_rotate(args: argparse.Namespace) -> int:
    from tidings.logic import endpoints

    with target() as where, use_case_errors():
        rotated = endpoints.rotate_secret(
            where.db, args.endpoint_id, keyring=keyring_for(where), settings=where.settings
        )
    if args.json:
        print_json(rotated)
        return 0
    print(f"endpoint {rotated.endpoint_id}: new secret {rotated.secret}")
    if rotated.previous_secret_expires_at is not None:
        print(
            "  the previous secret keeps signing until "
            f"{when(rotated.previous_secret_expires_at)} UTC"
        )
    return 0
