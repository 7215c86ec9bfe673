"""The key that encrypts signing secrets in tests, and the keyring built on it.

The test session sets ``TIDINGS_SECRETS_KEY`` to this key (tests/conftest.py), so the handlers,
the dev runtime the tests start, and the rows the tests write directly all use the same one.
"""

from __future__ import annotations

import base64
import functools
from collections.abc import Sequence

from tidings.dal.connection import Cursor
from tidings.dal.secrets import SealedSecret
from tidings.secrets.keyring import Keyring, open_secrets
from tidings.secrets.master_keys import SECRETS_KEY_ENV, LocalMasterKey

TEST_SECRETS_KEY_BYTES = bytes(range(32))
TEST_SECRETS_KEY = base64.b64encode(TEST_SECRETS_KEY_BYTES).decode("ascii")


@functools.cache
def secrets_keyring() -> Keyring:
    """One keyring for the whole session (its cache is kept per database)."""
    return Keyring(
        LocalMasterKey(TEST_SECRETS_KEY_BYTES, f"${SECRETS_KEY_ENV}"),
        data_key_max_age_s=30 * 86400,
    )


def stored_secrets(cur: Cursor, endpoint_id: int, keyring: Keyring | None = None) -> list[str]:
    """The endpoint's signing secrets as stored (the ones that still sign), decrypted (with the
    tests' key unless another keyring is given), newest first."""
    cur.execute(
        "SELECT data_key_id, ciphertext FROM tidings.endpoint_secrets"
        " WHERE endpoint_id = %s AND (expires_at IS NULL OR expires_at > now()) ORDER BY id DESC",
        (endpoint_id,),
    )
    sealed = [SealedSecret(int(key_id), bytes(ciphertext)) for key_id, ciphertext in cur.fetchall()]
    keys = (keyring or secrets_keyring()).data_keys(cur, {s.data_key_id for s in sealed})
    return open_secrets(keys, endpoint_id, sealed)


def found_in_clear(cur: Cursor, secrets: Sequence[str]) -> list[str]:
    """Where in schema tidings any of ``secrets`` is stored in clear: every column of every
    table read as text, and the bytes of every bytea column searched for the secret and for the
    key inside it. ``table.column`` for each finding."""
    needles = [secret.encode() for secret in secrets]
    needles += [base64.b64decode(secret.removeprefix("whsec_")) for secret in secrets]
    cur.execute(
        "SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod)"
        " FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid"
        " WHERE c.relnamespace = 'tidings'::regnamespace AND c.relkind IN ('r', 'p')"
        " AND NOT c.relispartition AND a.attnum > 0 AND NOT a.attisdropped"
        " ORDER BY 1, 2"
    )
    found = []
    for table, column, kind in cur.fetchall():
        cur.execute(f'SELECT "{column}", "{column}"::text FROM tidings."{table}"')
        for raw, text in cur.fetchall():
            data = bytes(raw) if kind == "bytea" and raw is not None else (text or "").encode()
            if any(needle in data for needle in needles):
                found.append(f"{table}.{column}")
                break
    return found
