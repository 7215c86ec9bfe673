"""Every 5 minutes: the health summary as metrics, endpoints failing for too long disabled,
and alerts sent (once) and resolved."""

from __future__ import annotations

from typing import Any

from tidings import wiring
from tidings.maintenance.health import emit_application_metrics, emit_metrics
from tidings.maintenance.health_monitor import run_monitor
from tidings.observability import logger, metrics, tracer

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
wiring.settings()


# Off whatever POWERTOOLS_LOGGER_LOG_EVENT says, as in every function: turning a debugging
# switch on must not put any function's events in its log.
@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    result = run_monitor(wiring.database(), wiring.notifier(), wiring.settings())
    emit_metrics(result.summary)
    emit_application_metrics(list(result.applications))
    logger.info("health checked", extra=result.to_dict())
    return result.to_dict()
