"""Local master keys: where they come from, how they open what they encrypted, what they say."""

from __future__ import annotations

import base64
import os
import stat
from pathlib import Path

import pytest

from tidings.config import Settings
from tidings.secrets.envelope import bind_to_row, bound_row, seal
from tidings.secrets.master_keys import (
    LOCAL_DATA_KEY_CONTEXT,
    PREVIOUS_KEYS_ENV,
    SECRETS_KEY_ENV,
    KeyUnavailable,
    LocalMasterKey,
    configured_master_key,
    fingerprint,
    local_master_key,
    parse_key,
)

KEY_A = bytes(range(32))
KEY_B = bytes(range(1, 33))


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def test_the_key_comes_from_the_variable_when_it_is_set(tmp_path: Path) -> None:
    found = local_master_key({SECRETS_KEY_ENV: b64(KEY_A)}, tmp_path / "secrets.key")
    assert found.key == KEY_A
    assert found.where == f"${SECRETS_KEY_ENV}"
    assert not (tmp_path / "secrets.key").exists()


def test_else_a_key_file_is_made_on_first_use_readable_by_its_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "data" / "secrets.key"
    first = local_master_key({}, path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(base64.b64decode(path.read_text())) == 32
    assert first.where == str(path)
    # And the same key every time after.
    assert local_master_key({}, path).key == first.key
    with pytest.raises(KeyUnavailable, match="no key file"):
        local_master_key({}, tmp_path / "elsewhere.key", create=False)


def test_a_malformed_key_is_named_never_shown() -> None:
    bad = "not-base64!" + "x" * 30
    with pytest.raises(ValueError) as caught:
        parse_key(bad, SECRETS_KEY_ENV)
    assert SECRETS_KEY_ENV in str(caught.value) and bad not in str(caught.value)
    with pytest.raises(ValueError, match="32 bytes"):
        parse_key(b64(b"short"), SECRETS_KEY_ENV)


def test_a_data_key_opens_with_the_key_that_made_it_or_a_previous_one_only() -> None:
    old = LocalMasterKey(KEY_A, "old")
    clear, wrapped = old.new_data_key(4)
    assert clear not in wrapped and len(clear) == 32
    assert old.open_data_key(old.ref, 4, wrapped) == clear

    new = local_master_key(
        {SECRETS_KEY_ENV: b64(KEY_B), PREVIOUS_KEYS_ENV: b64(KEY_A)}, Path("unused")
    )
    assert new.ref != old.ref
    assert new.open_data_key(old.ref, 4, wrapped) == clear
    alone = LocalMasterKey(KEY_B, "new")
    with pytest.raises(KeyUnavailable) as caught:
        alone.open_data_key(old.ref, 4, wrapped)
    assert old.ref in str(caught.value) and PREVIOUS_KEYS_ENV in str(caught.value)
    assert b64(KEY_A) not in str(caught.value) and b64(KEY_B) not in str(caught.value)


def test_a_wrapped_data_key_opens_as_its_own_row_only() -> None:
    master = LocalMasterKey(KEY_A, "test")
    clear, wrapped = master.new_data_key(4)
    _, other = master.new_data_key(5)
    # Swapped between two rows, as it is or relabelled with the other row's id: neither opens.
    with pytest.raises(KeyUnavailable, match="belongs to another row"):
        master.open_data_key(master.ref, 5, wrapped)
    relabelled = bind_to_row(5, bound_row(wrapped)[1])
    with pytest.raises(KeyUnavailable, match="does not open"):
        master.open_data_key(master.ref, 5, relabelled)
    assert master.open_data_key(master.ref, 5, other) != clear
    # A data key an earlier release stored (a constant context, no row) still opens.
    earlier = seal(KEY_A, clear, LOCAL_DATA_KEY_CONTEXT)
    assert master.open_data_key(master.ref, 3, earlier) == clear


def test_fingerprints_identify_keys_without_revealing_them() -> None:
    assert fingerprint(KEY_A) == fingerprint(KEY_A) != fingerprint(KEY_B)
    assert fingerprint(KEY_A).startswith("local:")
    assert KEY_A.hex() not in fingerprint(KEY_A)
    assert b64(KEY_A) not in repr(LocalMasterKey(KEY_A, "x"))


def test_a_kms_key_is_used_when_named_and_required_on_lambda(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Making the client reads credentials (without any call); give it some.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    found = configured_master_key(
        Settings(secrets_kms_key_id="arn:aws:kms:eu-west-1:123456789012:key/k"),
        data_dir=tmp_path,
        environ={},
    )
    assert found.ref == "kms:arn:aws:kms:eu-west-1:123456789012:key/k"
    with pytest.raises(KeyUnavailable, match="TIDINGS_SECRETS_KMS_KEY_ID"):
        configured_master_key(
            Settings(), data_dir=tmp_path, environ={"AWS_LAMBDA_FUNCTION_NAME": "tidings-sender"}
        )
    assert not (tmp_path / "secrets.key").exists()
    local = configured_master_key(Settings(), data_dir=tmp_path, environ={})
    assert local.where == str(tmp_path / "secrets.key")
    named = configured_master_key(
        Settings(secrets_key_file=str(tmp_path / "k")), data_dir=tmp_path, environ={}
    )
    assert named.where == str(tmp_path / "k")
    assert os.path.exists(tmp_path / "k")
