"""An environment's loop: it long-polls its queue while the runtime runs, takes a message sent
while it waits at once, and, draining, stops waiting and stops when nothing is left."""

from __future__ import annotations

import threading
import time
from typing import Any

from tidings.deployment import FAST_LANE
from tidings.local.queue import LocalQueue
from tidings.local.sender_environments import LONG_POLL_S, Counters, serve_lane
from tidings.queue import OutgoingMessage, ReceivedMessage

ARN = "arn:aws:sqs:local:000000000000:tidings-delivery"


class WaitRecordingQueue(LocalQueue):
    """A LocalQueue that notes how long each receive was allowed to wait."""

    def __init__(self) -> None:
        super().__init__(visibility_timeout_s=30)
        self.waits: list[float] = []

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        self.waits.append(wait_s)
        return super().receive(max_messages, wait_s)


def test_an_environment_long_polls_and_takes_a_message_as_soon_as_it_is_sent() -> None:
    queue = WaitRecordingQueue()
    stopping, draining = threading.Event(), threading.Event()
    handled: list[float] = []

    def handler(event: dict[str, Any], context: Any) -> None:
        handled.append(time.monotonic())

    loop = threading.Thread(
        target=serve_lane,
        args=(handler,),
        kwargs={
            "lane": FAST_LANE,
            "queue": queue,
            "queue_arn": ARN,
            "stopping": stopping,
            "draining": draining,
            "drain_timeout_s": 1.0,
            "counters": Counters(1),
            "environment": 0,
        },
    )
    loop.start()
    try:
        while not queue.waits:
            time.sleep(0.01)
        # The environment now waits inside its receive. The runtime starts draining, and a
        # message sent meanwhile wakes the environment at once.
        draining.set()
        sent_at = time.monotonic()
        queue.send_batch([OutgoingMessage(id="m", body="hello")])
        while not handled:
            assert time.monotonic() - sent_at < LONG_POLL_S, "the message waited for a poll"
            time.sleep(0.01)
        loop.join(LONG_POLL_S / 2)
    finally:
        stopping.set()
        draining.set()
        loop.join(LONG_POLL_S + 5)
    # Draining, its next receive did not wait: it ended as soon as the queue had nothing.
    assert not loop.is_alive()
    assert queue.waits == [LONG_POLL_S, 0]
    assert queue.approximate_depth() == 0
