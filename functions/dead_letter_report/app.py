"""Hourly: the dead-letter report of the last window, per endpoint with its pattern and the
action to take, published to SNS (nothing is sent when nothing was dead-lettered)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from tidings import wiring
from tidings.dead_letter_report import PatternRules, build_report, publish_report
from tidings.observability import logger, metrics, tracer


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    settings = wiring.settings()
    rules = PatternRules.from_settings(settings)
    report = wiring.database().run(
        lambda cur: build_report(cur, settings.dead_letter_report_window_s, rules=rules)
    )
    message_id = publish_report(wiring.notifier(), report)
    metrics.add_metric(name="DeadLettersReported", unit=MetricUnit.Count, value=report.total)
    logger.info(
        "dead-letter report",
        extra={"total": report.total, "endpoints": len(report.endpoints), "sent": bool(message_id)},
    )
    return {"message_id": message_id, "report": report.to_dict()}
