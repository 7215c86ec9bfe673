"""``tidings portal-link APP_UID``: a link that opens the consumer portal for one application.

The link can be opened once, before it expires (1 hour unless ``--expires`` says otherwise); it
opens a read-only session with ``--read-only``. Against the dev runtime it points at
``http://127.0.0.1:8080/portal``; against a deployment (``DATABASE_URL``) at ``TIDINGS_PORTAL_URL``
or ``--base-url`` (the API's URL followed by ``/portal``, for example
``https://abc123.execute-api.eu-west-1.amazonaws.com/prod/portal``).
"""

from __future__ import annotations

import argparse
from typing import Any

from tidings.cli import UsageError
from tidings.cli.support import print_json, target, use_case_errors, when
from tidings.cli.tokens import duration
from tidings.config import PORTAL_URL

DEV_PORTAL_URL = "http://127.0.0.1:8080/portal"


def base_url(text: str) -> str:
    if not PORTAL_URL.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not an http(s) URL without query or fragment"
        )
    return text


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "portal-link", help="a link that opens the consumer portal for one application, once"
    )
    parser.add_argument("app", metavar="APP_UID", help="the application (its uid or id)")
    parser.add_argument(
        "--read-only", action="store_true", help="the session reads everything, changes nothing"
    )
    parser.add_argument(
        "--expires",
        type=duration,
        default=None,
        metavar="AGE",
        help="the link expires unused after AGE (default 1h; 30m, 12h, 7d at most)",
    )
    parser.add_argument(
        "--base-url",
        type=base_url,
        default=None,
        metavar="URL",
        help="the portal's address (default: TIDINGS_PORTAL_URL, or the dev runtime's)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from tidings.logic import applications, portal
    from tidings.logic.errors import NotFound

    with target() as where, use_case_errors():
        app = applications.find(where.db, args.app)
        if app is None:
            raise NotFound("application", args.app)
        base = args.base_url or where.settings.portal_url
        if not base:
            if where.description == "DATABASE_URL":
                raise UsageError(
                    "the portal's address is unknown: set TIDINGS_PORTAL_URL or pass --base-url "
                    "(the API's URL followed by /portal)"
                )
            base = DEV_PORTAL_URL
        link = portal.create_link(
            where.db,
            app.id,
            app.uid,
            base_url=base,
            read_only=args.read_only,
            expires_in_s=(
                portal.DEFAULT_LINK_S if args.expires is None else args.expires.total_seconds()
            ),
            settings=where.settings,
        )
    if args.json:
        print_json(link.model_dump(mode="json"))
        return 0
    kind = "read-only" if link.read_only else "read-write"
    print(
        f"portal link for {link.application} ({kind}, opens once, until {when(link.expires_at)}):"
    )
    print(f"  {link.url}")
    return 0
