"""The cipher rules of signing secrets, pure: AES-256-GCM with a 96-bit random nonce.

A sealed value is ``nonce || ciphertext || tag``. The associated data binds a ciphertext to what
it belongs to (an endpoint's secret, or a data key), so that a value copied into another row
does not open there. Nothing here names a key or a secret in an exception message.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

# How a sealed secret is stored (the data layer reads and writes it as such).
from tidings.dal.secrets import SealedSecret

__all__ = [
    "DataKey",
    "SealedSecret",
    "UnreadableSecret",
    "open_sealed",
    "open_secret",
    "seal",
    "seal_secret",
    "secret_context",
]

KEY_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16


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


def secret_context(endpoint_id: int) -> bytes:
    """The associated data of an endpoint's signing secret."""
    return f"tidings/endpoint/{int(endpoint_id)}/signing-secret".encode()


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


def seal_secret(data_key: DataKey, endpoint_id: int, secret: str) -> SealedSecret:
    """An endpoint's signing secret sealed under ``data_key``."""
    return SealedSecret(
        data_key.id, seal(data_key.key, secret.encode("utf-8"), secret_context(endpoint_id))
    )


def open_secret(data_key: DataKey, endpoint_id: int, sealed: SealedSecret) -> str:
    """The signing secret inside ``sealed``, which must be the endpoint's own."""
    if sealed.data_key_id != data_key.id:
        raise ValueError(
            f"the secret is sealed by data key {sealed.data_key_id}, not {data_key.id}"
        )
    plaintext = open_sealed(data_key.key, sealed.ciphertext, secret_context(endpoint_id))
    try:
        return plaintext.decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableSecret("a sealed secret is not text") from None
