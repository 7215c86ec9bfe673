"""How a deployed function logs in: its own user, an IAM token for RDS Proxy, never a secret."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import psycopg2.extensions
import pytest

from tidings.config import Settings
from tidings.dal.connection import dsn_from_settings


def test_a_function_logs_in_as_its_own_user_with_a_fresh_iam_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The token is signed here with the function's credentials; nothing leaves the machine.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    settings = Settings(
        database_user="tidings_fn_sender",
        database_host="proxy.proxy-abc.eu-west-1.rds.amazonaws.com",
    )
    first = psycopg2.extensions.parse_dsn(dsn_from_settings(settings))
    assert first["user"] == "tidings_fn_sender"
    assert first["host"] == "proxy.proxy-abc.eu-west-1.rds.amazonaws.com"
    assert first["port"] == "5432" and first["dbname"] == "tidings"
    assert first["sslmode"] == "require"
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
