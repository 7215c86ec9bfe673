"""Signing secrets and data keys bound to their rows (migration 0092): an older ciphertext of
the same endpoint, an earlier release's kind of value, or another row's wrapped data key cannot
be put into a row; what an earlier release stored still opens until `tidings secrets reencrypt`
rewrites it, online, once per row however often it runs."""

from __future__ import annotations

import os
import threading

import psycopg2
import pytest

from tests.support.secrets import TEST_SECRETS_KEY_BYTES, secrets_keyring, stored_secrets
from tests.support.seed import add_secret, make_endpoint
from tidings.dal.connection import Cursor, Database
from tidings.secrets.envelope import is_bound, seal, secret_context
from tidings.secrets.master_keys import LOCAL_DATA_KEY_CONTEXT, fingerprint
from tidings.secrets.upkeep import reencrypt_online

CHECK_VIOLATION = "23514"
INVALID_PARAMETER = "22023"


def secret_rows(cur: Cursor, endpoint_id: int) -> list[tuple[int, int, bytes]]:
    cur.execute(
        "SELECT id, data_key_id, ciphertext FROM tidings.endpoint_secrets"
        " WHERE endpoint_id = %s ORDER BY id",
        (endpoint_id,),
    )
    return [(row[0], row[1], bytes(row[2])) for row in cur.fetchall()]


def store_as_an_earlier_release(cur: Cursor, secrets: dict[int, str]) -> None:
    """What the release before 0092 left: a data key wrapped under the constant context, and
    secrets bound to their endpoint only (written past the triggers, as only a superuser can)."""
    clear = os.urandom(32)
    cur.execute("SET session_replication_role = replica")
    cur.execute(
        "INSERT INTO tidings.data_keys (master_key, wrapped) VALUES (%s, %s) RETURNING id",
        (
            fingerprint(TEST_SECRETS_KEY_BYTES),
            seal(TEST_SECRETS_KEY_BYTES, clear, LOCAL_DATA_KEY_CONTEXT),
        ),
    )
    row = cur.fetchone()
    assert row is not None
    for endpoint_id, secret in secrets.items():
        cur.execute("DELETE FROM tidings.endpoint_secrets WHERE endpoint_id = %s", (endpoint_id,))
        cur.execute(
            "INSERT INTO tidings.endpoint_secrets (endpoint_id, data_key_id, ciphertext)"
            " VALUES (%s, %s, %s)",
            (endpoint_id, row[0], seal(clear, secret.encode(), secret_context(endpoint_id))),
        )
    cur.execute("RESET session_replication_role")


def test_an_older_ciphertext_of_the_same_endpoint_cannot_be_put_back(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        add_secret(cur, endpoint_id, "whsec_older")
        saved_id, _, saved_value = secret_rows(cur, endpoint_id)[-1]
        saved = (saved_id, saved_value)
        # Rotated out at once: its row goes.
        add_secret(cur, endpoint_id, "whsec_current", overlap_s=0)
        [(current_id, _, current)] = [
            row for row in secret_rows(cur, endpoint_id) if row[0] > saved_id
        ]
        older_id, older = saved
        # A writer puts the older secret's ciphertext (kept from before the rotation) into the
        # current row, or the earlier release's kind of value.
        assert older_id < current_id
        earlier_kind = seal(os.urandom(32), b"whsec_leaked", secret_context(endpoint_id))
        for value in (older, earlier_kind):
            with pytest.raises(psycopg2.Error) as caught:
                cur.execute(
                    "UPDATE tidings.endpoint_secrets SET ciphertext = %s WHERE id = %s",
                    (value, current_id),
                )
            assert caught.value.pgcode == CHECK_VIOLATION
            cur.connection.rollback()
        # Nor can it come back as a new row under its old id.
        with pytest.raises(psycopg2.Error) as caught:
            cur.execute(
                "SELECT tidings.set_endpoint_secret_v2(%s, %s, 1, %s, 0, 5)",
                (endpoint_id, older_id, older),
            )
        assert caught.value.pgcode == INVALID_PARAMETER
        cur.connection.rollback()
        signing = stored_secrets(cur, endpoint_id)
        assert signing[0] == "whsec_current" and "whsec_older" not in signing
        assert (current_id, current) in [(r[0], r[2]) for r in secret_rows(cur, endpoint_id)]


def test_a_wrapped_data_key_cannot_be_swapped_between_keys(db: Database) -> None:
    keyring = secrets_keyring()
    with db.cursor() as cur:
        first = keyring.sealing_key(cur)
        second = keyring.sealing_key(cur, fresh=True)
        cur.execute(
            "SELECT id, wrapped FROM tidings.data_keys WHERE id IN (%s, %s) ORDER BY id",
            (first.id, second.id),
        )
        [(_, first_wrapped), (second_id, _)] = cur.fetchall()
        with pytest.raises(psycopg2.Error) as caught:
            cur.execute(
                "UPDATE tidings.data_keys SET wrapped = %s WHERE id = %s",
                (first_wrapped, second_id),
            )
        assert caught.value.pgcode == CHECK_VIOLATION
        cur.connection.rollback()
        with pytest.raises(psycopg2.Error) as caught:
            cur.execute(
                "INSERT INTO tidings.data_keys (master_key, wrapped) VALUES (%s, %s)",
                (keyring.master.ref, first_wrapped),
            )
        assert caught.value.pgcode == CHECK_VIOLATION


def test_reencrypt_binds_an_earlier_releases_secrets_online_once(
    db: Database, database_url: str
) -> None:
    with db.cursor() as cur:
        secrets = {make_endpoint(cur, f"https://r.example/{n}"): f"whsec_{n}" for n in range(5)}
        store_as_an_earlier_release(cur, secrets)
        # They still open as they are.
        assert {e: stored_secrets(cur, e) for e in secrets} == {e: [s] for e, s in secrets.items()}
        # The data key to move them to exists before two runs race for the rows.
        secrets_keyring().sealing_key(cur)
    results = []

    def run() -> None:
        # A connection each, as two operators' runs would have.
        own = Database(database_url)
        try:
            results.append(reencrypt_online(own, secrets_keyring(), batch_size=2))
        finally:
            own.close()

    runs = [threading.Thread(target=run) for _ in range(2)]
    for thread in runs:
        thread.start()
    for thread in runs:
        thread.join()
    assert sum(r.reencrypted for r in results) == len(secrets), results
    assert [r.unbound_left for r in results] == [0, 0]
    again = reencrypt_online(db, secrets_keyring())
    assert (again.reencrypted, again.unbound_left, again.unreadable) == (0, 0, 0)
    with db.cursor() as cur:
        for endpoint_id, secret in secrets.items():
            [(row_id, _, value)] = secret_rows(cur, endpoint_id)
            assert is_bound(value) and value[4:12] == row_id.to_bytes(8, "big")
            assert stored_secrets(cur, endpoint_id) == [secret]
        # The earlier release's data key seals nothing any more: only bound keys are left in use.
        cur.execute(
            "SELECT count(*) FROM tidings.data_keys d WHERE substring(d.wrapped FOR 4) <> "
            "'\\x74646702'::bytea AND EXISTS (SELECT 1 FROM tidings.endpoint_secrets s"
            " WHERE s.data_key_id = d.id)"
        )
        assert cur.fetchone() == (0,)
