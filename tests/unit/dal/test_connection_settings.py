"""How a deployed function logs in: its own user, an IAM token for RDS Proxy, never a secret."""

from __future__ import annotations

import json
from pathlib import Path
from unittest import mock
from urllib.parse import parse_qs, urlsplit

import psycopg2.extensions
import pytest

from tidings.config import Settings
from tidings.dal.connection import dsn_from_settings


def test_a_function_logs_in_as_its_own_user_with_a_fresh_iam_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The token is signed here with the function's credentials; nothing leaves the machine.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    bundle = tmp_path / "ca.pem"
    bundle.write_text("certificates")
    settings = Settings(
        database_user="tidings_fn_sender",
        database_host="proxy.proxy-abc.eu-west-1.rds.amazonaws.com",
        database_root_cert=str(bundle),
    )
    first = psycopg2.extensions.parse_dsn(dsn_from_settings(settings))
    assert first["user"] == "tidings_fn_sender"
    assert first["host"] == "proxy.proxy-abc.eu-west-1.rds.amazonaws.com"
    assert first["port"] == "5432" and first["dbname"] == "tidings"
    # The token goes only to a server whose certificate, for this very name, the bundle signs.
    assert first["sslmode"] == "verify-full"
    assert first["sslrootcert"] == str(bundle)
    token = urlsplit("https://" + first["password"])
    assert token.hostname == "proxy.proxy-abc.eu-west-1.rds.amazonaws.com"
    query = parse_qs(token.query)
    assert query["Action"] == ["connect"] and query["DBUser"] == ["tidings_fn_sender"]
    # Signed (SigV4) for RDS IAM authentication; the credentials are whatever boto3 resolved.
    assert query["X-Amz-Credential"][0].endswith("/rds-db/aws4_request")
    assert len(query["X-Amz-Signature"][0]) == 64


def test_a_user_without_the_proxy_host_is_refused() -> None:
    with pytest.raises(ValueError, match="TIDINGS_DATABASE_HOST"):
        dsn_from_settings(Settings(database_user="tidings_fn_sender"))
    with pytest.raises(ValueError, match="TIDINGS_DATABASE_USER"):
        dsn_from_settings(Settings())


def test_the_master_secret_connects_with_the_servers_certificate_checked(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("certificates")
    secret = {"host": "db.abc.eu-west-1.rds.amazonaws.com", "username": "tidings", "password": "pw"}
    settings = Settings(
        database_secret_arn="arn:aws:secretsmanager:eu-west-1:1:secret:master",
        database_host="instance.abc.eu-west-1.rds.amazonaws.com",
        database_root_cert=str(bundle),
    )
    with mock.patch(
        "aws_lambda_powertools.utilities.parameters.get_secret", return_value=json.dumps(secret)
    ):
        dsn = psycopg2.extensions.parse_dsn(dsn_from_settings(settings))
    assert dsn["host"] == "instance.abc.eu-west-1.rds.amazonaws.com"
    assert dsn["sslmode"] == "verify-full"
    assert dsn["sslrootcert"] == str(bundle)


@pytest.mark.parametrize("way", ["iam", "secret"])
@pytest.mark.parametrize("missing", ["unset", "absent"])
def test_no_credential_is_fetched_or_sent_without_the_ca_bundle(
    way: str, missing: str, tmp_path: Path
) -> None:
    root_cert = "" if missing == "unset" else str(tmp_path / "nowhere.pem")
    settings = Settings(
        database_user="tidings_fn_sender" if way == "iam" else "",
        database_secret_arn="arn:aws:secretsmanager:eu-west-1:1:secret:master"
        if way == "secret"
        else "",
        database_host="proxy.proxy-abc.eu-west-1.rds.amazonaws.com",
        database_root_cert=root_cert,
    )
    with (
        mock.patch("tidings.aws_clients.rds_client") as rds,
        mock.patch("aws_lambda_powertools.utilities.parameters.get_secret") as get_secret,
        pytest.raises(ValueError, match="TIDINGS_DATABASE_ROOT_CERT"),
    ):
        dsn_from_settings(settings)
    rds.assert_not_called()
    get_secret.assert_not_called()


def test_database_url_keeps_its_own_sslmode() -> None:
    url = "postgresql://u@db.example.com/tidings?sslmode=verify-ca&sslrootcert=/etc/ca.pem"
    assert dsn_from_settings(Settings(database_url=url)) == url
