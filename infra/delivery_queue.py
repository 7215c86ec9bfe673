"""The SQS delivery queues between the claimer and the sender, one per speed lane, with the
dead-letter queue they share.

The fast lane's queue (``Queue``) takes what the claimer sends by default; the slow lane's
(``SlowQueue``, ``tidings.delivery.lanes``) takes the rows of slow endpoints, which senders read
one at a time. Both have the same encryption, visibility timeout and redrive, from
``tidings.deployment``, which the local runtime's queues follow too.

One dead-letter queue serves both lanes: what lands there is the same kind of message whichever
lane it came from (the lane is a routing choice, not a different message), so one alarm and one
place to look cover every poison message, and SQS's redrive sends each message back to the queue
it came from. The local runtime shares its dead-letter queue the same way.
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
        self._sender_timeout_s = sender_timeout_s
        self._max_receive_count = max_receive_count
        self.dead_letter_queue = sqs.Queue(
            self,
            "DeadLetterQueue",
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            retention_period=_DEAD_LETTER_RETENTION,
        )
        # The fast lane keeps the construct id the one delivery queue had, so an existing stack
        # keeps its queue (and the messages in it) when the slow lane is added.
        self.queue = self._lane_queue("Queue")
        self.slow_queue = self._lane_queue("SlowQueue")
        for queue in self.queues:
            checkov_skip(
                queue,
                "CKV_AWS_27",
                "Encrypted at rest with SSE-SQS. Who may read is decided by IAM on the queue "
                "(and TLS is enforced); a customer managed key would not change that, and would "
                "add KMS calls to every send and receive batch.",
            )

    @property
    def lane_queues(self) -> tuple[sqs.Queue, sqs.Queue]:
        """The fast lane's queue and the slow lane's."""
        return (self.queue, self.slow_queue)

    @property
    def queues(self) -> tuple[sqs.Queue, ...]:
        """Every queue of the construct: both lanes' and the dead-letter queue."""
        return (*self.lane_queues, self.dead_letter_queue)

    def _lane_queue(self, construct_id: str) -> sqs.Queue:
        return sqs.Queue(
            self,
            construct_id,
            encryption=sqs.QueueEncryption.SQS_MANAGED,
            enforce_ssl=True,
            visibility_timeout=Duration.seconds(VISIBILITY_TIMEOUT_FACTOR * self._sender_timeout_s),
            retention_period=_MESSAGE_RETENTION,
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dead_letter_queue, max_receive_count=self._max_receive_count
            ),
        )
