"""``tidings portal-link APP_UID``: a link that opens the consumer portal for one application.

The link can be opened once, before it expires (1 hour unless ``--expires`` says otherwise); it
opens a read-only session with ``--read-only``. Against the dev runtime it points at
``http://127.0.0.1:8080/portal``; against a deployment (``DATABASE_URL``) at ``TIDINGS_PORTAL_URL``
or ``--base-url`` (the API's URL followed by ``/portal``, for example
``https://abc123.execute-api.eu-west-1.amazonaws.com/prod/portal``). Over the API (``--api-url``)
the deployment makes the link, pointing at its own portal.
"""

from __future__ import annotations

import argparse
from typing import Any

from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import print_json, when
from tidings.cli.tokens import duration
from tidings.config import PORTAL_URL


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
        help="the portal's address (default: TIDINGS_PORTAL_URL, or the dev runtime's); the "
        "database mode's, over the API the deployment's own",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_remote_options(parser, after_command=True)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    expires_in_s = None if args.expires is None else args.expires.total_seconds()
    with backend_for(args) as backend:
        link = backend.create_portal_link(args.app, args.read_only, expires_in_s, args.base_url)
    if args.json:
        print_json(link)
        return 0
    kind = "read-only" if link.read_only else "read-write"
    print(
        f"portal link for {link.application} ({kind}, opens once, until {when(link.expires_at)}):"
    )
    print(f"  {link.url}")
    return 0
