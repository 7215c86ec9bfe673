"""Keeping stored secrets under the current key: the passes the migrator (and ``tidings secrets
reencrypt``) runs as the schema's owner.

- ``encrypt_plaintext``: secrets an earlier release kept in clear are encrypted and their columns
  cleared, in the transaction that applies this release's migrations, so no release of the code
  ever reads a half-migrated table.
- ``reencrypt``: every secret not sealed by the current data key (after the local key changed, or
  a data key aged out, or with ``fresh``), and every one an earlier release stored bound to its
  endpoint only, is opened and sealed again under it, bound to its row; the data keys that then
  seal nothing are dropped once a newer one has been in use for a while. The migrator runs it in
  its one transaction; ``reencrypt_online`` (the command) a batch of rows per transaction, so
  senders and rotations wait for a few rows at most, and two runs at once or one after another
  find what is left and rewrite each row once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from functools import partial

from tidings.dal import secrets as dal
from tidings.dal.connection import Cursor, Database
from tidings.observability import logger
from tidings.secrets.envelope import (
    DataKey,
    SealedSecret,
    UnreadableSecret,
    open_secret,
    seal_secret,
)
from tidings.secrets.keyring import DROP_GRACE_S, Keyring

# Rows rewritten per transaction by the online pass.
REENCRYPT_BATCH = 100


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
    # Secrets still stored as an earlier release stored them (bound to their endpoint only):
    # the unreadable ones, or those a rotation of that release added meanwhile.
    unbound_left: int = 0


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
            encrypted.append(
                _sealed_row(cur, key, row.endpoint_id, row.previous_secret, row.previous_expires_at)
            )
        if row.secret is not None:
            encrypted.append(_sealed_row(cur, key, row.endpoint_id, row.secret, None))
    return dal.store_encrypted_plaintext(cur, encrypted, [row.endpoint_id for row in found])


def _sealed_row(
    cur: Cursor, key: DataKey, endpoint_id: int, secret: str, expires_at: datetime | None
) -> dal.NewCiphertext:
    secret_id = dal.next_endpoint_secret_id(cur)
    sealed = seal_secret(key, endpoint_id, secret_id, secret)
    return dal.NewCiphertext(secret_id, endpoint_id, key.id, sealed.ciphertext, expires_at)


@dataclass(frozen=True, slots=True)
class _Batch:
    rewritten: int
    unreadable: int
    # The last row looked at; None when none was left.
    last_id: int | None


def _reencrypt_batch(
    cur: Cursor, keyring: Keyring, key: DataKey, *, after_id: int, batch_size: int
) -> _Batch:
    stored = dal.secrets_to_reencrypt(
        cur, data_key_id=key.id, unbound=True, after_id=after_id, batch_size=batch_size
    )
    if not stored:
        return _Batch(0, 0, None)
    keys = keyring.data_keys(cur, {s.data_key_id for s in stored})
    replaced: list[tuple[int, dal.NewCiphertext]] = []
    unreadable = 0
    for row in stored:
        try:
            secret = open_secret(
                keys[row.data_key_id],
                row.endpoint_id,
                SealedSecret(row.data_key_id, row.ciphertext),
                secret_id=row.id,
            )
        except UnreadableSecret:
            unreadable += 1
            logger.error(
                "a stored signing secret does not open with its data key; rotate it",
                extra={"endpoint_id": row.endpoint_id, "data_key_id": row.data_key_id},
            )
            continue
        # Sealed again for the same row: it keeps its id, now bound to it.
        sealed = seal_secret(key, row.endpoint_id, row.id, secret)
        replaced.append(
            (row.id, dal.NewCiphertext(row.id, row.endpoint_id, key.id, sealed.ciphertext))
        )
    return _Batch(dal.replace_ciphertexts(cur, replaced), unreadable, stored[-1].id)


def reencrypt(
    cur: Cursor, keyring: Keyring, *, fresh: bool = False, batch_size: int = REENCRYPT_BATCH
) -> UpkeepResult:
    """Seal every stored secret with the current data key (a new one when ``fresh``), bound to
    its row, in the caller's transaction."""
    key = keyring.sealing_key(cur, fresh=fresh)
    rewritten = unreadable = 0
    after = 0
    while True:
        batch = _reencrypt_batch(cur, keyring, key, after_id=after, batch_size=batch_size)
        if batch.last_id is None:
            break
        rewritten += batch.rewritten
        unreadable += batch.unreadable
        after = batch.last_id
    dropped = dal.drop_unused_data_keys(cur, keep_id=key.id, grace_s=DROP_GRACE_S)
    return UpkeepResult(0, rewritten, unreadable, dropped, key.id, dal.unbound_secrets_left(cur))


def reencrypt_online(
    db: Database, keyring: Keyring, *, fresh: bool = False, batch_size: int = REENCRYPT_BATCH
) -> UpkeepResult:
    """``keep_secrets``, one transaction per batch of rows (``tidings secrets reencrypt``)."""
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    encrypted = db.run(lambda cur: encrypt_plaintext(cur, keyring), transaction=True)
    key = db.run(lambda cur: keyring.sealing_key(cur, fresh=fresh), transaction=True)
    rewritten = unreadable = 0
    after = 0
    while True:
        batch = db.run(
            partial(
                _reencrypt_batch, keyring=keyring, key=key, after_id=after, batch_size=batch_size
            ),
            transaction=True,
        )
        if batch.last_id is None:
            break
        rewritten += batch.rewritten
        unreadable += batch.unreadable
        after = batch.last_id
    dropped = db.run(
        lambda cur: dal.drop_unused_data_keys(cur, keep_id=key.id, grace_s=DROP_GRACE_S),
        transaction=True,
    )
    left = db.run(dal.unbound_secrets_left)
    return UpkeepResult(encrypted, rewritten, unreadable, dropped, key.id, left)


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
        result.unbound_left,
    )
