"""``tidings tokens create|list|revoke``: the bearer tokens of the HTTP API.

A token is printed once, when it is made; only its prefix is shown afterwards. On the database,
or over the API (an admin token's).
"""

from __future__ import annotations

import argparse
import dataclasses
from datetime import UTC, datetime
from typing import Any

from tidings.cli.backend import add_remote_options, backend_for
from tidings.cli.support import parse_duration, plain, print_json, when
from tidings.local.progress import table


def duration(text: str) -> Any:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def token_id(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"token id {text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"token id {text!r} must be positive")
    return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("tokens", help="create, list and revoke API tokens")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    create = actions.add_parser("create", help="create a token; prints its id and the token (once)")
    create.add_argument(
        "--scope",
        required=True,
        choices=("admin", "producer", "app", "app_read"),
        help="admin: everything; producer: send events, read messages; app: one application; "
        "app_read: read one application, change nothing",
    )
    create.add_argument(
        "--app", metavar="UID", default=None, help="the application of scope app or app_read"
    )
    create.add_argument(
        "--expires", type=duration, default=None, metavar="AGE", help="valid for AGE (30d, 12h)"
    )
    create.add_argument("--description", default="", help="a note for people")
    create.add_argument("--json", action="store_true", help="print JSON")
    add_remote_options(create, after_command=True)
    create.set_defaults(handler=run_create)

    listing = actions.add_parser("list", help="list tokens (never the tokens themselves)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    add_remote_options(listing, after_command=True)
    listing.set_defaults(handler=run_list)

    revoke = actions.add_parser("revoke", help="refuse a token from now on")
    revoke.add_argument("token_id", type=token_id, metavar="ID", help="the token's id")
    revoke.add_argument("--json", action="store_true", help="print JSON")
    add_remote_options(revoke, after_command=True)
    revoke.set_defaults(handler=run_revoke)


def run_create(args: argparse.Namespace) -> int:
    expires_at = None if args.expires is None else datetime.now(UTC) + args.expires
    with backend_for(args) as backend:
        created = backend.create_token(args.scope, args.app, args.description, expires_at)
    if args.json:
        print_json({"id": created.id, "token": created.token, **_listed(created)})
        return 0
    print(f"token {created.id} created: scope {created.scope}{_of(created.application)}")
    print(f"  token:   {created.token}")
    print(f"  expires: {when(created.expires_at) if created.expires_at else 'never'}")
    print("  (the token is shown this once; send it as Authorization: Bearer <token>)")
    return 0


def run_list(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        found = backend.tokens()
    if args.json:
        print_json([_listed(t) for t in found])
        return 0
    now = datetime.now(UTC)
    rows: list[list[object]] = [
        [
            t.id,
            t.prefix + "…",
            t.scope,
            t.application or "-",
            _state(t, now),
            when(t.created_at),
            when(t.expires_at),
            t.description,
        ]
        for t in found
    ]
    headers = ("id", "token", "scope", "app", "state", "created (UTC)", "expires", "description")
    print(table(headers, rows))
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    with backend_for(args) as backend:
        revoked = backend.revoke_token(args.token_id)
    if args.json:
        print_json(_listed(revoked))
    else:
        print(f"token {revoked.id} revoked ({revoked.prefix}…)")
    return 0


def _listed(token: Any) -> dict[str, Any]:
    """A token as listed: never the token itself, even of one just made."""
    from tidings.client.models import Token

    listed: dict[str, Any] = plain(token)
    return {f.name: listed[f.name] for f in dataclasses.fields(Token)}


def _of(application: str | None) -> str:
    return f" in application {application}" if application else ""


def _state(token: Any, now: datetime) -> str:
    if token.revoked_at is not None:
        return "revoked"
    if token.expires_at is not None and token.expires_at <= now:
        return "expired"
    return "valid"
