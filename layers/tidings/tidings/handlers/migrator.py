"""Migrator: the CloudFormation custom resource that prepares the database on deploy, then makes
sure the deploy's first admin token exists.

Driven by the CDK custom-resource provider framework, which turns what this returns into the
CloudFormation response and an exception into a failed deploy that shows its message. It is the
one function that reads the master user's credentials and connects to the instance itself, not
through RDS Proxy: DDL gains nothing from pooling, and a proxy created in the same deploy may not
be ready yet. It applies the migrations (each waits at most TIDINGS_MIGRATION_LOCK_TIMEOUT_MS for
a lock and is tried again a few times: ``LockPolicy``), then, in one transaction, encrypts any
signing secret still stored in clear, moves every secret to the current data key, and makes the
login users of the functions and producers (``TIDINGS_DATABASE_LOGINS``) with the passwords in
their own secrets, which RDS Proxy uses to log them in.

The first admin token lives in the Secrets Manager secret named by the resource's
``AdminTokenSecretArn`` property (a stack output): when the secret does not hold a Tidings token
yet (CloudFormation filled it with a random placeholder), a token is made, written there, and its
hash stored in the database. Deploying again changes nothing; a revoked first token stays
revoked. The token never appears in the response, a log line or the resource's properties.
"""

from __future__ import annotations

import os
from typing import Any

from tidings import wiring
from tidings.aws_clients import secretsmanager_client
from tidings.config import get_settings
from tidings.dal.connection import Database, connect
from tidings.logic.schema import logins_from_secrets, prepare_database
from tidings.logic.tokens import bootstrap_admin_token
from tidings.migrations import LockPolicy
from tidings.observability import logger

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
get_settings()

PHYSICAL_RESOURCE_ID = "tidings-schema"
# The database's statement_timeout guards the queue against runaway queries; a migration may
# legitimately run longer (an index build on a large table), within the function's 10 minutes.
MIGRATION_STATEMENT_TIMEOUT = "9min"
LOGINS_VARIABLE = "TIDINGS_DATABASE_LOGINS"


@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request_type = event.get("RequestType")
    if request_type == "Delete":
        # The schema and its data outlive the custom resource: a deploy never drops them.
        return {"PhysicalResourceId": event.get("PhysicalResourceId", PHYSICAL_RESOURCE_ID)}
    if request_type not in {"Create", "Update"}:
        raise ValueError(f"unknown custom resource RequestType {request_type!r}")
    settings = get_settings()
    logins = logins_from_secrets(os.environ.get(LOGINS_VARIABLE, "[]"))
    conn = connect(settings)
    try:
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = %s", (MIGRATION_STATEMENT_TIMEOUT,))
        prepared = prepare_database(
            conn,
            wiring.keyring(),
            max_payload_bytes=settings.max_payload_bytes,
            operational_application=settings.operational_application,
            operational_failing_attempt=settings.operational_failing_attempt,
            logins=logins,
            policy=LockPolicy.from_settings(settings),
        )
    finally:
        conn.close()
    logger.info(
        "database is ready",
        extra={
            "applied_now": list(prepared.applied),
            "secrets_encrypted_endpoints": prepared.secrets.encrypted_endpoints,
            "secrets_reencrypted": prepared.secrets.reencrypted,
            "secrets_unreadable": prepared.secrets.unreadable,
            "logins": list(prepared.logins),
        },
    )
    secret_arn = str(event.get("ResourceProperties", {}).get("AdminTokenSecretArn") or "")
    made = False
    if secret_arn:
        made = _first_admin_token(secret_arn, Database.from_settings(settings))
    # CloudFormation limits a response to 4 KiB; the count always fits, the names usually do.
    names = ",".join(prepared.applied)
    return {
        "PhysicalResourceId": PHYSICAL_RESOURCE_ID,
        "Data": {
            "AppliedCount": str(len(prepared.applied)),
            "Applied": names[:2048],
            "AdminTokenMade": str(made).lower(),
        },
    }


def _first_admin_token(secret_arn: str, db: Database) -> bool:
    client = secretsmanager_client()

    def read() -> str | None:
        return client.get_secret_value(SecretId=secret_arn).get("SecretString")  # type: ignore[no-any-return]

    def write(token: str) -> None:
        client.put_secret_value(SecretId=secret_arn, SecretString=token)

    try:
        made = bootstrap_admin_token(db, read, write)
    finally:
        db.close()
    logger.info("first admin token in place", extra={"made_now": made})
    return made
