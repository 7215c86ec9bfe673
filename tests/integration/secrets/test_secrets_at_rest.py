"""Signing secrets at rest: nothing in the database holds one in clear, those an earlier release
stored in clear are encrypted by the first run after the upgrade, and a changed key is taken
over by re-encrypting."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg2
import pytest

from tests.support.secrets import found_in_clear, secrets_keyring, stored_secrets
from tidings import migrations
from tidings.cli import main
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.delivery.signing import generate_secret
from tidings.logic import endpoints
from tidings.logic.schema import prepare_database
from tidings.secrets.keyring import Keyring
from tidings.secrets.master_keys import KeyUnavailable, LocalMasterKey
from tidings.secrets.upkeep import keep_secrets

# The deployment's payload limit, which the migrator writes where the SQL functions read it.
LIMIT = Settings().max_payload_bytes

# The migrations of the release before this one: the secrets were columns of endpoints.
BEFORE_ENCRYPTION = 69
SETTINGS = Settings(allowed_networks=("93.184.215.0/24",))
KEY_A = bytes(range(32))
KEY_B = bytes(range(100, 132))


def keyring_of(key: bytes, *previous: bytes) -> Keyring:
    return Keyring(LocalMasterKey(key, "test", previous), data_key_max_age_s=86400)


def test_nothing_in_the_database_holds_a_secret_in_clear(db: Database) -> None:
    keyring = secrets_keyring()
    shown = []
    for n in range(3):
        created = endpoints.create_endpoint(
            db, keyring=keyring, url=f"https://93.184.215.14/{n}", settings=SETTINGS
        )
        shown.append(created.secret)
        for _ in range(n + 2):
            rotated = endpoints.rotate_secret(db, created.id, keyring=keyring, settings=SETTINGS)
            shown.append(rotated.secret)
    with db.cursor() as cur:
        assert found_in_clear(cur, shown) == []
        # The search does find a secret in clear: one written where an earlier release kept it.
        cur.execute("UPDATE tidings.endpoints SET secret = %s WHERE id = 1", (shown[0],))
        assert found_in_clear(cur, shown) == ["endpoints.secret"]


def test_secrets_stored_in_clear_are_encrypted_by_the_first_run_after_the_upgrade(
    empty_database: str,
) -> None:
    conn = psycopg2.connect(empty_database)
    conn.autocommit = True
    migrations.migrate(conn, until=BEFORE_ENCRYPTION)
    current = [generate_secret() for _ in range(3)]
    previous = [generate_secret() for _ in range(2)]
    with conn.cursor() as cur:
        # As the release before wrote them: one endpoint rotated within a day, one whose
        # previous secret expired an hour ago, one never rotated.
        cur.execute(
            "INSERT INTO tidings.endpoints (url, secret, previous_secret,"
            " previous_secret_expires_at) VALUES"
            " ('https://r.example/1', %s, %s, now() + interval '1 day'),"
            " ('https://r.example/2', %s, %s, now() - interval '1 hour'),"
            " ('https://r.example/3', %s, NULL, NULL)",
            (current[0], previous[0], current[1], previous[1], current[2]),
        )
        cur.execute("SELECT previous_secret_expires_at FROM tidings.endpoints WHERE id = 1")
        (rotated_until,) = cur.fetchone()  # type: ignore[misc]

    prepared = prepare_database(conn, secrets_keyring(), max_payload_bytes=LIMIT)
    assert "0070_signing_secrets" in prepared.applied
    assert prepared.secrets.encrypted_endpoints == 3
    with conn.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.endpoints"
            " WHERE secret IS NOT NULL OR previous_secret IS NOT NULL"
            " OR previous_secret_expires_at IS NOT NULL"
        )
        assert cur.fetchone() == (0,)
        assert stored_secrets(cur, 1) == [current[0], previous[0]]
        assert stored_secrets(cur, 2) == [current[1]]
        assert stored_secrets(cur, 3) == [current[2]]
        cur.execute("SELECT expires_at FROM tidings.endpoint_secrets WHERE expires_at IS NOT NULL")
        assert cur.fetchall() == [(rotated_until,)]
        assert found_in_clear(cur, current + previous) == []
    # The next run finds nothing left to encrypt.
    assert (
        prepare_database(
            conn, secrets_keyring(), max_payload_bytes=LIMIT
        ).secrets.encrypted_endpoints
        == 0
    )
    conn.close()


def test_after_the_local_key_changes_reencrypting_moves_every_secret_to_the_new_one(
    db: Database,
) -> None:
    old = keyring_of(KEY_A)
    secrets = {}
    for n in range(3):
        created = endpoints.create_endpoint(
            db, keyring=old, url=f"https://93.184.215.14/{n}", settings=SETTINGS
        )
        rotated = endpoints.rotate_secret(db, created.id, keyring=old, settings=SETTINGS)
        secrets[created.id] = [rotated.secret, created.secret]
    new = keyring_of(KEY_B, KEY_A)
    result = db.run(lambda cur: keep_secrets(cur, new), transaction=True)
    assert (result.reencrypted, result.unreadable, result.data_keys_dropped) == (6, 0, 0)

    new_alone = keyring_of(KEY_B)
    with db.cursor() as cur:
        cur.execute(
            "SELECT DISTINCT d.master_key FROM tidings.endpoint_secrets s"
            " JOIN tidings.data_keys d ON d.id = s.data_key_id"
        )
        assert cur.fetchall() == [(new_alone.master.ref,)]
        for endpoint_id, expected in secrets.items():
            assert stored_secrets(cur, endpoint_id, new_alone) == expected
        # The old data key seals nothing now; it goes once the new one has been in use a while.
        cur.execute("UPDATE tidings.data_keys SET created_at = created_at - interval '2 hours'")
    again = db.run(lambda cur: keep_secrets(cur, new), transaction=True)
    assert (again.reencrypted, again.data_keys_dropped) == (0, 1)
    with db.cursor() as cur, pytest.raises(KeyUnavailable):
        keyring_of(KEY_A).data_keys(cur, {again.data_key_id})


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("DATABASE_URL", database_url)

    def run(*argv: str, **env: str) -> tuple[int, str, str]:
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_the_cli_says_where_the_key_is_and_reencrypts(cli: Any, db: Database) -> None:
    old = keyring_of(KEY_A)
    created = endpoints.create_endpoint(
        db, keyring=old, url="https://93.184.215.14/x", settings=SETTINGS
    )
    code, out, _ = cli("secrets", "where")
    assert code == 0 and "$TIDINGS_SECRETS_KEY" in out and "keep a copy" in out

    b64 = base64.b64encode
    code, out, _ = cli(
        "secrets",
        "reencrypt",
        "--json",
        TIDINGS_SECRETS_KEY=b64(KEY_B).decode(),
        TIDINGS_SECRETS_PREVIOUS_KEYS=b64(KEY_A).decode(),
    )
    assert code == 0, out
    assert json.loads(out)["reencrypted"] == 1
    with db.cursor() as cur:
        assert stored_secrets(cur, created.id, keyring_of(KEY_B)) == [created.secret]

    # Without the previous key, the rows cannot be opened: said, exit 1, nothing changed.
    code, _, err = cli(
        "secrets",
        "reencrypt",
        "--new-data-key",
        TIDINGS_SECRETS_KEY=b64(KEY_A).decode(),
        TIDINGS_SECRETS_PREVIOUS_KEYS="",
    )
    assert code == 1 and "TIDINGS_SECRETS_PREVIOUS_KEYS" in err
    code, _, err = cli("secrets", "where", TIDINGS_SECRETS_KEY="not a key")
    assert code == 2 and "TIDINGS_SECRETS_KEY is not base64" in err
    assert created.secret not in err


def test_a_deleted_endpoint_keeps_no_secret(db: Database) -> None:
    keyring = secrets_keyring()
    created = endpoints.create_endpoint(
        db, keyring=keyring, url="https://93.184.215.14/x", settings=SETTINGS
    )
    endpoints.rotate_secret(db, created.id, keyring=keyring, settings=SETTINGS)
    endpoints.delete_endpoint(db, created.id)
    with db.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM tidings.endpoint_secrets WHERE endpoint_id = %s", (created.id,)
        )
        assert cur.fetchone() == (0,)


def test_expired_rotated_out_secrets_are_pruned(db: Database) -> None:
    from tidings.maintenance.pruning import prune

    keyring = secrets_keyring()
    created = endpoints.create_endpoint(
        db, keyring=keyring, url="https://93.184.215.14/x", settings=SETTINGS
    )
    endpoints.rotate_secret(db, created.id, keyring=keyring, settings=SETTINGS)
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_secrets SET expires_at = now() - interval '1 second'"
            " WHERE expires_at IS NOT NULL"
        )
    result = prune(db, Settings(), datetime.now(UTC) + timedelta(seconds=1))
    assert result.expired_secrets_deleted == 1
    with db.cursor() as cur:
        assert len(stored_secrets(cur, created.id)) == 1
