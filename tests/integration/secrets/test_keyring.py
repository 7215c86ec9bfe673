"""The keyring against a real database, with the KMS master key against moto's KMS: data keys
made once and opened once per process, so a sender batch makes no KMS call per message."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.support.seed import make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import AttemptRequest
from tidings.delivery.signing import generate_secret
from tidings.secrets.envelope import bind_to_row, bound_row
from tidings.secrets.keyring import Keyring, open_secrets
from tidings.secrets.master_keys import (
    KMS_ENCRYPTION_CONTEXT,
    KeyUnavailable,
    KmsMasterKey,
    LocalMasterKey,
)

REGION = "eu-west-1"


class Counting:
    """A master key that counts the calls made to it."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.made = 0
        self.opened = 0

    @property
    def ref(self) -> str:
        return str(self.inner.ref)

    @property
    def where(self) -> str:
        return str(self.inner.where)

    def new_data_key(self, key_id: int) -> tuple[bytes, bytes]:
        self.made += 1
        return self.inner.new_data_key(key_id)  # type: ignore[no-any-return]

    def open_data_key(self, ref: str, key_id: int, wrapped: bytes) -> bytes:
        self.opened += 1
        return self.inner.open_data_key(ref, key_id, wrapped)  # type: ignore[no-any-return]


@pytest.fixture
def kms(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.client("kms", region_name=REGION)


def test_a_kms_key_makes_data_keys_that_only_it_opens_under_the_context(kms: Any) -> None:
    metadata = kms.create_key(Description="tidings test")["KeyMetadata"]
    key_arn = metadata["Arn"]
    master = KmsMasterKey(key_arn, kms)
    clear, wrapped = master.new_data_key(7)
    assert len(clear) == 32 and clear not in wrapped
    assert master.ref == f"kms:{key_arn}"
    assert master.open_data_key(master.ref, 7, wrapped) == clear
    # Stored as data key 7: the id is written before KMS's blob and named in its encryption
    # context, beside the pair the key's grants are conditioned on.
    row, blob = bound_row(wrapped)
    assert row == 7
    context = {**KMS_ENCRYPTION_CONTEXT, "data_key_id": "7"}
    assert (
        kms.decrypt(CiphertextBlob=blob, KeyId=key_arn, EncryptionContext=context)["Plaintext"]
        == clear
    )
    # KMS refuses it without that context, or with the context of another data key.
    for refused in ({}, dict(KMS_ENCRYPTION_CONTEXT), {**context, "data_key_id": "8"}):
        with pytest.raises(kms.exceptions.InvalidCiphertextException):
            kms.decrypt(CiphertextBlob=blob, KeyId=key_arn, EncryptionContext=refused)
    # So a wrapped key moved to another row does not open there, with its id or that row's.
    with pytest.raises(KeyUnavailable, match="belongs to another row"):
        master.open_data_key(master.ref, 8, wrapped)
    with pytest.raises(KeyUnavailable, match="InvalidCiphertextException"):
        master.open_data_key(master.ref, 8, bind_to_row(8, blob))
    # A data key an earlier release made (constant context, no id) still opens.
    earlier = kms.generate_data_key(
        KeyId=key_arn, KeySpec="AES_256", EncryptionContext=dict(KMS_ENCRYPTION_CONTEXT)
    )
    assert master.open_data_key(master.ref, 3, earlier["CiphertextBlob"]) == earlier["Plaintext"]
    # A key KMS refuses (missing here; disabled or not allowed in AWS) leaves the caller a
    # KeyUnavailable that names the key and KMS's reason.
    missing = key_arn.replace(metadata["KeyId"], "00000000-0000-0000-0000-000000000000")
    with pytest.raises(KeyUnavailable, match=f"{missing}: NotFoundException"):
        KmsMasterKey(missing, kms).new_data_key(9)
    with pytest.raises(KeyUnavailable, match="not by a KMS key"):
        master.open_data_key("local:abc", 7, wrapped)


def test_a_sender_batch_opens_each_data_key_once_per_process(db: Database, kms: Any) -> None:
    key_arn = kms.create_key()["KeyMetadata"]["Arn"]
    writer = Counting(KmsMasterKey(key_arn, kms))
    writing = Keyring(writer, data_key_max_age_s=86400)
    endpoints: dict[int, str] = {}
    with db.cursor() as cur:
        for n in range(3):
            endpoint_id = make_endpoint(cur, f"https://r.example/{n}")
            secret = generate_secret()
            secret_id, sealed = writing.seal(cur, endpoint_id, secret)
            cur.execute(
                "SELECT tidings.set_endpoint_secret_v2(%s, %s, %s, %s, 0, 5)",
                (endpoint_id, secret_id, sealed.data_key_id, sealed.ciphertext),
            )
            endpoints[endpoint_id] = secret
            seed_messages(cur, endpoint_id, 4)
    # Three secrets sealed, one data key made, none opened (the maker knows it in clear).
    assert (writer.made, writer.opened) == (1, 0)

    reader = Counting(KmsMasterKey(key_arn, kms))
    reading = Keyring(reader, data_key_max_age_s=86400)
    for _ in range(2):  # two batches in one process
        with db.cursor() as cur:
            claimed = delivery.claim_due(cur, batch_size=6, lease_s=60)
            started = delivery.begin_attempts(
                cur, [AttemptRequest(row.lease, 1) for row in claimed], lease_s=60
            )
            keys = reading.data_keys(cur, {s.data_key_id for row in started for s in row.secrets})
        for row in started:
            assert open_secrets(keys, row.endpoint_id, row.secrets)[0] == endpoints[row.endpoint_id]
    assert len(started) == 6
    assert (reader.made, reader.opened) == (0, 1)


def test_new_secrets_get_a_new_data_key_once_the_current_one_is_old(db: Database) -> None:
    master = Counting(LocalMasterKey(bytes(32), "test"))
    keyring = Keyring(master, data_key_max_age_s=3600)
    with db.cursor() as cur:
        first = keyring.sealing_key(cur)
        assert keyring.sealing_key(cur) == first
        # Another process finds the same one rather than making its own.
        assert Keyring(master, data_key_max_age_s=3600).sealing_key(cur).id == first.id
        cur.execute(
            "UPDATE tidings.data_keys SET created_at = created_at - %s", (timedelta(hours=2),)
        )
        later = Keyring(master, data_key_max_age_s=3600).sealing_key(cur)
        assert later.id != first.id
        assert keyring.sealing_key(cur, fresh=True).id not in {first.id, later.id}
    assert master.made == 3


def test_a_data_key_this_process_cannot_open_is_unavailable_not_garbage(db: Database) -> None:
    keyring = Keyring(LocalMasterKey(bytes(32), "test"), data_key_max_age_s=3600)
    other = LocalMasterKey(bytes(range(32)), "another key")
    with db.cursor() as cur:
        with pytest.raises(KeyUnavailable, match="no data key with id 999"):
            keyring.data_keys(cur, {999})
        theirs = Keyring(other, data_key_max_age_s=3600).sealing_key(cur)
        with pytest.raises(KeyUnavailable, match=other.ref):
            keyring.data_keys(cur, {theirs.id})
