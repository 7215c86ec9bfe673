"""Signing secrets at rest: data keys, encrypted secrets, and the passes that move old rows.

Only bytes the database cannot read pass through here (encrypted data keys, ciphertexts); the
keys that open them live in ``tidings.secrets``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class SealedSecret:
    """A signing secret as stored: the data key that sealed it and the sealed bytes."""

    data_key_id: int
    ciphertext: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class SealedCredential:
    """A receiver credential as stored: its row (the id it is sealed for), its kind (headers,
    auth, tls_client_certificate, tls_server_ca), the data key that sealed it, the sealed bytes."""

    id: int
    kind: str
    data_key_id: int
    ciphertext: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class StoredDataKey:
    id: int
    master_key: str
    wrapped: bytes = field(repr=False)
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class StoredSecret:
    """An encrypted secret as ``secrets_to_reencrypt`` finds it."""

    id: int
    endpoint_id: int
    data_key_id: int
    ciphertext: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class PlaintextSecrets:
    """An endpoint whose secrets an earlier release kept in clear."""

    endpoint_id: int
    secret: str | None = field(repr=False)
    previous_secret: str | None = field(repr=False)
    previous_expires_at: datetime | None


@dataclass(frozen=True, slots=True)
class NewCiphertext:
    """A secret encrypted for storage: its row's id (drawn before sealing), endpoint, data key,
    ciphertext and expiry (None for the current secret)."""

    id: int
    endpoint_id: int
    data_key_id: int
    ciphertext: bytes = field(repr=False)
    expires_at: datetime | None = None


def current_data_key(cur: Cursor, *, master_key: str, not_before: datetime) -> StoredDataKey | None:
    cur.execute(sql("current_data_key"), {"master_key": master_key, "not_before": not_before})
    rows = fetch_dicts(cur)
    return _data_key(rows[0]) if rows else None


def next_data_key_id(cur: Cursor) -> int:
    """The id the next data key is stored under (it is wrapped for it first)."""
    return _next_id(cur, "next_data_key_id")


def next_endpoint_secret_id(cur: Cursor) -> int:
    """The id the next signing secret is stored under (it is sealed for it first)."""
    return _next_id(cur, "next_endpoint_secret_id")


def insert_data_key(cur: Cursor, *, id: int, master_key: str, wrapped: bytes) -> StoredDataKey:
    cur.execute(sql("insert_data_key"), {"id": id, "master_key": master_key, "wrapped": wrapped})
    row = cur.fetchone()
    assert row is not None  # an INSERT ... RETURNING of one row
    return StoredDataKey(id, master_key, wrapped, row[0])


def load_data_keys(cur: Cursor, ids: Sequence[int]) -> list[StoredDataKey]:
    if not ids:
        return []
    cur.execute(sql("load_data_keys"), {"ids": list(ids)})
    return [_data_key(row) for row in fetch_dicts(cur)]


def set_endpoint_secret(
    cur: Cursor,
    endpoint_id: int,
    *,
    secret_id: int,
    data_key_id: int,
    ciphertext: bytes,
    overlap_s: float,
    max_secrets: int,
) -> tuple[bool, datetime | None]:
    """Make the secret current: (whether the endpoint exists, when the replaced one stops)."""
    cur.execute(
        sql("set_endpoint_secret"),
        {
            "endpoint_id": endpoint_id,
            "secret_id": secret_id,
            "data_key_id": data_key_id,
            "ciphertext": ciphertext,
            "overlap_s": overlap_s,
            "max_secrets": max_secrets,
        },
    )
    row = cur.fetchone()
    return (False, None) if row is None else (True, row[1])


def next_endpoint_credential_id(cur: Cursor) -> int:
    """The id the next receiver credential is stored under (it is sealed for it first)."""
    return _next_id(cur, "next_endpoint_credential_id")


def set_endpoint_credential(
    cur: Cursor,
    endpoint_id: int,
    *,
    kind: str,
    credential_id: int,
    data_key_id: int,
    ciphertext: bytes,
    shown: str,
    not_after: datetime | None,
) -> bool:
    """Replace the endpoint's credential of ``kind``; False when the endpoint is not there."""
    cur.execute(
        sql("set_endpoint_credential"),
        {
            "endpoint_id": endpoint_id,
            "kind": kind,
            "credential_id": credential_id,
            "data_key_id": data_key_id,
            "ciphertext": ciphertext,
            "shown": shown,
            "not_after": not_after,
        },
    )
    row = cur.fetchone()
    return bool(row and row[0])


