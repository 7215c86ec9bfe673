"""Lambda's SQS event source mapping, imitated: the event a batch becomes, and one poll.

On AWS, Lambda receives a batch from the queue, hands it to the sender as an SQS event and deletes
the records the handler did not report in ``batchItemFailures``. The local runtime (and tests)
do the same with ``consume_once``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tidings.observability import logger
from tidings.queue import DeliveryQueue, ReceivedMessage


def region_of_arn(arn: str) -> str:
    parts = arn.split(":")
    if len(parts) < 6 or parts[0] != "arn" or parts[2] != "sqs":
        raise ValueError(f"not an SQS queue ARN: {arn!r}")
    return parts[3]


def to_sqs_event(messages: Sequence[ReceivedMessage], queue_arn: str) -> dict[str, Any]:
    """The event Lambda hands an SQS-triggered function for these messages."""
    region = region_of_arn(queue_arn)
    records = []
    for message in messages:
        attributes = dict(message.attributes)
        attributes["ApproximateReceiveCount"] = str(message.receive_count)
        for required in ("SentTimestamp", "ApproximateFirstReceiveTimestamp", "SenderId"):
            if required not in attributes:
                raise ValueError(
                    f"message {message.message_id} lacks the {required} attribute "
                    "that Lambda's SQS event carries"
                )
        records.append(
            {
                "messageId": message.message_id,
                "receiptHandle": message.receipt_handle,
                "body": message.body,
                "attributes": attributes,
                "messageAttributes": {},
                "md5OfBody": hashlib.md5(
                    message.body.encode("utf-8"), usedforsecurity=False
                ).hexdigest(),
                "eventSource": "aws:sqs",
                "eventSourceARN": queue_arn,
                "awsRegion": region,
            }
        )
    return {"Records": records}


def failed_message_ids(response: Mapping[str, Any] | None) -> set[str]:
    """The message ids a handler reported in ``batchItemFailures``; ``None`` means none failed."""
    if response is None:
        return set()
    if not isinstance(response, Mapping):
        raise ValueError(f"a batch response must be a mapping, got {type(response).__name__}")
    failures = response.get("batchItemFailures")
    if failures is None:
        return set()
    if not isinstance(failures, list):
        raise ValueError("batchItemFailures must be a list")
    ids: set[str] = set()
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, Mapping) else None
        if not isinstance(identifier, str) or not identifier:
            raise ValueError(f"batch item failure {item!r} has no itemIdentifier")
        ids.add(identifier)
    return ids


@dataclass(frozen=True, slots=True)
class ConsumeResult:
    """What one ``consume_once`` did: message ids received, deleted, and left for redelivery."""

    received: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()


BatchHandler = Callable[[dict[str, Any], Any], Mapping[str, Any] | None]


def consume_once(
    queue: DeliveryQueue,
    handler: BatchHandler,
    *,
    queue_arn: str,
    context: Any,
    max_messages: int = 10,
    wait_s: float = 0,
) -> ConsumeResult:
    """Do what Lambda's SQS event source mapping does with ``ReportBatchItemFailures``, once.

    Receive a batch (waiting up to ``wait_s`` for one, as the mapping long-polls), hand it to
    ``handler`` as an SQS event, delete the records it did not report failed; failed ones
    reappear when their visibility timeout ends. A response that names an unknown message or
    is malformed fails the whole batch, as on Lambda. If the handler raises, nothing is
    deleted, the error is logged with the batch's message ids and re-raised; callers need not
    log it again.
    """
    messages = queue.receive(max_messages=max_messages, wait_s=wait_s)
    if not messages:
        return ConsumeResult()
    received = tuple(message.message_id for message in messages)
    event = to_sqs_event(messages, queue_arn)
    try:
        response = handler(event, context)
    except Exception:
        logger.exception(
            "batch handler raised; the whole batch will be redelivered",
            extra={"message_ids": list(received)},
        )
        raise
    try:
        failed = failed_message_ids(response)
    except ValueError as exc:
        logger.error(
            "batch handler returned a malformed response; the whole batch fails",
            extra={"message_ids": list(received), "reason": str(exc)},
        )
        return ConsumeResult(received=received, failed=received)
    unknown = failed - set(received)
    if unknown:
        logger.error(
            "batch handler reported messages that are not in the batch; the whole batch fails",
            extra={"unknown_ids": sorted(unknown)},
        )
        return ConsumeResult(received=received, failed=received)
    done = [message for message in messages if message.message_id not in failed]
    queue.delete([message.receipt_handle for message in done])
    return ConsumeResult(
        received=received,
        deleted=tuple(message.message_id for message in done),
        failed=tuple(message_id for message_id in received if message_id in failed),
    )
