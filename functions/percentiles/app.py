"""Every 5 minutes: refresh every endpoint's latency percentiles and failure threshold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.maintenance.percentiles import run_scheduled_refresh
from tidings.observability import logger, metrics, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return run_scheduled_refresh(wiring.database(), wiring.settings(), datetime.now(UTC))
