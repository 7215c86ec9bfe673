"""Every 5 minutes: refresh every endpoint's latency percentiles and failure threshold."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from tidings import wiring
from tidings.observability import logger, metrics, tracer
from tidings.percentiles import refresh_percentiles


@metrics.log_metrics
@logger.inject_lambda_context
@tracer.capture_lambda_handler
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    settings = wiring.settings()
    now = datetime.now(UTC)
    refresh = wiring.database().run(
        lambda cur: refresh_percentiles(cur, settings, now), transaction=True
    )
    slow = refresh.slow(
        p95_ms=settings.slow_endpoint_p95_ms, min_samples=settings.slow_endpoint_min_samples
    )
    for change in refresh.threshold_changes():
        logger.info(
            "failure threshold changed",
            extra={
                "endpoint_id": change.endpoint_id,
                "p95_ms": change.p95_ms,
                "from": change.previous_threshold,
                "to": change.failure_threshold,
            },
        )
    for endpoint in slow:
        logger.warning(
            "slow endpoint",
            extra={
                "endpoint_id": endpoint.endpoint_id,
                "p95_ms": endpoint.p95_ms,
                "sample_count": endpoint.sample_count,
            },
        )
    metrics.add_metric(name="SlowEndpoints", unit=MetricUnit.Count, value=len(slow))
    return {
        "endpoints": len(refresh.endpoints),
        "rebuilt": refresh.rebuilt,
        "threshold_changes": [c.endpoint_id for c in refresh.threshold_changes()],
        "slow_endpoints": [
            {"endpoint_id": e.endpoint_id, "p95_ms": e.p95_ms, "sample_count": e.sample_count}
            for e in slow
        ],
    }
