"""Migrator: the CloudFormation custom resource that prepares the database on deploy.

Driven by the CDK custom-resource provider framework, which turns what this returns into the
CloudFormation response and an exception into a failed deploy that shows its message. It is the
one function that reads the master user's credentials and connects to the instance itself, not
through RDS Proxy: DDL in one long transaction gains nothing from pooling, and a proxy created in
the same deploy may not be ready yet. In one transaction it applies the migrations, encrypts any
signing secret still stored in clear and moves every secret to the current data key, and makes
the login users of the functions and producers (``TIDINGS_DATABASE_LOGINS``) with the passwords
in their own secrets, which RDS Proxy uses to log them in.
"""

from __future__ import annotations

import os
from typing import Any

from tidings import wiring
from tidings.config import get_settings
from tidings.dal.connection import connect
from tidings.logic.schema import logins_from_secrets, prepare_database
from tidings.observability import logger

PHYSICAL_RESOURCE_ID = "tidings-schema"
# The database's statement_timeout guards the queue against runaway queries; a migration may
# legitimately run longer (an index build on a large table), within the function's 10 minutes.
MIGRATION_STATEMENT_TIMEOUT = "9min"
LOGINS_VARIABLE = "TIDINGS_DATABASE_LOGINS"


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request_type = event.get("RequestType")
    if request_type == "Delete":
        # The schema and its data outlive the custom resource: a deploy never drops them.
        return {"PhysicalResourceId": event.get("PhysicalResourceId", PHYSICAL_RESOURCE_ID)}
    if request_type not in {"Create", "Update"}:
        raise ValueError(f"unknown custom resource RequestType {request_type!r}")
    logins = logins_from_secrets(os.environ.get(LOGINS_VARIABLE, "[]"))
    conn = connect(get_settings())
    try:
        with conn.cursor() as cur:
            cur.execute("SET statement_timeout = %s", (MIGRATION_STATEMENT_TIMEOUT,))
        prepared = prepare_database(conn, wiring.keyring(), logins=logins)
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
    # CloudFormation limits a response to 4 KiB; the count always fits, the names usually do.
    names = ",".join(prepared.applied)
    return {
        "PhysicalResourceId": PHYSICAL_RESOURCE_ID,
        "Data": {"AppliedCount": str(len(prepared.applied)), "Applied": names[:2048]},
    }
