"""Preparing the database for this release: the use case of the migrator, ``tidings migrate``
and ``tidings dev``.

In one transaction: the pending migrations, the schema handed to its owner role, the deployment's
payload limit written where the SQL enqueue functions read it, the signing secrets an earlier
release kept in clear encrypted and every secret moved to the current data key, and (on AWS) the
login users of the functions and producers made or given their current passwords. A failure
leaves nothing half done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import psycopg2.extensions

from tidings import migrations
from tidings.dal import logins as logins_dal
from tidings.dal import schema as schema_dal
from tidings.secrets.keyring import Keyring
from tidings.secrets.upkeep import UpkeepResult, keep_secrets


@dataclass(frozen=True, slots=True)
class DatabaseLogin:
    """A login user to make: its name, the group role it joins, its password."""

    user: str
    role: str
    password: str = field(repr=False)


@dataclass(frozen=True, slots=True)
class Prepared:
    applied: tuple[str, ...]
    secrets: UpkeepResult
    logins: tuple[str, ...]


def prepare_database(
    conn: psycopg2.extensions.connection,
    keyring: Keyring,
    *,
    max_payload_bytes: int,
    operational_application: str = "tidings-operational",
    operational_failing_attempt: int = 4,
    logins: Sequence[DatabaseLogin] = (),
    fresh_data_key: bool = False,
    policy: migrations.LockPolicy | None = None,
) -> Prepared:
    """Migrate, keep the secrets under the current key, make the logins: all or nothing.

    ``max_payload_bytes`` is the deployment's ``TIDINGS_MAX_PAYLOAD_BYTES``, the API's limit:
    written here, it is the SQL functions' limit too (one setting for both paths). So are the
    operational application (made when missing) and the failed attempt that
    message.attempt.failing reports (``TIDINGS_OPERATIONAL_APPLICATION`` and
    ``TIDINGS_OPERATIONAL_FAILING_ATTEMPT``)."""
    kept: list[UpkeepResult] = []

    def finish(cur: psycopg2.extensions.cursor) -> None:
        schema_dal.store_max_payload_bytes(cur, max_payload_bytes)
        schema_dal.store_operational_settings(
            cur, application=operational_application, failing_attempt=operational_failing_attempt
        )
        kept.append(keep_secrets(cur, keyring, fresh=fresh_data_key))
        for login in logins:
            logins_dal.ensure_login(cur, user=login.user, group=login.role, password=login.password)

    applied = migrations.migrate(conn, policy=policy, finish=finish)
    return Prepared(tuple(applied), kept[0], tuple(login.user for login in logins))


def logins_from_secrets(spec: str) -> list[DatabaseLogin]:
    """The logins a JSON list names (``[{"user", "role", "secret_arn"}, ...]``), each with the
    password in its Secrets Manager secret (a JSON document with ``password``)."""
    import json

    from aws_lambda_powertools.utilities import parameters

    try:
        entries = json.loads(spec)
    except json.JSONDecodeError as exc:
        raise ValueError("the list of database logins is not JSON") from exc
    if not isinstance(entries, list):
        raise ValueError("the list of database logins is not a JSON list")
    logins = []
    for entry in entries:
        if not isinstance(entry, dict) or not {"user", "role", "secret_arn"} <= set(entry):
            raise ValueError("each database login needs user, role and secret_arn")
        secret = json.loads(str(parameters.get_secret(entry["secret_arn"], max_age=0)))
        logins.append(
            DatabaseLogin(str(entry["user"]), str(entry["role"]), str(secret["password"]))
        )
    return logins
