"""The delivery queue behind one interface (``DeliveryQueue``), and its SQS implementation.

The local stand-in with the same contract lives in ``tidings.local.queue``.
"""

from tidings.queue.base import (
    MAX_BATCH_ENTRIES,
    MAX_BODY_BYTES,
    MAX_DELAY_S,
    DeliveryQueue,
    OutgoingMessage,
    QueueError,
    ReceivedMessage,
)
from tidings.queue.sqs import SqsQueue

__all__ = [
    "MAX_BATCH_ENTRIES",
    "MAX_BODY_BYTES",
    "MAX_DELAY_S",
    "DeliveryQueue",
    "OutgoingMessage",
    "QueueError",
    "ReceivedMessage",
    "SqsQueue",
]
