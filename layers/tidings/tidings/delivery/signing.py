"""Standard Webhooks signatures: ``v1,<base64 HMAC-SHA256(secret, "{id}.{timestamp}.{body}")>``.

Secrets never appear in an exception message: errors name the problem, not the value.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Sequence
from secrets import token_bytes

SECRET_PREFIX = "whsec_"  # noqa: S105 (a format marker, not a credential)
SECRET_BYTES = 32
# The Standard Webhooks specification asks for keys between 24 and 64 bytes.
MIN_SECRET_BYTES = 24
MAX_SECRET_BYTES = 64


def generate_secret() -> str:
    """A new signing secret: ``whsec_`` + base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(token_bytes(SECRET_BYTES)).decode("ascii")


def secret_bytes(secret: str) -> bytes:
    """The HMAC key inside a ``whsec_`` secret."""
    if not isinstance(secret, str):
        raise TypeError(f"a signing secret must be a str, got {type(secret).__name__}")
    if not secret.startswith(SECRET_PREFIX):
        raise ValueError(f"a signing secret must start with {SECRET_PREFIX!r}")
    encoded = secret[len(SECRET_PREFIX) :]
    try:
        key = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        # "from None": the underlying error could quote part of the secret.
        raise ValueError(f"a signing secret must be base64 after {SECRET_PREFIX!r}") from None
    if not MIN_SECRET_BYTES <= len(key) <= MAX_SECRET_BYTES:
        raise ValueError(
            f"a signing secret must hold {MIN_SECRET_BYTES} to {MAX_SECRET_BYTES} bytes, "
            f"this one holds {len(key)}"
        )
    return key


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """One ``v1,<signature>`` entry for ``body`` sent as message ``msg_id`` at ``timestamp``."""
    _check_message(msg_id, timestamp, body)
    signed = f"{msg_id}.{timestamp}.".encode() + body
    digest = hmac.new(secret_bytes(secret), signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode("ascii")


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per active secret, space-separated."""
    if isinstance(secrets, str):
        raise TypeError("secrets must be a sequence of secrets, not a single str")
    if not secrets:
        raise ValueError("at least one signing secret is needed")
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


def webhook_headers(
    msg_id: str, timestamp: int, body: bytes, secrets: Sequence[str]
) -> dict[str, str]:
    """The three Standard Webhooks headers for one delivery."""
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": signature_header(secrets, msg_id, timestamp, body),
    }


def _check_message(msg_id: str, timestamp: int, body: bytes) -> None:
    if not isinstance(msg_id, str) or not msg_id:
        raise ValueError("msg_id must be a non-empty str")
    if any(ch.isspace() or not ch.isprintable() for ch in msg_id):
        raise ValueError(f"msg_id {msg_id!r} must not contain whitespace or control characters")
    if isinstance(timestamp, bool) or not isinstance(timestamp, int) or timestamp < 0:
        raise ValueError(f"timestamp must be a non-negative int of unix seconds, got {timestamp!r}")
    if not isinstance(body, bytes):
        raise TypeError(f"body must be bytes, got {type(body).__name__}")
