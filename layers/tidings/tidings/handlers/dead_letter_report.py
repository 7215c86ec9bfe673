"""Hourly: the dead letters no report has named yet, per endpoint with its pattern and the action
to take, published to SNS and then marked reported (nothing is sent when there are none)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from tidings import wiring
from tidings.maintenance.dead_letter_report import run_report
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
    run = run_report(wiring.database(), wiring.notifier(), wiring.settings())
    report = run.report
    metrics.add_metric(name="DeadLettersReported", unit=MetricUnit.Count, value=report.total)
    metrics.add_metric(
        name="DeadLettersAwaitingReport", unit=MetricUnit.Count, value=report.waiting or 0
    )
    logger.info(
        "dead-letter report",
        extra={
            "total": report.total,
            "endpoints": len(report.endpoints),
            "waiting": report.waiting,
            "sent": bool(run.message_id),
        },
    )
    return {"message_id": run.message_id, "report": report.to_dict()}
