"""Every 5 minutes: refresh every endpoint's latency percentiles and failure threshold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.maintenance.percentiles import run_scheduled_refresh
from tidings.observability import logger, metrics, tracer

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
wiring.settings()


# Off whatever POWERTOOLS_LOGGER_LOG_EVENT says, as in every function: turning a debugging
# switch on must not put any function's events in its log.
@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return run_scheduled_refresh(wiring.database(), wiring.settings(), datetime.now(UTC))
