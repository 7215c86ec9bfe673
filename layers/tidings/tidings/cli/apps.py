"""``tidings apps create|list``: applications, one per customer of the producer's."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tidings.cli import UsageError
from tidings.cli.support import print_json, target, use_case_errors, when
from tidings.config import PAYLOAD_FORMATS
from tidings.local.progress import table


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("apps", help="create and list applications (tenants)")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create an application; prints its id and uid")
    create.add_argument(
        "uid", metavar="UID", help="your own id for this customer (letters, digits, . _ : -)"
    )
    create.add_argument("--name", default="", help="a name for people")
    create.add_argument(
        "--metadata", default=None, metavar="JSON", help='your own string pairs: {"plan": "pro"}'
    )
    create.add_argument(
        "--default-payload-format",
        choices=PAYLOAD_FORMATS,
        default=None,
        help="the body its new endpoints receive when they do not say: raw or envelope "
        "(default: the deployment's)",
    )
    create.add_argument("--json", action="store_true", help="print JSON")
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="list applications")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=run_list)


def run_create(args: argparse.Namespace) -> int:
    from tidings.logic import applications

    metadata: Any = {}
    if args.metadata is not None:
        try:
            metadata = json.loads(args.metadata)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--metadata is not valid JSON: {exc}") from None
    with target() as where, use_case_errors():
        created = applications.create_application(
            where.db,
            uid=args.uid,
            name=args.name,
            metadata=metadata,
            default_payload_format=args.default_payload_format,
        )
    if args.json:
        print_json(created)
        return 0
    print(f"application {created.id} created: {created.uid}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    from tidings.logic import applications

    found = []
    with target() as where, use_case_errors():
        cursor: str | None = None
        while True:
            page = applications.list_applications(where.db, cursor=cursor, limit=100)
            found.extend(page.items)
            cursor = page.next_cursor
            if cursor is None:
                break
    if args.json:
        print_json(found)
        return 0
    rows: list[list[object]] = [[a.id, a.uid, a.name, when(a.created_at)] for a in found]
    print(table(("id", "uid", "name", "created (UTC)"), rows))
    return 0
