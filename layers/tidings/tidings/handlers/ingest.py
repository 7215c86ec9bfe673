"""Ingest and management API: API Gateway (REST) → the routes of ``tidings.api``."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.api.app import handle
from tidings.observability import logger, tracer

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
wiring.settings()


# The event holds the caller's token: it is never logged, whatever POWERTOOLS_LOGGER_LOG_EVENT
# says.
@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return handle(event, context)
