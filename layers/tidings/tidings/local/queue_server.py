"""The local queues in a process of their own, reachable from every process of the runtime.

When the simulated sender environments are processes (as Lambda's are), one queue must serve
them all, and the claimer besides. ``QueueServer`` starts a process holding the delivery lanes'
``LocalQueue``s and their dead-letter queue, served by ``multiprocessing.managers`` over a Unix
socket that only a holder of the server's random key can use. Each process connects with
``QueueServer.connect`` (or ``connect_queues`` from an address and key) and gets a
``ServedQueue`` per queue: every call is one round trip to the queue itself, and what the queue
raises (``QueueError``, ``ValueError``) is raised again in the caller, so the SQS contract holds
across processes as it holds within one.

The server process ends with the process that started it, killed or not: it watches its
parent and exits when the parent is gone, as the in-memory queue would have ended with it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.managers import BaseManager, BaseProxy
from typing import Any

from tidings.deployment import DELIVERY_LANES, MAX_RECEIVE_COUNT, QUEUE_VISIBILITY_TIMEOUT_S
from tidings.local.processes import SPAWN, end_with_parent
from tidings.local.queue import LocalQueue
from tidings.queue import OutgoingMessage, ReceivedMessage

DEAD_LETTER = "dead_letter"
# The dead-letter queue's own visibility, as the runtime's in-process one has.
DEAD_LETTER_VISIBILITY_TIMEOUT_S = 30
# The queues of the server process, by name; built by ``_build_queues`` when it starts.
_served: dict[str, LocalQueue] = {}


class ServedQueue(BaseProxy):
    """A ``DeliveryQueue`` whose queue lives in the queue server's process.

    Safe to share between threads: each thread gets a connection of its own on first use.
    """

    _exposed_ = ("send_batch", "receive", "delete", "change_visibility", "approximate_depth")

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        failed: list[str] = self._call("send_batch", list(messages))
        return failed

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        received: list[ReceivedMessage] = self._call("receive", max_messages, wait_s)
        return received

    def delete(self, receipt_handles: Sequence[str]) -> None:
        self._call("delete", list(receipt_handles))

    def change_visibility(self, receipt_handle: str, timeout_s: int) -> None:
        self._call("change_visibility", receipt_handle, timeout_s)

    def approximate_depth(self) -> int:
        depth: int = self._call("approximate_depth")
        return depth

    def _call(self, method: str, *args: Any) -> Any:
        # typeshed gives _callmethod no result; it returns the method's.
        call: Callable[..., Any] = self._callmethod
        return call(method, args)


class _QueueManager(BaseManager):
    """The manager of the served queues: one typeid per queue, each giving a ``ServedQueue``."""


def _queue_named(name: str) -> LocalQueue:
    return _served[name]


QUEUE_NAMES: tuple[str, ...] = (*(lane.name for lane in DELIVERY_LANES), DEAD_LETTER)
for _name in QUEUE_NAMES:
    # A partial of a module-level function: the registry is pickled into the server's process.
    _QueueManager.register(_name, callable=partial(_queue_named, _name), proxytype=ServedQueue)


def _build_queues(visibility_timeout_s: float, max_receive_count: int) -> None:
    """In the server's process, before it serves: the lanes' queues, with redrive to the shared
    dead-letter queue."""
    dead_letter = LocalQueue(visibility_timeout_s=DEAD_LETTER_VISIBILITY_TIMEOUT_S)
    _served[DEAD_LETTER] = dead_letter
    for lane in DELIVERY_LANES:
        _served[lane.name] = LocalQueue(
            visibility_timeout_s=visibility_timeout_s,
            max_receive_count=max_receive_count,
            dead_letter=dead_letter,
        )
    end_with_parent()


@dataclass(frozen=True, slots=True)
class QueueAddress:
    """Where a queue server listens and the key it asks for: what a process needs to
    connect (picklable, so it can be handed to a process being started)."""

    address: str
    authkey: bytes

    def __repr__(self) -> str:
        # The key stays out of logs and tracebacks.
        return f"QueueAddress(address={self.address!r})"


def connect_queues(where: QueueAddress) -> dict[str, ServedQueue]:
    """The served queues, by name (the lanes' names and ``DEAD_LETTER``)."""
    manager = _QueueManager(address=where.address, authkey=where.authkey)
    manager.connect()
    return {name: getattr(manager, name)() for name in QUEUE_NAMES}


class QueueServer:
    """A process holding the runtime's local queues; see the module docstring."""

    def __init__(
        self,
        *,
        visibility_timeout_s: float = QUEUE_VISIBILITY_TIMEOUT_S,
        max_receive_count: int = MAX_RECEIVE_COUNT,
    ) -> None:
        """Queues with the deployment's visibility and redrive unless told otherwise."""
        # Checked here, where a mistake can be reported, not in the server's process.
        LocalQueue(visibility_timeout_s=visibility_timeout_s, max_receive_count=max_receive_count)
        self._queue_options = (visibility_timeout_s, max_receive_count)
        self._authkey = secrets.token_bytes(32)
        self._manager = _QueueManager(authkey=self._authkey, ctx=SPAWN)
        self._started = False

    def start(self) -> QueueServer:
        self._manager.start(initializer=_build_queues, initargs=self._queue_options)
        self._started = True
        return self

    @property
    def address(self) -> QueueAddress:
        if not self._started:
            raise RuntimeError("the queue server is not started")
        return QueueAddress(str(self._manager.address), self._authkey)

    def connect(self) -> Mapping[str, ServedQueue]:
        """This process's handles on the served queues, by name."""
        return connect_queues(self.address)

    def stop(self) -> None:
        """End the server's process; its queues and what they held go with it."""
        if self._started:
            self._started = False
            self._manager.shutdown()
