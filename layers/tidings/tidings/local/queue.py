"""An in-process queue with the SQS contract, for ``tidings dev`` and tests.

Messages wait in a heap keyed on the time they become visible, so a receive touches only the
messages it returns (plus stale heap entries it discards), not the whole queue. Heap entries are
never updated in place: a message that changes visibility gets a new entry and a new version, and
entries whose version no longer matches are dropped when they reach the top.
"""

from __future__ import annotations

import heapq
import itertools
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tidings.queue.base import (
    OutgoingMessage,
    QueueError,
    ReceivedMessage,
    validate_outgoing,
    validate_receive,
    validate_visibility_timeout,
)

SENDER_ID = "tidings-local"
# A poll never sleeps less than this, so a clock that does not move cannot make it spin.
_MIN_WAIT_S = 0.001


@dataclass(slots=True)
class _Message:
    message_id: str
    body: str
    sent_ms: int
    visible_at: float
    version: int = 0
    receive_count: int = 0
    first_receive_ms: int = 0
    receipt_handle: str = ""


class LocalQueue:
    """An in-memory SQS queue; thread-safe, with ``clock`` deciding visibility and delays.

    A message received ``max_receive_count`` times moves to ``dead_letter`` (when given) on the
    next receive that would return it, as SQS redrive does; without a dead-letter queue it stays.
    """

    def __init__(
        self,
        visibility_timeout_s: float = 30,
        max_receive_count: int = 5,
        dead_letter: LocalQueue | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if visibility_timeout_s < 0:
            raise ValueError(
                f"visibility_timeout_s must not be negative, got {visibility_timeout_s}"
            )
        if max_receive_count < 1:
            raise ValueError(f"max_receive_count must be at least 1, got {max_receive_count}")
        if dead_letter is self:
            raise ValueError("a queue cannot be its own dead-letter queue")
        self.visibility_timeout_s = visibility_timeout_s
        self.max_receive_count = max_receive_count
        self.dead_letter = dead_letter
        self._clock = clock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._messages: dict[str, _Message] = {}
        self._heap: list[tuple[float, int, int, str]] = []
        self._sequence = itertools.count()

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        validate_outgoing(messages)
        sent_ms = _wall_ms()
        with self._changed:
            now = self._clock()
            for outgoing in messages:
                message = _Message(
                    message_id=str(uuid.uuid4()),
                    body=outgoing.body,
                    sent_ms=sent_ms,
                    visible_at=now + outgoing.delay_s,
                )
                self._messages[message.message_id] = message
                self._schedule(message)
            self._changed.notify_all()
        return []

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        validate_receive(max_messages, wait_s)
        # The wait is real time even under a test clock: it bounds how long the caller blocks.
        deadline = time.monotonic() + wait_s
        while True:
            with self._changed:
                received, to_dead_letter = self._take_visible(max_messages)
                remaining = deadline - time.monotonic()
                if not received and not to_dead_letter and remaining > 0:
                    self._changed.wait(max(_MIN_WAIT_S, min(remaining, self._until_next_due())))
                    continue
            # Outside our lock: a dead-letter queue may itself redrive into this one.
            if to_dead_letter and self.dead_letter is not None:
                self.dead_letter._accept(to_dead_letter)
            if received or remaining <= 0:
                return received

    def delete(self, receipt_handles: Sequence[str]) -> None:
        message_ids = [_message_id_of(handle) for handle in receipt_handles]
        with self._lock:
            for handle, message_id in zip(receipt_handles, message_ids, strict=True):
                message = self._messages.get(message_id)
                # A handle from an earlier receive, or of a message already gone, is ignored.
                if message is not None and message.receipt_handle == handle:
                    del self._messages[message_id]

    def change_visibility(self, receipt_handle: str, timeout_s: int) -> None:
        validate_visibility_timeout(timeout_s)
        message_id = _message_id_of(receipt_handle)
        with self._changed:
            message = self._messages.get(message_id)
            if message is None or message.receipt_handle != receipt_handle:
                raise QueueError(
                    f"change_visibility: receipt handle {receipt_handle!r} is not current "
                    "(the message was deleted, redriven or received again)"
                )
            message.visible_at = self._clock() + timeout_s
            self._schedule(message)
            self._changed.notify_all()

    def approximate_depth(self) -> int:
        with self._lock:
            return len(self._messages)

    def _take_visible(self, max_messages: int) -> tuple[list[ReceivedMessage], list[_Message]]:
        now = self._clock()
        received: list[ReceivedMessage] = []
        to_dead_letter: list[_Message] = []
        while self._heap and len(received) < max_messages:
            visible_at, _, version, message_id = self._heap[0]
            if visible_at > now:
                break
            heapq.heappop(self._heap)
            message = self._messages.get(message_id)
            if message is None or message.version != version:
                continue
            if self.dead_letter is not None and message.receive_count >= self.max_receive_count:
                del self._messages[message_id]
                to_dead_letter.append(message)
                continue
            received.append(self._mark_received(message, now))
        return received, to_dead_letter

    def _mark_received(self, message: _Message, now: float) -> ReceivedMessage:
        message.receive_count += 1
        if not message.first_receive_ms:
            message.first_receive_ms = _wall_ms()
        message.receipt_handle = f"{message.message_id}#{secrets.token_hex(8)}"
        message.visible_at = now + self.visibility_timeout_s
        self._schedule(message)
        return ReceivedMessage(
            message_id=message.message_id,
            receipt_handle=message.receipt_handle,
            body=message.body,
            receive_count=message.receive_count,
            attributes={
                "ApproximateReceiveCount": str(message.receive_count),
                "SentTimestamp": str(message.sent_ms),
                "ApproximateFirstReceiveTimestamp": str(message.first_receive_ms),
                "SenderId": SENDER_ID,
            },
        )

    def _accept(self, moved: list[_Message]) -> None:
        """Take messages redriven from another queue; they keep their id and receive count."""
        with self._changed:
            now = self._clock()
            for message in moved:
                message.visible_at = now
                message.receipt_handle = ""
                self._messages[message.message_id] = message
                self._schedule(message)
            self._changed.notify_all()

    def _schedule(self, message: _Message) -> None:
        message.version += 1
        entry = (message.visible_at, next(self._sequence), message.version, message.message_id)
        heapq.heappush(self._heap, entry)

    def _until_next_due(self) -> float:
        if not self._heap:
            return float("inf")
        return self._heap[0][0] - self._clock()


def _message_id_of(receipt_handle: str) -> str:
    message_id, separator, token = receipt_handle.partition("#")
    if not separator or not message_id or not token:
        raise QueueError(f"{receipt_handle!r} is not a receipt handle issued by a LocalQueue")
    return message_id


def _wall_ms() -> int:
    return int(time.time() * 1000)
