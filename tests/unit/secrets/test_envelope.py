"""The cipher rules of stored signing secrets."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.delivery.signing import generate_secret
from tidings.secrets.envelope import (
    BOUND_MARK,
    NONCE_BYTES,
    ROW_ID_BYTES,
    TAG_BYTES,
    DataKey,
    SealedSecret,
    UnreadableSecret,
    bind_to_row,
    bound_row,
    is_bound,
    open_sealed,
    open_secret,
    seal,
    seal_secret,
    secret_context,
)

KEY = DataKey(7, bytes(range(32)))


@given(st.integers(min_value=1, max_value=2**63 - 1), st.binary(min_size=24, max_size=64))
def test_a_sealed_secret_opens_for_its_endpoint_and_holds_no_trace_of_it(
    endpoint_id: int, raw: bytes
) -> None:
    import base64

    secret = "whsec_" + base64.b64encode(raw).decode()
    sealed = seal_secret(KEY, endpoint_id, 5, secret)
    assert sealed.data_key_id == KEY.id
    assert len(sealed.ciphertext) == (
        len(BOUND_MARK) + ROW_ID_BYTES + NONCE_BYTES + len(secret) + TAG_BYTES
    )
    assert secret.encode() not in sealed.ciphertext and raw not in sealed.ciphertext
    assert open_secret(KEY, endpoint_id, sealed) == secret
    assert open_secret(KEY, endpoint_id, sealed, secret_id=5) == secret


def test_each_seal_uses_a_new_nonce() -> None:
    secret = generate_secret()
    assert seal_secret(KEY, 1, 5, secret).ciphertext != seal_secret(KEY, 1, 5, secret).ciphertext


def test_a_secret_does_not_open_for_another_endpoint_or_with_another_key() -> None:
    sealed = seal_secret(KEY, 1, 5, generate_secret())
    with pytest.raises(UnreadableSecret):
        open_secret(KEY, 2, sealed)
    with pytest.raises(UnreadableSecret):
        open_secret(DataKey(KEY.id, os.urandom(32)), 1, sealed)
    with pytest.raises(ValueError, match="sealed by data key 7, not 8"):
        open_secret(DataKey(8, KEY.key), 1, sealed)


def test_a_changed_bit_is_refused_without_quoting_anything() -> None:
    secret = generate_secret()
    sealed = seal_secret(KEY, 1, 5, secret)
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


def test_a_secret_is_bound_to_its_row_and_an_older_one_does_not_open_in_another() -> None:
    older = seal_secret(KEY, 1, 5, "whsec_older")
    assert is_bound(older.ciphertext) and bound_row(older.ciphertext)[0] == 5
    # Put back into the endpoint's current row (id 9), it names its own row: refused by a
    # reader that knows the row (and by the database on write, which keeps every reader safe).
    with pytest.raises(UnreadableSecret, match="another row"):
        open_secret(KEY, 1, older, secret_id=9)
    # Relabelled as row 9's, it does not open at all: the row is in the associated data.
    _, inner = bound_row(older.ciphertext)
    relabelled = SealedSecret(KEY.id, bind_to_row(9, inner))
    for secret_id in (None, 9):
        with pytest.raises(UnreadableSecret):
            open_secret(KEY, 1, relabelled, secret_id=secret_id)
    # Nor does it open as the earlier release's kind, bound to the endpoint only.
    with pytest.raises(UnreadableSecret):
        open_secret(KEY, 1, SealedSecret(KEY.id, inner))


def test_a_secret_an_earlier_release_stored_still_opens_until_rewritten() -> None:
    earlier = SealedSecret(KEY.id, seal(KEY.key, b"whsec_earlier", secret_context(1)))
    assert not is_bound(earlier.ciphertext)
    assert open_secret(KEY, 1, earlier) == "whsec_earlier"
    assert open_secret(KEY, 1, earlier, secret_id=4) == "whsec_earlier"
    with pytest.raises(UnreadableSecret):
        open_secret(KEY, 2, earlier)
