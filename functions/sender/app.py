"""Sender Lambda (SQS event source, ReportBatchItemFailures): deliver a batch of webhooks."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType
from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.http_transport import shared_transport
from tidings.observability import logger, metrics, tracer
from tidings.sending import Sender, handle_sqs_event

# Every record failing is a normal answer here (the database was unreachable), not an error.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


@logger.inject_lambda_context
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    settings = wiring.settings()
    sender = Sender(
        wiring.database(), wiring.delivery_queue(), settings, shared_transport(settings)
    )
    return handle_sqs_event(event, context, sender, processor)
