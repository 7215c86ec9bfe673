"""Migrator: the CloudFormation custom resource that applies the SQL migrations on deploy.

Driven by the CDK custom-resource provider framework, which turns what this returns into the
CloudFormation response and any exception into a failed deploy (with the message shown).
"""

from __future__ import annotations

from typing import Any

from tidings.config import get_settings
from tidings.dal.connection import connect
from tidings.migrations import migrate
from tidings.observability import logger

PHYSICAL_RESOURCE_ID = "tidings-schema"


@logger.inject_lambda_context
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    request_type = event.get("RequestType")
    if request_type == "Delete":
        # The schema outlives the stack's custom resource: data is never dropped by a deploy.
        return {"PhysicalResourceId": event.get("PhysicalResourceId", PHYSICAL_RESOURCE_ID)}
    if request_type not in {"Create", "Update"}:
        raise ValueError(f"unknown custom resource RequestType {request_type!r}")
    conn = connect(get_settings())
    try:
        applied = migrate(conn)
    finally:
        conn.close()
    logger.info("migrations applied", extra={"applied": applied})
    return {
        "PhysicalResourceId": PHYSICAL_RESOURCE_ID,
        "Data": {"Applied": ",".join(str(name) for name in applied) if applied else ""},
    }
