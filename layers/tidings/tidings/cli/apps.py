"""``tidings apps create|list|delete``: applications, one per customer of the producer's, on
the database or over the API (an admin token's)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tidings.cli import UsageError
from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import print_json, when
from tidings.config import PAYLOAD_FORMATS
from tidings.local.progress import table


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("apps", help="create, list and delete applications (tenants)")
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
    add_remote_options(create, after_command=True)
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="list applications")
    listing.add_argument("--json", action="store_true", help="print JSON")
    add_remote_options(listing, after_command=True)
    listing.set_defaults(handler=run_list)

    delete = actions.add_parser(
        "delete",
        help="delete an application: its endpoints are disabled, its queued messages become "
        "dead letters, its history stays (the default application cannot be deleted)",
    )
    delete.add_argument("app", metavar="UID", help="the application (its uid or id)")
    delete.add_argument("--json", action="store_true", help="print JSON")
    add_remote_options(delete, after_command=True)
    delete.set_defaults(handler=run_delete)


def run_create(args: argparse.Namespace) -> int:
    metadata: Any = {}
    if args.metadata is not None:
        try:
            metadata = json.loads(args.metadata)
        except json.JSONDecodeError as exc:
            raise UsageError(f"--metadata is not valid JSON: {exc}") from None
    with backend_for(args) as backend:
        created = backend.create_application(
            args.uid, args.name, metadata, args.default_payload_format
        )
    if args.json:
        print_json(created)
        return 0
    print(f"application {created.id} created: {created.uid}")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        found = backend.applications()
    if args.json:
        print_json(found)
        return 0
    rows: list[list[object]] = [[a.id, a.uid, a.name, when(a.created_at)] for a in found]
    print(table(("id", "uid", "name", "created (UTC)"), rows))
    return 0


def run_delete(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        backend.delete_application(args.app)
    if args.json:
        print_json({"application": args.app, "deleted": True})
    else:
        print(
            f"application {args.app} deleted: its endpoints are disabled, its queued messages "
            "become dead letters"
        )
    return 0
