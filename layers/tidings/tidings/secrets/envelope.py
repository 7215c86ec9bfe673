"""The cipher rules of signing secrets, pure: AES-256-GCM with a 96-bit random nonce.

A stored value is ``BOUND_MARK || row id (8 bytes, big-endian) || nonce || ciphertext || tag``:
the associated data names what it belongs to down to its row (an endpoint's secret with the
secret's id, a data key with the data key's id), so that a value copied into another row, an
older one of the same endpoint included, does not open there. The database refuses to store a
value whose id is not its row's (migration 0092), and a row's id never changes, so a reader that
does not know the row's id may take the one written in the value.

Values stored by earlier releases are ``nonce || ciphertext || tag``, bound to the endpoint only
(or, for data keys, to a constant): they still open until ``tidings secrets reencrypt`` rewrites
them, and nothing may store one any more. Nothing here names a key or a secret in an exception
message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# How a sealed secret is stored (the data layer reads and writes it as such).
from tidings.dal.secrets import SealedCredential, SealedSecret

__all__ = [
    "DataKey",
    "SealedCredential",
    "SealedSecret",
    "UnreadableSecret",
    "bind_to_row",
    "bound_row",
    "is_bound",
    "open_credential",
    "open_sealed",
    "open_secret",
    "seal",
    "seal_credential",
    "seal_secret",
    "secret_context",
]

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
# What a value bound to its row begins with (an earlier release's value begins with its random
# nonce, which begins so once in 2**32), and the row id after it.
BOUND_MARK = b"tdg\x02"
ROW_ID_BYTES = 8


class UnreadableSecret(ValueError):
    """A sealed value does not open with the key it names (wrong key, altered or misplaced)."""


@dataclass(frozen=True, slots=True)
class DataKey:
    """A data key in clear, with its id in ``tidings.data_keys``."""

    id: int
    key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.key) != KEY_BYTES:
            raise ValueError(f"a data key holds {KEY_BYTES} bytes, this one {len(self.key)}")


def secret_context(endpoint_id: int, secret_id: int | None = None) -> bytes:
    """The associated data of an endpoint's signing secret: of the secret with ``secret_id``
    (its row in ``tidings.endpoint_secrets``), or, for an earlier release's value, of any."""
    context = f"tidings/endpoint/{int(endpoint_id)}/signing-secret"
    return (context if secret_id is None else f"{context}/{int(secret_id)}").encode()


def bind_to_row(row_id: int, sealed: bytes) -> bytes:
    """``sealed`` (sealed with a context naming ``row_id``) as stored in that row."""
    return BOUND_MARK + int(row_id).to_bytes(ROW_ID_BYTES, "big") + sealed


def bound_row(stored: bytes) -> tuple[int | None, bytes]:
    """The row id a stored value is bound to (None: an earlier release's value) and the sealed
    value itself."""
    if stored[: len(BOUND_MARK)] != BOUND_MARK:
        return None, stored
    start = len(BOUND_MARK) + ROW_ID_BYTES
    return int.from_bytes(stored[len(BOUND_MARK) : start], "big"), stored[start:]


def seal(key: bytes, plaintext: bytes, context: bytes) -> bytes:
    """``plaintext`` encrypted and authenticated under ``key``, bound to ``context``."""
    nonce = os.urandom(NONCE_BYTES)
    return nonce + AESGCM(key).encrypt(nonce, plaintext, context)


def open_sealed(key: bytes, sealed: bytes, context: bytes) -> bytes:
    """The plaintext of ``sealed``; ``UnreadableSecret`` when it does not open."""
    if len(sealed) < NONCE_BYTES + TAG_BYTES:
        raise UnreadableSecret("a sealed value is too short to hold a nonce and a tag")
    try:
        return AESGCM(key).decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], context)
    except InvalidTag:
        raise UnreadableSecret("a sealed value does not open with its key") from None


def seal_secret(data_key: DataKey, endpoint_id: int, secret_id: int, secret: str) -> SealedSecret:
    """An endpoint's signing secret sealed under ``data_key`` for the row ``secret_id``."""
    context = secret_context(endpoint_id, secret_id)
    return SealedSecret(
        data_key.id, bind_to_row(secret_id, seal(data_key.key, secret.encode("utf-8"), context))
    )


def open_secret(
    data_key: DataKey, endpoint_id: int, sealed: SealedSecret, *, secret_id: int | None = None
) -> str:
    """The signing secret inside ``sealed``, which must be the endpoint's own, and the row
    ``secret_id``'s when given (else the row the value names, which the database holds true)."""
    if sealed.data_key_id != data_key.id:
        raise ValueError(
            f"the secret is sealed by data key {sealed.data_key_id}, not {data_key.id}"
        )
    row, inner = bound_row(sealed.ciphertext)
    if row is not None and secret_id is not None and row != secret_id:
        raise UnreadableSecret("a sealed secret belongs to another row")
    plaintext = open_sealed(data_key.key, inner, secret_context(endpoint_id, row))
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableSecret("a sealed secret is not text") from None


def is_bound(stored: bytes) -> bool:
    """Whether a stored value is bound to its row (else an earlier release stored it)."""
    return bound_row(stored)[0] is not None


def credential_context(endpoint_id: int, kind: str, credential_id: int) -> bytes:
    """The associated data of an endpoint's receiver credential of ``kind`` in the row
    ``credential_id`` (``tidings.endpoint_credentials``)."""
    return f"tidings/endpoint/{int(endpoint_id)}/credential/{kind}/{int(credential_id)}".encode()


def seal_credential(
    data_key: DataKey, endpoint_id: int, kind: str, credential_id: int, content: bytes
) -> SealedCredential:
    """A receiver credential sealed under ``data_key`` for the row ``credential_id``."""
    context = credential_context(endpoint_id, kind, credential_id)
    return SealedCredential(
        credential_id,
        kind,
        data_key.id,
        bind_to_row(credential_id, seal(data_key.key, content, context)),
    )


def open_credential(data_key: DataKey, endpoint_id: int, sealed: SealedCredential) -> bytes:
    """The content of a receiver credential, which must be this endpoint's, of its kind and
    sealed for its row."""
    if sealed.data_key_id != data_key.id:
        raise ValueError(
            f"the credential is sealed by data key {sealed.data_key_id}, not {data_key.id}"
        )
    row, inner = bound_row(sealed.ciphertext)
    if row != sealed.id:
        raise UnreadableSecret("a sealed credential belongs to another row")
    return open_sealed(data_key.key, inner, credential_context(endpoint_id, sealed.kind, sealed.id))
