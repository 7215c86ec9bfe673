"""Keeping stored secrets under the current key: the passes the migrator (and ``tidings secrets
reencrypt``) runs as the schema's owner.

- ``encrypt_plaintext``: secrets an earlier release kept in clear are encrypted and their columns
  cleared, in the transaction that applies this release's migrations, so no release of the code
  ever reads a half-migrated table.
- ``reencrypt``: every secret not sealed by the current data key (after the local key changed, or
  a data key aged out, or with ``fresh``) is opened and sealed again under it; the data keys that
  then seal nothing are dropped once a newer one has been in use for a while.
"""

from __future__ import annotations

from dataclasses import dataclass

from tidings.dal import secrets as dal
from tidings.dal.connection import Cursor
from tidings.observability import logger
from tidings.secrets.envelope import SealedSecret, UnreadableSecret, open_secret, seal_secret
from tidings.secrets.keyring import DROP_GRACE_S, Keyring


@dataclass(frozen=True, slots=True)
class UpkeepResult:
    # Endpoints whose secrets were stored in clear and are now encrypted.
    encrypted_endpoints: int
    reencrypted: int
    # Secrets that did not open with their data key (left as they are; the endpoint's deliveries
    # fail as "signing_failed" until its secret is rotated).
    unreadable: int
    data_keys_dropped: int
    data_key_id: int


def encrypt_plaintext(cur: Cursor, keyring: Keyring) -> int:
    """Encrypt every secret still stored in clear; returns how many endpoints had some."""
    found = dal.plaintext_secrets(cur)
    if not found:
        return 0
    key = keyring.sealing_key(cur)
    encrypted: list[dal.NewCiphertext] = []
    for row in found:
        # Oldest first: an endpoint's secrets sign newest first, by the order they were stored.
        if row.previous_secret is not None and row.previous_expires_at is not None:
            sealed = seal_secret(key, row.endpoint_id, row.previous_secret)
            encrypted.append(
                dal.NewCiphertext(
                    row.endpoint_id, key.id, sealed.ciphertext, row.previous_expires_at
                )
            )
        if row.secret is not None:
            sealed = seal_secret(key, row.endpoint_id, row.secret)
            encrypted.append(dal.NewCiphertext(row.endpoint_id, key.id, sealed.ciphertext))
    return dal.store_encrypted_plaintext(cur, encrypted, [row.endpoint_id for row in found])


def reencrypt(cur: Cursor, keyring: Keyring, *, fresh: bool = False) -> UpkeepResult:
    """Seal every stored secret with the current data key (a new one when ``fresh``)."""
    key = keyring.sealing_key(cur, fresh=fresh)
    stored = dal.secrets_to_reencrypt(cur, data_key_id=key.id)
    keys = keyring.data_keys(cur, {s.data_key_id for s in stored})
    replaced: list[tuple[int, dal.NewCiphertext]] = []
    unreadable = 0
    for row in stored:
        try:
            secret = open_secret(
                keys[row.data_key_id],
                row.endpoint_id,
                SealedSecret(row.data_key_id, row.ciphertext),
            )
        except UnreadableSecret:
            unreadable += 1
            logger.error(
                "a stored signing secret does not open with its data key; rotate it",
                extra={"endpoint_id": row.endpoint_id, "data_key_id": row.data_key_id},
            )
            continue
        sealed = seal_secret(key, row.endpoint_id, secret)
        replaced.append((row.id, dal.NewCiphertext(row.endpoint_id, key.id, sealed.ciphertext)))
    count = dal.replace_ciphertexts(cur, replaced)
    dropped = dal.drop_unused_data_keys(cur, keep_id=key.id, grace_s=DROP_GRACE_S)
    return UpkeepResult(0, count, unreadable, dropped, key.id)


def keep_secrets(cur: Cursor, keyring: Keyring, *, fresh: bool = False) -> UpkeepResult:
    """Both passes: what was in clear encrypted, then everything under the current data key."""
    encrypted = encrypt_plaintext(cur, keyring)
    result = reencrypt(cur, keyring, fresh=fresh)
    return UpkeepResult(
        encrypted,
        result.reencrypted,
        result.unreadable,
        result.data_keys_dropped,
        result.data_key_id,
    )
