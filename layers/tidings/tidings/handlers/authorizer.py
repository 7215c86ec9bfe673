"""API authorizer: API Gateway (TOKEN authorizer) → the bearer token check of ``tidings.api``."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.api.authorizer import authorize
from tidings.observability import logger

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
wiring.settings()


# The event holds the token: it is never logged, whatever POWERTOOLS_LOGGER_LOG_EVENT says.
@logger.inject_lambda_context(log_event=False)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return authorize(event, wiring.database(), wiring.usage_keys())
