"""Delivery queues behind one interface: SQS, and a local queue with the same contract."""

from tidings.queue.base import (
    MAX_BATCH_ENTRIES,
    MAX_BODY_BYTES,
    MAX_DELAY_S,
    ConsumeResult,
    DeliveryQueue,
    OutgoingMessage,
    QueueError,
    ReceivedMessage,
    consume_once,
    failed_message_ids,
    to_sqs_event,
)
from tidings.queue.local import LocalQueue
from tidings.queue.sqs import SqsQueue

__all__ = [
    "MAX_BATCH_ENTRIES",
    "MAX_BODY_BYTES",
    "MAX_DELAY_S",
    "ConsumeResult",
    "DeliveryQueue",
    "LocalQueue",
    "OutgoingMessage",
    "QueueError",
    "ReceivedMessage",
    "SqsQueue",
    "consume_once",
    "failed_message_ids",
    "to_sqs_event",
]