def clear_endpoint_credential(cur: Cursor, endpoint_id: int, kind: str) -> bool:
    """Remove the endpoint's credential of ``kind``; whether there was one."""
    cur.execute(sql("clear_endpoint_credential"), {"endpoint_id": endpoint_id, "kind": kind})
    return cur.fetchone() is not None


def prune_expired_secrets(cur: Cursor, *, batch_size: int) -> int:
    cur.execute(sql("prune_expired_secrets"), {"batch_size": batch_size})
    row = cur.fetchone()
    return int(row[0]) if row else 0


def plaintext_secrets(cur: Cursor) -> list[PlaintextSecrets]:
    cur.execute(sql("plaintext_secrets"))
    return [
        PlaintextSecrets(
            row["id"], row["secret"], row["previous_secret"], row["previous_expires_at"]
        )
        for row in fetch_dicts(cur)
    ]


def store_encrypted_plaintext(
    cur: Cursor, secrets: Sequence[NewCiphertext], cleared_ids: Sequence[int]
) -> int:
    cur.execute(
        sql("store_encrypted_plaintext"),
        {
            "ids": [s.id for s in secrets],
            "endpoint_ids": [s.endpoint_id for s in secrets],
            "data_key_ids": [s.data_key_id for s in secrets],
            "ciphertexts": [s.ciphertext for s in secrets],
            "expires_at": [s.expires_at for s in secrets],
            "cleared_ids": list(cleared_ids),
        },
    )
    row = cur.fetchone()
    return int(row[0]) if row else 0


def secrets_to_reencrypt(
    cur: Cursor, *, data_key_id: int, unbound: bool, after_id: int, batch_size: int
) -> list[StoredSecret]:
    """Up to ``batch_size`` secrets after ``after_id`` not sealed by ``data_key_id`` (or, with
    ``unbound``, stored by an earlier release), locked."""
    cur.execute(
        sql("secrets_to_reencrypt"),
        {
            "data_key_id": data_key_id,
            "unbound": unbound,
            "after_id": after_id,
            "batch_size": batch_size,
        },
    )
    return [
        StoredSecret(row["id"], row["endpoint_id"], row["data_key_id"], bytes(row["ciphertext"]))
        for row in fetch_dicts(cur)
    ]


def replace_ciphertexts(cur: Cursor, replaced: Sequence[tuple[int, NewCiphertext]]) -> int:
    """Store re-encrypted secrets: (secret id, its new ciphertext) pairs."""
    if not replaced:
        return 0
    cur.execute(
        sql("replace_ciphertexts"),
        {
            "ids": [secret_id for secret_id, _ in replaced],
            "data_key_ids": [new.data_key_id for _, new in replaced],
            "ciphertexts": [new.ciphertext for _, new in replaced],
        },
    )
    row = cur.fetchone()
    return int(row[0]) if row else 0


def unbound_secrets_left(cur: Cursor) -> int:
    cur.execute(sql("unbound_secrets_left"))
    row = cur.fetchone()
    return int(row[0]) if row else 0


def drop_unused_data_keys(cur: Cursor, *, keep_id: int, grace_s: float) -> int:
    cur.execute(sql("drop_unused_data_keys"), {"keep_id": keep_id, "grace_s": grace_s})
    row = cur.fetchone()
    return int(row[0]) if row else 0


def _next_id(cur: Cursor, query: str) -> int:
    cur.execute(sql(query))
    row = cur.fetchone()
    assert row is not None  # nextval returns one row
    return int(row[0])


def _data_key(row: dict[str, object]) -> StoredDataKey:
    created = row.get("created_at")
    return StoredDataKey(
        int(row["id"]),  # type: ignore[call-overload]
        str(row["master_key"]),
        bytes(row["wrapped"]),  # type: ignore[call-overload]
        created if isinstance(created, datetime) else None,
    )
