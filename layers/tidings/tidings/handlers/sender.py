"""Sender Lambda (SQS event source, ReportBatchItemFailures): deliver a batch of webhooks.

The whole batch is processed first (``Sender.process``: begin, send concurrently, record); then
Powertools' batch utility answers per record, naming the records that must come back from SQS.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.typing import LambdaContext

from tidings import wiring
from tidings.delivery.http_transport import shared_transport
from tidings.delivery.sender import QueueRecord, Sender
from tidings.observability import logger, metrics, tracer

# Read at start: a setting that cannot be used, or a TIDINGS_* variable that is none (a
# misspelling), fails the cold start with its message instead of being found, or ignored, later.
wiring.settings()

# Every record failing is a normal answer here (the database was unreachable), not an error.
processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)


class RecordFailed(Exception):
    """Marks an SQS record that must be received again."""


# The records' bodies are the queue's messages: never logged, whatever
# POWERTOOLS_LOGGER_LOG_EVENT says.
@logger.inject_lambda_context(log_event=False)
@tracer.capture_lambda_handler
@metrics.log_metrics
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    raw_records = event.get("Records")
    if not isinstance(raw_records, list):
        raise ValueError("the event has no Records list; is this an SQS event?")
    settings = wiring.settings()
    sender = Sender(
        wiring.database(),
        wiring.delivery_queue(),
        settings,
        shared_transport(settings),
        keyring=wiring.keyring(),
    )
    report = sender.process(
        [QueueRecord(record["messageId"], record["body"]) for record in raw_records],
        context.get_remaining_time_in_millis,
    )
    # Every invocation counts, zero included: a batch of stale copies is a data point too.
    metrics.add_metric(name="Delivered", unit=MetricUnit.Count, value=report.delivered)
    metrics.add_metric(name="Failed", unit=MetricUnit.Count, value=report.retried)
    metrics.add_metric(name="DeadLettered", unit=MetricUnit.Count, value=report.dead_lettered)
    # One line per invocation: a delivered attempt has no line of its own above DEBUG.
    logger.info(
        "batch done",
        extra={
            "records": len(raw_records),
            "delivered": report.delivered,
            "retried": report.retried,
            "dead_lettered": report.dead_lettered,
            "skipped": report.skipped,
            "failed_records": len(report.failed_record_ids),
        },
    )

    def record_handler(record: SQSRecord) -> None:
        if record.message_id in report.failed_record_ids:
            raise RecordFailed(record.message_id)

    return dict(process_partial_response(dict(event), record_handler, processor, context))
