"""Master keys: what encrypts the data keys, and never enters the database.

On AWS a KMS key created by the stack (``KmsMasterKey``): a data key is made by
``GenerateDataKey`` and opened by ``Decrypt``, both under an encryption context that names the
data key's id (besides the fixed pair the key's grants are conditioned on), so that the wrapped
key of one row does not open in another. Elsewhere a
local key (``LocalMasterKey``): ``TIDINGS_SECRETS_KEY`` (base64 of 32 bytes) when set, else a key
file made on first use (``<data dir>/secrets.key``, mode 0600). Each data key records which master
key encrypted it (``ref``), so that a changed key is noticed instead of producing garbage, and a
local key can be replaced while the previous ones (``TIDINGS_SECRETS_PREVIOUS_KEYS``) still open
what they encrypted until ``tidings secrets reencrypt`` has moved it.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tidings.secrets.envelope import (
    KEY_BYTES,
    UnreadableSecret,
    bind_to_row,
    bound_row,
    open_sealed,
    seal,
)

if TYPE_CHECKING:
    from tidings.config import Settings

SECRETS_KEY_ENV = "TIDINGS_SECRETS_KEY"
PREVIOUS_KEYS_ENV = "TIDINGS_SECRETS_PREVIOUS_KEYS"
KEY_FILE_NAME = "secrets.key"
# The dev runtime's data directory, where the key file lives unless TIDINGS_SECRETS_KEY_FILE says.
DEFAULT_DATA_DIR = Path(".tidings")
# The associated data of a data key sealed by a local key, and the encryption context of one
# made by KMS (its fixed pair is what the key's IAM grants are conditioned on); both name the data
# key's id, except in the data keys an earlier release stored.
LOCAL_DATA_KEY_CONTEXT = b"tidings/data-key"
KMS_ENCRYPTION_CONTEXT: Mapping[str, str] = {"tidings": "signing-secrets"}
KMS_DATA_KEY_ID = "data_key_id"


def local_data_key_context(key_id: int | None) -> bytes:
    """The associated data of the data key ``key_id`` (None: an earlier release's)."""
    if key_id is None:
        return LOCAL_DATA_KEY_CONTEXT
    return LOCAL_DATA_KEY_CONTEXT + f"/{int(key_id)}".encode()


def kms_encryption_context(key_id: int | None) -> dict[str, str]:
    """The encryption context of the data key ``key_id`` (None: an earlier release's)."""
    context = dict(KMS_ENCRYPTION_CONTEXT)
    if key_id is not None:
        context[KMS_DATA_KEY_ID] = str(int(key_id))
    return context


def _unwrapped(key_id: int, wrapped: bytes) -> tuple[int | None, bytes]:
    """The id a stored data key is bound to and the wrapped key; one bound to another row is
    refused (the database refuses to store one, this says so should it hold one anyway)."""
    row, inner = bound_row(wrapped)
    if row is not None and row != key_id:
        raise KeyUnavailable(f"the data key stored as {key_id} belongs to another row")
    return row, inner


class KeyUnavailable(RuntimeError):
    """A data key cannot be made or opened now (the master key is missing, refused, or out of
    reach); the message says which key and why, never its material."""


class MasterKey(Protocol):
    """What the keyring needs of a master key."""

    @property
    def ref(self) -> str:
        """Stored beside each data key: ``kms:<key ARN>`` or ``local:<fingerprint>``."""
        ...

    @property
    def where(self) -> str:
        """Where the key is, for people: the KMS key, the variable or the file."""
        ...

    def new_data_key(self, key_id: int) -> tuple[bytes, bytes]:
        """A new data key for the row ``key_id``: in clear, and encrypted by this master key
        (bound to that id, as stored)."""
        ...

    def open_data_key(self, ref: str, key_id: int, wrapped: bytes) -> bytes:
        """The data key inside ``wrapped``, stored as ``key_id``, which the master key ``ref``
        encrypted."""
        ...


def parse_key(text: str, source: str) -> bytes:
    """A local master key from its base64 text; errors name ``source``, never the value."""
    try:
        key = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise ValueError(f"{source} is not base64") from None
    if len(key) != KEY_BYTES:
        raise ValueError(f"{source} must hold {KEY_BYTES} bytes (base64), it holds {len(key)}")
    return key


def fingerprint(key: bytes) -> str:
    """A local key's reference: a hash that identifies it and reveals nothing of it."""
    return "local:" + hashlib.sha256(b"tidings local master key\x00" + key).hexdigest()[:20]


@dataclass(frozen=True, slots=True)
class LocalMasterKey:
    key: bytes
    where: str
    previous: tuple[bytes, ...] = ()

    def __repr__(self) -> str:
        return f"LocalMasterKey(ref={self.ref!r}, where={self.where!r})"

    @property
    def ref(self) -> str:
        return fingerprint(self.key)

    def new_data_key(self, key_id: int) -> tuple[bytes, bytes]:
        clear = os.urandom(KEY_BYTES)
        return clear, bind_to_row(key_id, seal(self.key, clear, local_data_key_context(key_id)))

    def open_data_key(self, ref: str, key_id: int, wrapped: bytes) -> bytes:
        row, inner = _unwrapped(key_id, wrapped)
        for key in (self.key, *self.previous):
            if fingerprint(key) == ref:
                try:
                    return open_sealed(key, inner, local_data_key_context(row))
                except UnreadableSecret:
                    raise KeyUnavailable(
                        f"a data key does not open with the local key {ref}"
                    ) from None
        raise KeyUnavailable(
            f"a data key was encrypted by the master key {ref}, which is not configured here "
            f"(this process has {self.ref}, from {self.where}; set {PREVIOUS_KEYS_ENV} to open "
            "what an earlier key encrypted)"
        )


class KmsMasterKey:
    """A KMS key; ``client`` is a boto3 KMS client."""

    def __init__(self, key_id: str, client: Any) -> None:
        if not key_id:
            raise ValueError("a KMS key id is needed")
        self.key_id = key_id
        self._client = client

    def __repr__(self) -> str:
        return f"KmsMasterKey({self.key_id!r})"

    @property
    def ref(self) -> str:
        return "kms:" + self.key_id

    @property
    def where(self) -> str:
        return f"the KMS key {self.key_id}"

    def new_data_key(self, key_id: int) -> tuple[bytes, bytes]:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self._client.generate_data_key(
                KeyId=self.key_id,
                KeySpec="AES_256",
                EncryptionContext=kms_encryption_context(key_id),
            )
        except (BotoCoreError, ClientError) as exc:
            raise KeyUnavailable(
                f"KMS refused a data key from {self.key_id}: {_reason(exc)}"
            ) from None
        return bytes(answer["Plaintext"]), bind_to_row(key_id, bytes(answer["CiphertextBlob"]))

    def open_data_key(self, ref: str, key_id: int, wrapped: bytes) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        if not ref.startswith("kms:"):
            raise KeyUnavailable(
                f"a data key was encrypted by the master key {ref}, not by a KMS key; "
                "re-encrypt the secrets where that key is configured"
            )
        kms_key = ref.removeprefix("kms:")
        row, inner = _unwrapped(key_id, wrapped)
        try:
            answer = self._client.decrypt(
                CiphertextBlob=inner, KeyId=kms_key, EncryptionContext=kms_encryption_context(row)
            )
        except (BotoCoreError, ClientError) as exc:
            raise KeyUnavailable(
                f"KMS could not open a data key of {kms_key}: {_reason(exc)}"
            ) from None
        return bytes(answer["Plaintext"])


def _reason(exc: Exception) -> str:
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", type(exc).__name__))
    return type(exc).__name__


def key_file_path(data_dir: Path) -> Path:
    return data_dir / KEY_FILE_NAME


def local_master_key(
    environ: Mapping[str, str], key_file: Path, *, create: bool = True
) -> LocalMasterKey:
    """The local master key: ``TIDINGS_SECRETS_KEY`` when set, else the key file (made on first
    use when ``create``), with the previous keys of ``TIDINGS_SECRETS_PREVIOUS_KEYS``."""
    previous = tuple(
        parse_key(part, f"{PREVIOUS_KEYS_ENV}[{index}]")
        for index, part in enumerate(
            p for p in environ.get(PREVIOUS_KEYS_ENV, "").split(",") if p.strip()
        )
    )
    text = environ.get(SECRETS_KEY_ENV, "")
    if text.strip():
        return LocalMasterKey(parse_key(text, SECRETS_KEY_ENV), f"${SECRETS_KEY_ENV}", previous)
    return LocalMasterKey(read_or_create_key_file(key_file, create=create), str(key_file), previous)


def read_or_create_key_file(path: Path, *, create: bool = True) -> bytes:
    """The key in ``path``; a new random key written there first (mode 0600) when there is none."""
    if not path.exists():
        if not create:
            raise KeyUnavailable(
                f"there is no key file at {path} yet (the first command that stores a signing "
                "secret makes it)"
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        text = base64.b64encode(os.urandom(KEY_BYTES)).decode("ascii") + "\n"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # made by another process meanwhile: read that one
        else:
            with os.fdopen(fd, "w", encoding="ascii") as handle:
                handle.write(text)
    return parse_key(path.read_text(encoding="ascii"), f"the key file {path}")


def configured_master_key(
    settings: Settings,
    *,
    data_dir: Path = DEFAULT_DATA_DIR,
    environ: Mapping[str, str] | None = None,
    create: bool = True,
) -> MasterKey:
    """The master key the settings name: the KMS key when ``TIDINGS_SECRETS_KMS_KEY_ID`` is set,
    else the local key (``TIDINGS_SECRETS_KEY``, else ``TIDINGS_SECRETS_KEY_FILE``, else
    ``<data_dir>/secrets.key``, made on first use when ``create``)."""
    env = os.environ if environ is None else environ
    if settings.secrets_kms_key_id:
        from tidings.aws_clients import kms_client

        key_id = settings.secrets_kms_key_id
        # A key ARN names its region (arn:aws:kms:<region>:<account>:key/<id>).
        parts = key_id.split(":")
        region = parts[3] if key_id.startswith("arn:") and len(parts) > 4 else None
        return KmsMasterKey(key_id, kms_client(settings.aws_endpoint_url or None, region))
    if env.get("AWS_LAMBDA_FUNCTION_NAME") and not env.get(SECRETS_KEY_ENV):
        raise KeyUnavailable(
            "TIDINGS_SECRETS_KMS_KEY_ID is not set: on Lambda, signing secrets are encrypted "
            "under the stack's KMS key"
        )
    key_file = (
        Path(settings.secrets_key_file) if settings.secrets_key_file else key_file_path(data_dir)
    )
    return local_master_key(env, key_file, create=create)
