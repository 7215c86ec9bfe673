"""Sender execution environments of the local runtime: the loop each runs, on a thread or in a
process of its own.

An environment is what Lambda's SQS event source mapping feeds: it receives a batch from its
lane's queue, invokes the sender's handler with it as an SQS event and deletes what the handler
did not report failed (``consume_once``), again and again; on shutdown it goes on while the queue
has visible messages, for up to the drain timeout.

As threads, the environments share the runtime's interpreter lock, which on a machine of several
cores caps all of them together at about one core. As processes (``tidings dev
--sender-processes``) each has its interpreter, its connections and its thread pool, as each
Lambda environment has, and they reach the runtime's queues through ``tidings.local.queue_server``.
A process environment ends with the runtime, even when the runtime is killed.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tidings import wiring
from tidings.aws_clients import sqs_client
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.deployment import FAST_LANE, SENDER, SLOW_LANE, DeliveryLane
from tidings.local.event_source import consume_once
from tidings.local.lambda_env import Handler, LambdaContext, load_handler
from tidings.local.processes import SPAWN, end_with_parent, ignore_group_signals
from tidings.local.queue_server import QueueAddress, connect_queues
from tidings.observability import logger
from tidings.queue import DeliveryQueue, SqsQueue
from tidings.secrets.keyring import Keyring
from tidings.secrets.master_keys import configured_master_key

# What the deployed sender may run for; the queue's visibility and redrive are the deployment's.
SENDER_TIMEOUT_S = float(SENDER.timeout_s)
# How long an environment's receive waits for a message when the queue has none (long polling,
# as Lambda's event source mapping does): a message sent meanwhile is taken at once, and an idle
# environment asks the queue once a second. Draining, it does not wait.
LONG_POLL_S = 1.0
# A queue that answers "none" sooner than this did not wait: it is not asked again at once.
_QUICK_ANSWER_S = 0.05
# After an invocation failed (the database unreachable, say), the environment waits this long.
FAILURE_WAIT_S = 1.0


class Flag(Protocol):
    """What the loop needs of an event (``threading.Event`` or a process-shared one)."""

    def is_set(self) -> bool: ...
    def wait(self, timeout: float | None = None) -> bool: ...


# How often a process-shared flag is looked at while waiting for it.
_FLAG_POLL_S = 0.05


class SharedFlag:
    """A flag one process sets and others, started after it was made, read (``Flag``).

    Polled rather than waited on: a process killed while waiting on a ``multiprocessing.Event``
    leaves it unable ever to be set again (its condition waits for the dead sleeper to wake).
    """

    def __init__(self) -> None:
        self._value = SPAWN.RawValue("b", 0)

    def set(self) -> None:
        self._value.value = 1

    def is_set(self) -> bool:
        return bool(self._value.value)

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = _FLAG_POLL_S if deadline is None else deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(_FLAG_POLL_S, left))
        return True


class Counters:
    """Invocations that ran and that failed, per environment, in memory that every environment
    process shares. Each environment writes its own two slots only, so no lock is taken: a lock
    held by a process that is killed would stop every other."""

    def __init__(self, environments: int) -> None:
        self._slots = SPAWN.RawArray("q", 2 * environments)

    def ran(self, environment: int) -> None:
        self._slots[2 * environment] += 1

    def failed(self, environment: int) -> None:
        self._slots[2 * environment + 1] += 1

    @property
    def invocations(self) -> int:
        return sum(self._slots[0::2])

    @property
    def failures(self) -> int:
        return sum(self._slots[1::2])


def serve_lane(
    handler: Handler,
    *,
    lane: DeliveryLane,
    queue: DeliveryQueue,
    queue_arn: str,
    stopping: Flag,
    draining: Flag,
    drain_timeout_s: float,
    counters: Counters,
    environment: int,
) -> None:
    """One sender execution environment fed by its lane's event source mapping, until the
    runtime drains and the queue has nothing visible (or the drain timeout passes)."""
    drain_deadline: float | None = None
    try:
        while True:
            if draining.is_set():
                now = time.monotonic()
                drain_deadline = drain_deadline or now + drain_timeout_s
                if now >= drain_deadline:
                    break
            context = LambdaContext("tidings-sender", SENDER_TIMEOUT_S)
            asked_at = time.monotonic()
            try:
                result = consume_once(
                    queue,
                    handler,
                    queue_arn=queue_arn,
                    context=context,
                    max_messages=lane.batch_size,
                    wait_s=0 if draining.is_set() else LONG_POLL_S,
                )
            except Exception as exc:
                counters.failed(environment)
                logger.warning(
                    "sender invocation failed; the batch returns to the queue",
                    extra={"error": f"{type(exc).__name__}: {exc}"},
                )
                wiring.reset_database()
                if draining.is_set():
                    break
                stopping.wait(FAILURE_WAIT_S)
                continue
            if result.received:
                counters.ran(environment)
                continue
            if draining.is_set():
                break
            if time.monotonic() - asked_at < _QUICK_ANSWER_S:
                stopping.wait(_QUICK_ANSWER_S)
    finally:
        wiring.reset_database()


def database_factory(settings: Settings) -> Callable[[], Database]:
    """A new connection per environment: to ``database_url`` when set, else as the settings
    say (a Secrets Manager secret)."""
    dsn = settings.database_url
    if dsn:
        return lambda: Database(dsn)
    return lambda: Database.from_settings(settings)


def local_keyring(settings: Settings, data_dir: Path) -> Keyring:
    """The keyring of signing secrets: the KMS key when configured, else the local key
    (``TIDINGS_SECRETS_KEY``, else ``<data_dir>/secrets.key``, made on first use)."""
    master = configured_master_key(settings, data_dir=data_dir)
    return Keyring(master, data_key_max_age_s=settings.secrets_data_key_max_age_s)


@dataclass(frozen=True, slots=True)
class EnvironmentSpec:
    """What a process environment is started with (picklable: it crosses to the new process).

    ``queues`` is the queue server's address when the queues are local; with real SQS the
    environment uses ``sqs_urls`` (fast lane's, slow lane's) at ``settings.aws_endpoint_url``.
    """

    name: str
    lane: DeliveryLane
    environment: int
    queue_arn: str
    # Not in the repr: the settings hold the database URL, password and all.
    settings: Settings = field(repr=False)
    data_dir: Path
    functions_dir: Path | None
    drain_timeout_s: float
    log_level: int
    queues: QueueAddress | None = None
    sqs_urls: tuple[str, str] | None = None


class EnvironmentNotReady(RuntimeError):
    """A sender process ended, or took too long, before it could take batches."""


class SenderProcess:
    """One environment in a process of its own (spawned: nothing of the runtime's threads or
    connections is copied into it), started by ``start``."""

    def __init__(self, spec: EnvironmentSpec, draining: SharedFlag, counters: Counters) -> None:
        self.spec = spec
        self._ready = SharedFlag()
        self._process = SPAWN.Process(
            target=run_process,
            args=(spec, draining, counters, self._ready),
            name=spec.name,
            daemon=True,
        )

    def start(self) -> SenderProcess:
        self._process.start()
        return self

    def wait_ready(self, deadline: float) -> None:
        """Return once the environment has its handler loaded and its queue connected; raise
        when it ended first, or ``deadline`` (of ``time.monotonic``) passed."""
        while not self._ready.wait(0.1):
            if not self._process.is_alive():
                raise EnvironmentNotReady(
                    f"sender process {self.spec.name} ended as it started "
                    f"(exit code {self._process.exitcode}); its error is in the log above"
                )
            if time.monotonic() > deadline:
                raise EnvironmentNotReady(f"sender process {self.spec.name} was not ready in time")

    def is_alive(self) -> bool:
        return self._process.is_alive()

    @property
    def pid(self) -> int | None:
        pid: int | None = self._process.pid
        return pid

    @property
    def exit_code(self) -> int | None:
        code: int | None = self._process.exitcode
        return code

    def join(self, timeout_s: float | None = None) -> None:
        self._process.join(timeout_s)

    def kill(self) -> None:
        self._process.kill()
        self._process.join()


def run_process(
    spec: EnvironmentSpec, draining: SharedFlag, counters: Counters, ready: SharedFlag
) -> None:
    """The new process's whole life: wire the collaborators, load the handler, serve the lane."""
    end_with_parent()
    ignore_group_signals()
    # What the handlers print (their EMF metrics) joins their logs, as under ``tidings dev``.
    sys.stdout = sys.stderr
    logger.setLevel(spec.log_level)
    settings = spec.settings
    collaborators: dict[str, Any] = {
        "settings": settings,
        "keyring": local_keyring(settings, spec.data_dir),
        "database_factory": database_factory(settings),
    }
    if spec.queues is not None:
        served = connect_queues(spec.queues)
        collaborators.update(queue=served[FAST_LANE.name], slow_queue=served[SLOW_LANE.name])
    elif spec.sqs_urls is not None:
        client = sqs_client(settings.aws_endpoint_url)
        fast_url, slow_url = spec.sqs_urls
        collaborators.update(
            queue=SqsQueue(fast_url, client=client), slow_queue=SqsQueue(slow_url, client=client)
        )
    wiring.override(**collaborators)
    threading.current_thread().name = spec.name
    handler = load_handler("sender", spec.functions_dir, environment=spec.environment)
    fast = spec.lane.name == FAST_LANE.name
    queue = wiring.delivery_queue() if fast else wiring.slow_delivery_queue()
    assert queue is not None
    ready.set()
    serve_lane(
        handler,
        lane=spec.lane,
        queue=queue,
        queue_arn=spec.queue_arn,
        stopping=draining,
        draining=draining,
        drain_timeout_s=spec.drain_timeout_s,
        counters=counters,
        environment=spec.environment,
    )
