"""boto3 clients for SQS, SNS, KMS, API Gateway, Secrets Manager and RDS whose waits are bounded.

boto3 waits up to 60 s to connect and 60 s for each answer by default, and tries a call up to five
times: one stuck call could outlast a function's invocation while the rows it claimed stay
leased. The SNS publish of the dead-letter report also runs inside the report's transaction,
which PostgreSQL ends after ``idle_in_transaction_timeout_ms`` (10 s) without a statement, so a
publish must give up well before that.
"""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config

# Long polling holds a ReceiveMessage call open for up to 20 s: the read timeout must outlast it.
SQS_CONFIG = Config(
    connect_timeout=3,
    read_timeout=25,
    retries={"mode": "standard", "total_max_attempts": 3},
)
# Two tries in all, of at most 1.5 + 3 s each: a publish gives up within about 9 s.
SNS_CONFIG = Config(
    connect_timeout=1.5,
    read_timeout=3,
    retries={"mode": "standard", "total_max_attempts": 2},
)

# Calls on a request's path: a data key made or opened (an endpoint created, a sender's first
# batch with a key it has not opened), a token's API key made by the authorizer within API
# Gateway's wait for it. A few seconds at most, then the caller gives the work back.
CONTROL_CONFIG = Config(
    connect_timeout=2,
    read_timeout=5,
    retries={"mode": "standard", "total_max_attempts": 3},
)


def sqs_client(endpoint_url: str | None = None) -> Any:
    """An SQS client; ``AWS_ENDPOINT_URL`` still redirects it when ``endpoint_url`` is None."""
    return boto3.client("sqs", endpoint_url=endpoint_url, config=SQS_CONFIG)


def sns_client(endpoint_url: str | None = None) -> Any:
    """An SNS client; ``AWS_ENDPOINT_URL`` still redirects it when ``endpoint_url`` is None."""
    return boto3.client("sns", endpoint_url=endpoint_url, config=SNS_CONFIG)


def kms_client(endpoint_url: str | None = None, region_name: str | None = None) -> Any:
    """A KMS client; ``AWS_ENDPOINT_URL`` still redirects it when ``endpoint_url`` is None."""
    return boto3.client(
        "kms", endpoint_url=endpoint_url, region_name=region_name, config=CONTROL_CONFIG
    )


def apigateway_client(endpoint_url: str | None = None) -> Any:
    """An API Gateway (management API) client."""
    return boto3.client("apigateway", endpoint_url=endpoint_url, config=CONTROL_CONFIG)


def secretsmanager_client(endpoint_url: str | None = None) -> Any:
    """A Secrets Manager client."""
    return boto3.client("secretsmanager", endpoint_url=endpoint_url, config=CONTROL_CONFIG)


def rds_client() -> Any:
    """An RDS client, for IAM authentication tokens (signed locally: no call leaves)."""
    return boto3.client("rds")
