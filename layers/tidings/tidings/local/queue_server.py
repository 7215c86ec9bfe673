"""The local queues in a process of their own, reachable from every process of the runtime.

When the simulated sender environments are processes (as Lambda's are), one queue must serve them
all, and the claimer besides. ``QueueServer`` starts a process holding the delivery lanes'
``LocalQueue``s and their dead-letter queue, served by ``multiprocessing.managers`` over a Unix
socket in a directory of the runtime's own (mode 0700), which only a holder of the server's random
key can use (a connection proves the key before anything it sends is unpickled). Each process
connects with ``QueueServer.connect`` (or ``connect_queues`` from an address and key) and gets a
``ServedQueue`` per queue: every call is one round trip to the queue itself, and what the queue
raises (``QueueError``, ``ValueError``) is raised again in the caller, so the SQS contract holds
across processes as it holds within one. A queue server that cannot be reached (it ended) is a
``QueueError`` too, and a send that cannot reach it returns its messages' ids as failed, as
``SqsQueue`` does when SQS cannot be reached.

The server process ends with the process that started it, killed or not: it watches its parent and
exits when the parent is gone (removing its socket's directory), as the in-memory queue would have
ended with it. Signals sent to the whole process group (a terminal closed, a service manager
stopping the group) leave it alone: the runtime stops it, after its senders have drained.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from multiprocessing.managers import BaseManager, BaseProxy
from pathlib import Path
from typing import Any

from tidings.deployment import DELIVERY_LANES, MAX_RECEIVE_COUNT, QUEUE_VISIBILITY_TIMEOUT_S
from tidings.local.processes import SPAWN, end_with_parent, ignore_group_signals
from tidings.local.queue import LocalQueue
from tidings.observability import logger
from tidings.queue import OutgoingMessage, QueueError, ReceivedMessage

DEAD_LETTER = "dead_letter"
# The dead-letter queue's own visibility, as the runtime's in-process one has.
DEAD_LETTER_VISIBILITY_TIMEOUT_S = 30
# What a new queue server may take to answer (its process imports this module first).
START_TIMEOUT_S = 60.0
# The queues of the server process, by name; built by ``_serve`` when it starts.
_served: dict[str, LocalQueue] = {}
# What a call meets when the queue server's process is gone.
_UNREACHABLE = (OSError, EOFError)


class ServedQueue(BaseProxy):
    """A ``DeliveryQueue`` whose queue lives in the queue server's process.

    Safe to share between threads: each thread gets a connection of its own on first use.
    """

    _exposed_ = ("send_batch", "receive", "delete", "change_visibility", "approximate_depth")

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        try:
            failed: list[str] = self._call("send_batch", list(messages))
        except QueueError:
            logger.exception(
                "the queue server cannot be reached; the batch was not sent",
                extra={"ids": [message.id for message in messages]},
            )
            return [message.id for message in messages]
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
        try:
            return call(method, args)
        except _UNREACHABLE as exc:
            raise QueueError(
                f"{method}: the queue server cannot be reached ({type(exc).__name__}: {exc})"
            ) from exc


class _QueueManager(BaseManager):
    """The manager of the served queues: one typeid per queue, each giving a ``ServedQueue``."""


def _queue_named(name: str) -> LocalQueue:
    return _served[name]


QUEUE_NAMES: tuple[str, ...] = (*(lane.name for lane in DELIVERY_LANES), DEAD_LETTER)
for _name in QUEUE_NAMES:
    # A partial of a module-level function: the registry is pickled into the server's process.
    _QueueManager.register(_name, callable=partial(_queue_named, _name), proxytype=ServedQueue)


def _serve(
    address: str, authkey: bytes, visibility_timeout_s: float, max_receive_count: int
) -> None:
    """The server process: the lanes' queues, with redrive to the shared dead-letter queue,
    served until the runtime stops it or is gone."""
    ignore_group_signals()
    folder = Path(address).parent
    end_with_parent(on_parent_gone=partial(shutil.rmtree, folder, ignore_errors=True))
    dead_letter = LocalQueue(visibility_timeout_s=DEAD_LETTER_VISIBILITY_TIMEOUT_S)
    _served[DEAD_LETTER] = dead_letter
    for lane in DELIVERY_LANES:
        _served[lane.name] = LocalQueue(
            visibility_timeout_s=visibility_timeout_s,
            max_receive_count=max_receive_count,
            dead_letter=dead_letter,
        )
    _QueueManager(address=address, authkey=authkey).get_server().serve_forever()


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
        self._folder: Path | None = None
        self._process: Any = None
        self._address: QueueAddress | None = None

    def start(self) -> QueueServer:
        """Start the server's process and return once it answers."""
        # mkdtemp makes the directory 0700: no other user reaches the socket inside.
        self._folder = Path(tempfile.mkdtemp(prefix="tidings-queues-"))
        address = QueueAddress(str(self._folder / "socket"), secrets.token_bytes(32))
        self._process = SPAWN.Process(
            target=_serve,
            args=(address.address, address.authkey, *self._queue_options),
            name="tidings-queue-server",
            daemon=True,
        )
        self._process.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                connect_queues(address)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                if not self._process.is_alive() or time.monotonic() > deadline:
                    self.stop()
                    raise QueueError("the queue server did not start") from None
                time.sleep(0.02)
        self._address = address
        return self

    @property
    def address(self) -> QueueAddress:
        if self._address is None:
            raise RuntimeError("the queue server is not started")
        return self._address

    @property
    def pid(self) -> int | None:
        return None if self._process is None else int(self._process.pid)

    def is_alive(self) -> bool:
        return self._process is not None and bool(self._process.is_alive())

    @property
    def exit_code(self) -> int | None:
        code: int | None = None if self._process is None else self._process.exitcode
        return code

    def connect(self) -> Mapping[str, ServedQueue]:
        """This process's handles on the served queues, by name."""
        return connect_queues(self.address)

    def stop(self) -> None:
        """End the server's process; its queues and what they held go with it."""
        if self._process is not None and self._process.is_alive():
            self._process.kill()
            self._process.join()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
        self._address = None
