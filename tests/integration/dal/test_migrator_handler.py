"""The migrator custom-resource handler against a real, empty PostgreSQL database (and moto's
Secrets Manager for the first admin token)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import boto3
import psycopg2
import pytest
from moto import mock_aws

from tests.integration.maintenance.scheduled_support import aws_test_environment
from tidings.config import Settings
from tidings.local.lambda_env import handler_module
from tidings.logic import tokens


@dataclass
class LambdaContext:
    function_name: str = "tidings-migrator"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:tidings-migrator"
    aws_request_id: str = "request-1"


def _load_handler() -> ModuleType:
    return handler_module("migrator", module_name="migrator_app")


def _event(request_type: str, secret_arn: str | None = None) -> dict[str, object]:
    properties = {"MigrationsHash": "abc"}
    if secret_arn is not None:
        properties["AdminTokenSecretArn"] = secret_arn
    return {
        "RequestType": request_type,
        "ResourceType": "Custom::TidingsSchema",
        "LogicalResourceId": "MigrationsSchema",
        "ResourceProperties": properties,
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
        "Data": {"AppliedCount": "0", "Applied": "", "AdminTokenMade": "false"},
    }


def _tokens(dsn: str) -> list[tuple[str, str, bytes, bool]]:
    conn = psycopg2.connect(dsn)
    try:
        with conn.cursor() as cur:
            cur.execute(
                "SELECT scope, prefix, hash, revoked_at IS NOT NULL FROM tidings.tokens ORDER BY id"
            )
            return [(s, p, bytes(h), r) for s, p, h, r in cur.fetchall()]
    finally:
        conn.close()


def test_the_first_admin_token_is_made_once_into_its_secret(
    migrator: ModuleType,
    empty_database: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    aws_test_environment(monkeypatch)
    with mock_aws():
        secrets = boto3.client("secretsmanager")
        # What CloudFormation leaves in the secret: a random placeholder, no token.
        arn = secrets.create_secret(Name="tidings-dev/first-admin-token", SecretString="x1y2z3")[
            "ARN"
        ]

        created = migrator.handler(_event("Create", arn), LambdaContext())
        assert created["Data"]["AdminTokenMade"] == "true"
        token = secrets.get_secret_value(SecretId=arn)["SecretString"]
        assert tokens.is_token(token)
        assert _tokens(empty_database) == [("admin", token[:12], tokens.digest(token), False)]

        # Deploying again keeps the token: nothing new in the secret or the database.
        again = migrator.handler(_event("Update", arn), LambdaContext())
        assert again["Data"]["AdminTokenMade"] == "false"
        assert secrets.get_secret_value(SecretId=arn)["SecretString"] == token
        assert len(_tokens(empty_database)) == 1

        # A revoked first token stays revoked: a deploy brings no token back.
        conn = psycopg2.connect(empty_database)
        with conn, conn.cursor() as cur:
            cur.execute("UPDATE tidings.tokens SET revoked_at = now()")
        conn.close()
        migrator.handler(_event("Update", arn), LambdaContext())
        assert _tokens(empty_database) == [("admin", token[:12], tokens.digest(token), True)]
        assert secrets.get_secret_value(SecretId=arn)["SecretString"] == token

    logged = capsys.readouterr()
    assert token not in logged.out and token not in logged.err
    assert token not in str(created) and token not in str(again)


def test_a_token_in_the_secret_but_not_stored_yet_is_stored(
    migrator: ModuleType, empty_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The secret was written and the database write failed (the deploy failed): the next run
    stores the token the secret holds instead of making another."""
    aws_test_environment(monkeypatch)
    token = tokens.generate()
    with mock_aws():
        secrets = boto3.client("secretsmanager")
        arn = secrets.create_secret(Name="t", SecretString=token)["ARN"]
        result = migrator.handler(_event("Create", arn), LambdaContext())
        assert result["Data"]["AdminTokenMade"] == "false"
        assert secrets.get_secret_value(SecretId=arn)["SecretString"] == token
    assert _tokens(empty_database) == [("admin", token[:12], tokens.digest(token), False)]


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
