"""The SQS delivery queue between the claimer and the sender, with its dead-letter queue.

The visibility timeout is six times the sender's timeout, as AWS recommends for queues that
feed Lambda: a batch that is retried by the poller after a throttle or a slow invocation must
not become visible again while the first invocation may still be working on it.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

VISIBILITY_TIMEOUT_FACTOR = 6
# Longer than any delivery can take: the last retry through SQS is 900 s away and a message
# waits at most a few minutes for a sender.
_MESSAGE_RETENTION = Duration.days(4)
_DEAD_LETTER_RETENTION = Duration.days(14)


class DeliveryQueue(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        sender_timeout_s: int,
        max_receive_count: int,
    ) -> None:
        super().__init__(scope, construct_id)
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=_DEAD_LETTER_RETENTION,
        )
        self.queue = sqs.Queue(
            self,
            "Queue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(VISIBILITY_TIMEOUT_FACTOR * sender_timeout_s),
            retention_period=_MESSAGE_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=max_receive_count
            ),
        )
