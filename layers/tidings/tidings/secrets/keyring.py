"""The data keys a process uses, opened once and kept in memory.

Sealing a new secret uses the newest data key of the configured master key while it is younger
than ``secrets_data_key_max_age_s``; a new one is made (one KMS call on AWS) when there is none.
Opening secrets looks up the data keys they name, each opened once per process: a sender batch
makes no KMS call at all once its process has seen the keys, and at most one per data key before.
The cache is kept per database, since ids are only unique within one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

from tidings.dal import secrets as dal
from tidings.dal.connection import Cursor
from tidings.secrets.envelope import (
    DataKey,
    SealedSecret,
    UnreadableSecret,
    open_secret,
    seal_secret,
)
from tidings.secrets.master_keys import KeyUnavailable, MasterKey

# How long a process goes on sealing with the data key it looked up before it looks again (a
# newer one may have been made meanwhile); data keys replaced longer ago than DROP_GRACE_S may be
# dropped once no secret uses them.
CURRENT_KEY_RECHECK_S = 300.0
DROP_GRACE_S = 3600.0


class KeyringSettings(Protocol):
    @property
    def secrets_data_key_max_age_s(self) -> float: ...


class Keyring:
    def __init__(self, master: MasterKey, *, data_key_max_age_s: float) -> None:
        if data_key_max_age_s <= 0:
            raise ValueError("data_key_max_age_s must be positive")
        self.master = master
        self.data_key_max_age_s = data_key_max_age_s
        self._lock = threading.Lock()
        self._opened: dict[tuple[str, int], DataKey] = {}
        # Per database: the data key to seal with, and until when to use it without looking again.
        self._current: dict[str, tuple[DataKey, datetime]] = {}

    def __repr__(self) -> str:
        return f"Keyring({self.master!r})"

    def sealing_key(self, cur: Cursor, *, fresh: bool = False) -> DataKey:
        """The data key new secrets are sealed with; ``fresh`` makes a new one regardless."""
        database = _database(cur)
        now = datetime.now(UTC)
        with self._lock:
            cached = self._current.get(database)
            if cached is not None and cached[1] > now and not fresh:
                return cached[0]
        stored = (
            None
            if fresh
            else dal.current_data_key(
                cur,
                master_key=self.master.ref,
                not_before=now - timedelta(seconds=self.data_key_max_age_s),
            )
        )
        if stored is None:
            # Wrapped for the row it is stored in, whose id is drawn first.
            key_id = dal.next_data_key_id(cur)
            clear, wrapped = self.master.new_data_key(key_id)
            stored = dal.insert_data_key(
                cur, id=key_id, master_key=self.master.ref, wrapped=wrapped
            )
            key = DataKey(stored.id, clear)
        else:
            key = self._open(database, stored)
        created = stored.created_at or now
        use_until = min(
            now + timedelta(seconds=CURRENT_KEY_RECHECK_S),
            created + timedelta(seconds=self.data_key_max_age_s),
        )
        with self._lock:
            self._opened[(database, key.id)] = key
            self._current[database] = (key, use_until)
        return key

    def data_keys(self, cur: Cursor, ids: Iterable[int]) -> dict[int, DataKey]:
        """The data keys with these ids, opened; ``KeyUnavailable`` when one cannot be."""
        database = _database(cur)
        wanted = set(ids)
        with self._lock:
            found = {
                i: self._opened[(database, i)] for i in wanted if (database, i) in self._opened
            }
        missing = sorted(wanted - set(found))
        if missing:
            stored = dal.load_data_keys(cur, missing)
            absent = sorted(set(missing) - {s.id for s in stored})
            if absent:
                raise KeyUnavailable(f"no data key with id {absent[0]} in the database")
            for row in stored:
                found[row.id] = self._open(database, row)
        return found

    def seal(self, cur: Cursor, endpoint_id: int, secret: str) -> tuple[int, SealedSecret]:
        """``secret`` sealed for ``endpoint_id`` with the current data key, for a row whose id
        is drawn here: (that id, the sealed secret)."""
        key = self.sealing_key(cur)
        secret_id = dal.next_endpoint_secret_id(cur)
        return secret_id, seal_secret(key, endpoint_id, secret_id, secret)

    def _open(self, database: str, stored: dal.StoredDataKey) -> DataKey:
        with self._lock:
            cached = self._opened.get((database, stored.id))
        if cached is not None:
            return cached
        clear = self.master.open_data_key(stored.master_key, stored.id, stored.wrapped)
        try:
            key = DataKey(stored.id, clear)
        except ValueError:
            raise KeyUnavailable(f"data key {stored.id} is not an AES-256 key") from None
        with self._lock:
            self._opened[(database, stored.id)] = key
        return key


def open_secrets(
    keys: Mapping[int, DataKey], endpoint_id: int, sealed: Sequence[SealedSecret]
) -> list[str]:
    """The secrets inside ``sealed`` with data keys already opened (``Keyring.data_keys``)."""
    opened = []
    for item in sealed:
        key = keys.get(item.data_key_id)
        if key is None:
            raise UnreadableSecret("a secret names a data key that was not opened")
        opened.append(open_secret(key, endpoint_id, item))
    return opened


def _database(cur: Cursor) -> str:
    info = cur.connection.info
    return f"{info.host}:{info.port}/{info.dbname}"
