"""The cipher rules of stored signing secrets."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.delivery.signing import generate_secret
from tidings.secrets.envelope import (
    NONCE_BYTES,
    TAG_BYTES,
    DataKey,
    SealedSecret,
    UnreadableSecret,
    open_sealed,
    open_secret,
    seal,
    seal_secret,
)

KEY = DataKey(7, bytes(range(32)))


@given(st.integers(min_value=1, max_value=2**63 - 1), st.binary(min_size=24, max_size=64))
def test_a_sealed_secret_opens_for_its_endpoint_and_holds_no_trace_of_it(
    endpoint_id: int, raw: bytes
) -> None:
    import base64

    secret = "whsec_" + base64.b64encode(raw).decode()
    sealed = seal_secret(KEY, endpoint_id, secret)
    assert sealed.data_key_id == KEY.id
    assert len(sealed.ciphertext) == NONCE_BYTES + len(secret) + TAG_BYTES
    assert secret.encode() not in sealed.ciphertext and raw not in sealed.ciphertext
    assert open_secret(KEY, endpoint_id, sealed) == secret


def test_each_seal_uses_a_new_nonce() -> None:
    secret = generate_secret()
    assert seal_secret(KEY, 1, secret).ciphertext != seal_secret(KEY, 1, secret).ciphertext


def test_a_secret_does_not_open_for_another_endpoint_or_with_another_key() -> None:
    sealed = seal_secret(KEY, 1, generate_secret())
    with pytest.raises(UnreadableSecret):
        open_secret(KEY, 2, sealed)
    with pytest.raises(UnreadableSecret):
        open_secret(DataKey(KEY.id, os.urandom(32)), 1, sealed)
    with pytest.raises(ValueError, match="sealed by data key 7, not 8"):
        open_secret(DataKey(8, KEY.key), 1, sealed)


def test_a_changed_bit_is_refused_without_quoting_anything() -> None:
    secret = generate_secret()
    sealed = seal_secret(KEY, 1, secret)
    for position in (0, NONCE_BYTES, len(sealed.ciphertext) - 1):
        altered = bytearray(sealed.ciphertext)
        altered[position] ^= 1
        with pytest.raises(UnreadableSecret) as caught:
            open_secret(KEY, 1, SealedSecret(KEY.id, bytes(altered)))
        assert secret not in str(caught.value)
    with pytest.raises(UnreadableSecret):
        open_sealed(KEY.key, b"short", b"context")


def test_a_data_key_is_32_bytes_and_never_shown() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        DataKey(1, b"x" * 16)
    assert repr(bytes(range(32))) not in repr(KEY)
    assert "ciphertext" not in repr(SealedSecret(1, b"abc"))


def test_seal_binds_the_context() -> None:
    sealed = seal(KEY.key, b"plain", b"a")
    assert open_sealed(KEY.key, sealed, b"a") == b"plain"
    with pytest.raises(UnreadableSecret):
        open_sealed(KEY.key, sealed, b"b")
