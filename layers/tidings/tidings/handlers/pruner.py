"""Hourly: old attempt partitions dropped (and the coming ones created), delivered messages and
dead letters past their retention deleted in bounded batches."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from tidings import wiring
from tidings.maintenance.pruning import prune
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
    result = prune(wiring.database(), wiring.settings())
    metrics.add_metric(
        name="PrunedMessages",
        unit=MetricUnit.Count,
        value=result.delivered_deleted + result.dead_letters_deleted,
    )
    metrics.add_metric(
        name="DroppedAttemptPartitions", unit=MetricUnit.Count, value=len(result.partitions_dropped)
    )
    logger.info("pruned", extra=result.to_dict())
    return result.to_dict()
