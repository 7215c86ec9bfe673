"""The SQS delivery queue between the claimer and the sender, with its dead-letter queue.

Its visibility timeout and redrive come from ``tidings.deployment``, which the local runtime's
queue follows too.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.common import checkov_skip
from tidings.deployment import VISIBILITY_TIMEOUT_FACTOR

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
        for queue in (self.queue, self.dead_letter_queue):
            checkov_skip(
                queue,
                "CKV_AWS_27",
                "Encrypted at rest with SSE-SQS. Who may read is decided by IAM on the queue "
                "(and TLS is enforced); a customer managed key would not change that, and would "
                "add KMS calls to every send and receive batch.",
            )
