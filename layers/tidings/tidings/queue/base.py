"""The delivery-queue contract that SQS and the local queue both keep.

Both adapters keep the SQS semantics the sender relies on: batches of at most ten, per-message
``DelaySeconds``, a visibility timeout per receive, a receive count, redrive to a dead-letter queue
after ``maxReceiveCount`` receives, and receipt handles that change on every receive.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

MAX_BATCH_ENTRIES = 10
MAX_DELAY_S = 900
MAX_VISIBILITY_TIMEOUT_S = 43_200
MAX_WAIT_S = 20
# SQS now accepts up to 1 MiB, but 256 KiB is what every SQS-compatible service (LocalStack,
# older regions' tooling) accepts, and delivery-queue bodies are small references anyway.
MAX_BODY_BYTES = 262_144
MAX_ENTRY_ID_LENGTH = 80

_ENTRY_ID = re.compile(r"[A-Za-z0-9_-]{1,80}")
# The characters SQS accepts in a message body (XML 1.0 characters).
_INVALID_BODY_CHAR = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


class QueueError(Exception):
    """The queue refused an operation; the message names the operation and the reason."""


@dataclass(frozen=True, slots=True)
class OutgoingMessage:
    """One entry of a send batch; ``id`` identifies it in the returned failures."""

    id: str
    body: str
    delay_s: int = 0


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """A message as handed to a consumer; ``attributes`` holds the SQS system attributes."""

    message_id: str
    receipt_handle: str
    body: str
    receive_count: int
    attributes: Mapping[str, str] = field(default_factory=dict)


class DeliveryQueue(Protocol):
    """The operations Tidings needs from a queue; SQS and ``LocalQueue`` implement them."""

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        """Send any number of messages in batches of ten; return the ids of those that failed.

        Every entry is validated first: a bad entry raises ``ValueError`` and nothing is sent.
        """
        ...

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        """Receive up to ``max_messages`` visible messages, waiting up to ``wait_s`` for one."""
        ...

    def delete(self, receipt_handles: Sequence[str]) -> None:
        """Delete received messages; a handle made stale by a later receive is ignored."""
        ...

    def change_visibility(self, receipt_handle: str, timeout_s: int) -> None:
        """Make a received message visible again ``timeout_s`` seconds from now."""
        ...

    def approximate_depth(self) -> int:
        """Messages in the queue not yet deleted: visible, in flight and delayed."""
        ...


def validate_outgoing(messages: Sequence[OutgoingMessage]) -> None:
    """Raise ``ValueError`` naming the first bad entry; ids must be unique across the call."""
    seen: set[str] = set()
    for position, message in enumerate(messages):
        where = f"message {position} (id {message.id!r})"
        if not isinstance(message.id, str) or not _ENTRY_ID.fullmatch(message.id):
            raise ValueError(
                f"{where}: id must be 1..{MAX_ENTRY_ID_LENGTH} characters of A-Z, a-z, 0-9, _ or -"
            )
        if message.id in seen:
            raise ValueError(f"{where}: id is used twice in one send")
        seen.add(message.id)
        delay = message.delay_s
        if isinstance(delay, bool) or not isinstance(delay, int):
            raise ValueError(f"{where}: delay_s must be an int, got {delay!r}")
        if not 0 <= delay <= MAX_DELAY_S:
            raise ValueError(f"{where}: delay_s must be within 0..{MAX_DELAY_S}, got {delay}")
        if not isinstance(message.body, str) or not message.body:
            raise ValueError(f"{where}: body must be a non-empty string")
        size = len(message.body.encode("utf-8"))
        if size > MAX_BODY_BYTES:
            raise ValueError(f"{where}: body is {size} bytes, the limit is {MAX_BODY_BYTES}")
        bad = _INVALID_BODY_CHAR.search(message.body)
        if bad:
            raise ValueError(
                f"{where}: body contains U+{ord(bad.group()):04X}, which SQS does not accept"
            )


def send_chunks(messages: Sequence[OutgoingMessage]) -> Iterator[list[OutgoingMessage]]:
    """Split into SendMessageBatch-sized chunks: at most ten entries and 256 KiB of bodies."""
    chunk: list[OutgoingMessage] = []
    chunk_bytes = 0
    for message in messages:
        size = len(message.body.encode("utf-8"))
        if chunk and (len(chunk) == MAX_BATCH_ENTRIES or chunk_bytes + size > MAX_BODY_BYTES):
            yield chunk
            chunk, chunk_bytes = [], 0
        chunk.append(message)
        chunk_bytes += size
    if chunk:
        yield chunk


def validate_receive(max_messages: int, wait_s: float) -> None:
    if isinstance(max_messages, bool) or not 1 <= max_messages <= MAX_BATCH_ENTRIES:
        raise ValueError(f"max_messages must be within 1..{MAX_BATCH_ENTRIES}, got {max_messages}")
    if not 0 <= wait_s <= MAX_WAIT_S:
        raise ValueError(f"wait_s must be within 0..{MAX_WAIT_S}, got {wait_s}")


def validate_visibility_timeout(timeout_s: int) -> None:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int):
        raise ValueError(f"timeout_s must be an int, got {timeout_s!r}")
    if not 0 <= timeout_s <= MAX_VISIBILITY_TIMEOUT_S:
        raise ValueError(f"timeout_s must be within 0..{MAX_VISIBILITY_TIMEOUT_S}, got {timeout_s}")
