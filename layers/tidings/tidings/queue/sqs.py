"""The delivery queue on Amazon SQS (or anything that speaks its API).

The client reads ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT_URL_SQS`` by itself, so the
same code reaches LocalStack or a moto server when those are set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tidings.aws_clients import sqs_client
from tidings.observability import logger
from tidings.queue.base import (
    MAX_BATCH_ENTRIES,
    OutgoingMessage,
    QueueError,
    ReceivedMessage,
    send_chunks,
    validate_outgoing,
    validate_receive,
    validate_visibility_timeout,
)

_DEPTH_ATTRIBUTES = (
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
)


class SqsQueue:
    """A ``DeliveryQueue`` on one SQS queue URL."""

    def __init__(self, queue_url: str, client: Any = None) -> None:
        if not queue_url:
            raise ValueError("queue_url is empty")
        self.queue_url = queue_url
        self._client = client if client is not None else sqs_client()

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send in SendMessageBatch chunks; a chunk whose whole call fails counts as failed.

        Such a call failure is logged with its error and the chunk's ids are returned with the
        per-entry failures, so the caller always learns exactly which messages were not sent.
        """
        validate_outgoing(messages)
        failed: list[str] = []
        for chunk in send_chunks(messages):
            entries = [
                {"Id": message.id, "MessageBody": message.body, "DelaySeconds": message.delay_s}
                for message in chunk
            ]
            try:
                reply = self._client.send_message_batch(QueueUrl=self.queue_url, Entries=entries)
            except (ClientError, BotoCoreError):
                logger.exception(
                    "SendMessageBatch failed as a whole",
                    extra={"queue_url": self.queue_url, "ids": [m.id for m in chunk]},
                )
                failed.extend(message.id for message in chunk)
                continue
            for failure in reply.get("Failed", []):
                logger.warning(
                    "SQS refused a batch entry",
                    extra={
                        "queue_url": self.queue_url,
                        "id": failure["Id"],
                        "code": failure.get("Code"),
                        "reason": failure.get("Message"),
                    },
                )
                failed.append(failure["Id"])
        return failed

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        """Long polling on SQS is in whole seconds, so ``wait_s`` is rounded up."""
        validate_receive(max_messages, wait_s)
        reply = self._call(
            "ReceiveMessage",
            self._client.receive_message,
            QueueUrl=self.queue_url,
            MaxNumberOfMessages=max_messages,
            WaitTimeSeconds=math.ceil(wait_s),
            MessageSystemAttributeNames=["All"],
        )
        return [
            ReceivedMessage(
                message_id=raw["MessageId"],
                receipt_handle=raw["ReceiptHandle"],
                body=raw["Body"],
                receive_count=int(raw["Attributes"]["ApproximateReceiveCount"]),
                attributes=dict(raw["Attributes"]),
            )
            for raw in reply.get("Messages", [])
        ]

    def delete(self, receipt_handles: Sequence[str]) -> None:
        refused: list[str] = []
        for start in range(0, len(receipt_handles), MAX_BATCH_ENTRIES):
            chunk = receipt_handles[start : start + MAX_BATCH_ENTRIES]
            entries = [
                {"Id": str(index), "ReceiptHandle": handle} for index, handle in enumerate(chunk)
            ]
            reply = self._call(
                "DeleteMessageBatch",
                self._client.delete_message_batch,
                QueueUrl=self.queue_url,
                Entries=entries,
            )
            refused.extend(
                f"{chunk[int(failure['Id'])]!r}: {failure.get('Code')} {failure.get('Message')}"
                for failure in reply.get("Failed", [])
            )
        if refused:
            raise QueueError("DeleteMessageBatch refused " + "; ".join(refused))

    def change_visibility(self, receipt_handle: str, timeout_s: int) -> None:
        validate_visibility_timeout(timeout_s)
        self._call(
            "ChangeMessageVisibility",
            self._client.change_message_visibility,
            QueueUrl=self.queue_url,
            ReceiptHandle=receipt_handle,
            VisibilityTimeout=timeout_s,
        )

    def approximate_depth(self) -> int:
        reply = self._call(
            "GetQueueAttributes",
            self._client.get_queue_attributes,
            QueueUrl=self.queue_url,
            AttributeNames=list(_DEPTH_ATTRIBUTES),
        )
        attributes = reply["Attributes"]
        return sum(int(attributes.get(name, 0)) for name in _DEPTH_ATTRIBUTES)

    def queue_arn(self) -> str:
        """The queue's ARN, which Lambda puts in each record's ``eventSourceARN``."""
        reply = self._call(
            "GetQueueAttributes",
            self._client.get_queue_attributes,
            QueueUrl=self.queue_url,
            AttributeNames=["QueueArn"],
        )
        return str(reply["Attributes"]["QueueArn"])

    def _call(self, operation: str, method: Any, **params: Any) -> dict[str, Any]:
        try:
            reply: dict[str, Any] = method(**params)
        except (ClientError, BotoCoreError) as exc:
            raise QueueError(f"{operation} on {self.queue_url} failed: {exc}") from exc
        return reply
