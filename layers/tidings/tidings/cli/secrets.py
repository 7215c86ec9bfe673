"""``tidings secrets``: where the key of the signing secrets is, and re-encrypting them."""

from __future__ import annotations

import argparse
from typing import Any

from tidings.cli.support import keyring_for, print_json, secrets_key_notice, target

# Rows rewritten per transaction by ``reencrypt`` (tidings.secrets.upkeep.REENCRYPT_BATCH, which
# a test keeps equal: importing it here would load the database layer for ``--help``).
REENCRYPT_BATCH = 100


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "secrets", help="the key that encrypts signing secrets: where it is, re-encrypting"
    )
    commands = parser.add_subparsers(dest="secrets_command", required=True, metavar="COMMAND")
    where = commands.add_parser("where", help="say which key encrypts the signing secrets")
    where.add_argument("--json", action="store_true", help="print JSON")
    where.set_defaults(handler=run_where)
    again = commands.add_parser(
        "reencrypt",
        help="seal every stored signing secret with the current data key of the current key",
        description=(
            "Encrypts any secret still stored in clear, then opens every stored secret not "
            "sealed by the current data key, or stored by an earlier release (bound to its "
            "endpoint only), and seals it again with it, bound to its row: after an upgrade, "
            "after the local key changed (give the old one in TIDINGS_SECRETS_PREVIOUS_KEYS) "
            "or a data key aged out. Online: a batch of rows per transaction, safe to run "
            "again or twice at once. Data keys that no longer seal anything are dropped an "
            "hour after a newer one replaced them. Run it as a member of the owner role (the "
            "migrator's user)."
        ),
    )
    again.add_argument(
        "--new-data-key", action="store_true", help="make a new data key first and use it"
    )
    again.add_argument(
        "--batch-size",
        type=int,
        default=REENCRYPT_BATCH,
        help=f"rows rewritten per transaction (default {REENCRYPT_BATCH})",
    )
    again.add_argument("--json", action="store_true", help="print the result as JSON")
    again.set_defaults(handler=run_reencrypt)


def run_where(args: argparse.Namespace) -> int:
    with target() as found:
        # Only says: a key file that does not exist yet is made by the first command that
        # stores a secret, not by this one.
        master = keyring_for(found, create=False).master
    if args.json:
        print_json({"key": master.ref, "where": master.where})
    else:
        print(secrets_key_notice(master))
    return 0


def run_reencrypt(args: argparse.Namespace) -> int:
    from tidings.cli import UsageError
    from tidings.cli.support import OperatorError
    from tidings.secrets.master_keys import KeyUnavailable
    from tidings.secrets.upkeep import reencrypt_online

    if args.batch_size < 1:
        raise UsageError("--batch-size must be at least 1")
    with target() as found:
        keyring = keyring_for(found)
        try:
            result = reencrypt_online(
                found.db, keyring, fresh=args.new_data_key, batch_size=args.batch_size
            )
        except KeyUnavailable as exc:
            raise OperatorError(str(exc)) from exc
        if args.json:
            print_json(result)
            return 0
        print(
            f"{result.reencrypted} secret(s) sealed again with data key {result.data_key_id}; "
            f"{result.encrypted_endpoints} endpoint(s) had secrets in clear; "
            f"{result.data_keys_dropped} unused data key(s) dropped"
        )
        if result.unreadable:
            print(
                f"{result.unreadable} secret(s) did not open with their data key and were left "
                "as they are: rotate their endpoints' secrets"
            )
        if result.unbound_left:
            print(
                f"{result.unbound_left} secret(s) are still stored as an earlier release stored "
                "them (bound to their endpoint only): run this again"
            )
        print(secrets_key_notice(keyring.master))
    return 0
