"""Claimer Lambda (EventBridge, every minute): lease due rows and queue them for the sender."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.delivery.claimer import Claimer
from tidings.observability import logger, metrics, tracer

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
wiring.settings()


# Off whatever POWERTOOLS_LOGGER_LOG_EVENT says, as in every function: turning a debugging
# switch on must not put any function's events in its log.
@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    claimer = Claimer(
        wiring.database(),
        wiring.delivery_queue(),
        wiring.settings(),
        slow_queue=wiring.slow_delivery_queue(),
    )
    return claimer.run(context.get_remaining_time_in_millis).as_dict()
