"""The migrator custom-resource handler against a real, empty PostgreSQL database."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import psycopg2
import pytest

from tidings.config import Settings

HANDLER_PATH = Path(__file__).resolve().parents[3] / "functions" / "migrator" / "app.py"


@dataclass
class LambdaContext:
    function_name: str = "tidings-migrator"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:tidings-migrator"
    aws_request_id: str = "request-1"


def _load_handler() -> ModuleType:
    spec = importlib.util.spec_from_file_location("migrator_app", HANDLER_PATH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _event(request_type: str) -> dict[str, object]:
    return {
        "RequestType": request_type,
        "ResourceType": "Custom::TidingsSchema",
        "LogicalResourceId": "MigrationsSchema",
        "ResourceProperties": {"MigrationsHash": "abc"},
        "PhysicalResourceId": "tidings-schema",
    }


@pytest.fixture
def migrator(empty_database: str, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    module = _load_handler()
    monkeypatch.setattr(module, "get_settings", lambda: Settings(database_url=empty_database))
    return module


def _recorded_versions(dsn: str) -> list[int]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT version FROM tidings.schema_migrations ORDER BY version")
            return [row[0] for row in cur.fetchall()]
    finally:
        conn.close()


def test_create_applies_every_migration_and_update_finds_nothing_left(
    migrator: ModuleType, empty_database: str
) -> None:
    created = migrator.handler(_event("Create"), LambdaContext())
    assert created["PhysicalResourceId"] == "tidings-schema"
    applied = created["Data"]["Applied"].split(",")
    assert created["Data"]["AppliedCount"] == str(len(applied))
    assert applied[0].startswith("0001_")
    assert len(_recorded_versions(empty_database)) == len(applied)

    updated = migrator.handler(_event("Update"), LambdaContext())
    assert updated == {
        "PhysicalResourceId": "tidings-schema",
        "Data": {"AppliedCount": "0", "Applied": ""},
    }


def test_delete_leaves_the_database_alone(
    migrator: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(settings: Settings) -> None:
        raise AssertionError("Delete must not connect to the database")

    monkeypatch.setattr(migrator, "connect", refuse)
    assert migrator.handler(_event("Delete"), LambdaContext()) == {
        "PhysicalResourceId": "tidings-schema"
    }


def test_an_unknown_request_type_fails_the_deploy_with_its_name(migrator: ModuleType) -> None:
    with pytest.raises(ValueError, match="'Rollback'"):
        migrator.handler(_event("Rollback"), LambdaContext())


def test_the_migrator_makes_the_login_users_with_the_passwords_of_their_secrets(
    migrator: ModuleType,
    empty_database: str,
    postgres_admin_dsn: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json
    import uuid

    import boto3
    from moto import mock_aws

    # Roles belong to the whole server: names of this test's own.
    user = f"tidings_t{uuid.uuid4().hex[:8]}_sender"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    admin = psycopg2.connect(postgres_admin_dsn)
    admin.autocommit = True
    try:
        with mock_aws():
            secrets = boto3.client("secretsmanager", region_name="eu-west-1")
            arn = secrets.create_secret(
                Name="login", SecretString=json.dumps({"username": user, "password": "pw-1"})
            )["ARN"]
            monkeypatch.setenv(
                "TIDINGS_DATABASE_LOGINS",
                json.dumps([{"user": user, "role": "tidings_sender", "secret_arn": arn}]),
            )
            migrator.handler(_event("Create"), LambdaContext())
            with admin.cursor() as cur:
                cur.execute(
                    "SELECT r.rolcanlogin, pg_has_role(r.oid, 'tidings_sender', 'USAGE'),"
                    " pg_has_role(r.oid, 'tidings_owner', 'MEMBER'),"
                    " a.rolpassword LIKE 'SCRAM-SHA-256$%%'"
                    " FROM pg_roles r JOIN pg_authid a ON a.oid = r.oid WHERE r.rolname = %s",
                    (user,),
                )
                assert cur.fetchone() == (True, True, False, True)
                cur.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (user,))
                (first,) = cur.fetchone()  # type: ignore[misc]
            # The secret rotated: the next run sets the new password.
            secrets.put_secret_value(
                SecretId=arn, SecretString=json.dumps({"username": user, "password": "pw-2"})
            )
            migrator.handler(_event("Update"), LambdaContext())
            with admin.cursor() as cur:
                cur.execute("SELECT rolpassword FROM pg_authid WHERE rolname = %s", (user,))
                assert cur.fetchone() != (first,)
    finally:
        with admin.cursor() as cur:
            cur.execute(f"DROP ROLE IF EXISTS {user}")
        admin.close()
