"""The key that encrypts signing secrets in tests, and the keyring built on it.

The test session sets ``TIDINGS_SECRETS_KEY`` to this key (tests/conftest.py), so the handlers,
the dev runtime the tests start, and the rows the tests write directly all use the same one.
"""

from __future__ import annotations

import base64
import functools

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


def stored_secrets(cur: Cursor, endpoint_id: int) -> list[str]:
    """The endpoint's signing secrets as stored (the ones that still sign), decrypted with the
    tests' key, newest first."""
    cur.execute(
        "SELECT data_key_id, ciphertext FROM tidings.endpoint_secrets"
        " WHERE endpoint_id = %s AND (expires_at IS NULL OR expires_at > now()) ORDER BY id DESC",
        (endpoint_id,),
    )
    sealed = [SealedSecret(int(key_id), bytes(ciphertext)) for key_id, ciphertext in cur.fetchall()]
    keys = secrets_keyring().data_keys(cur, {s.data_key_id for s in sealed})
    return open_secrets(keys, endpoint_id, sealed)
