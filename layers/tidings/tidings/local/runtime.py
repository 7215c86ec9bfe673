"""``tidings dev``: the whole system on one machine, with the very handlers that run on Lambda.

The runtime plays every part AWS plays: EventBridge (the claimer, invoked again and again with a
short deadline, and the scheduled handlers on their intervals), the SQS event source mapping
(sender "execution environments", each with its own database connection, consuming the queue in
batches: threads of this process, or with ``sender_processes`` processes of their own, as on
Lambda, with the queues in a queue server process; see ``tidings.local.sender_environments``),
API Gateway (HTTP requests turned into proxy events) and SNS (alerts printed and appended to a
file). Collaborators reach the handlers only through ``tidings.wiring``.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from tidings import migrations, wiring
from tidings.aws_clients import sns_client, sqs_client
from tidings.config import Settings
from tidings.dal.connection import connect
from tidings.dal.tokens import any_token
from tidings.deployment import (
    DELIVERY_LANES,
    FAST_LANE,
    MAX_RECEIVE_COUNT,
    QUEUE_VISIBILITY_TIMEOUT_S,
    SLOW_LANE,
    DeliveryLane,
)
from tidings.local.api_server import ApiServer
from tidings.local.embedded import EmbeddedPostgres
from tidings.local.lambda_env import (
    Handler,
    LambdaContext,
    handler_path,
    load_handler,
    scheduled_event,
)
from tidings.local.notifier import LocalNotifier
from tidings.local.queue import LocalQueue
from tidings.local.queue_server import DEAD_LETTER, QueueServer
from tidings.local.scheduler import DEFAULT_INTERVALS_S, Job, Scheduler
from tidings.local.sender_environments import (
    FAILURE_WAIT_S,
    SENDER_TIMEOUT_S,
    Counters,
    EnvironmentSpec,
    SenderProcess,
    SharedFlag,
    database_factory,
    local_keyring,
    serve_lane,
)
from tidings.logic import schema
from tidings.notify import Notifier, SnsNotifier
from tidings.observability import logger
from tidings.queue import DeliveryQueue, SqsQueue
from tidings.secrets.keyring import Keyring

# Local delivery targets: loopback and nothing else, on any port (local receivers listen on
# whatever port they were given; no security group stands between them and the sender).
LOOPBACK_NETWORKS = ("127.0.0.0/8", "::1/128")
ANY_PORT = ("1-65535",)
# Without TIDINGS_LEASE_S the dev runtime leases for 60 s, so that the work a crashed runtime held
# comes back within about a minute.
DEV_LEASE_S = 60.0
LOCAL_QUEUE_ARN = "arn:aws:sqs:local:000000000000:tidings-delivery"
QUEUE_NAME = "tidings-delivery"
SLOW_QUEUE_NAME = "tidings-delivery-slow"
LOCAL_SLOW_QUEUE_ARN = f"arn:aws:sqs:local:000000000000:{SLOW_QUEUE_NAME}"
TOPIC_NAME = "tidings-alerts"
# How often the runtime looks at its child processes (sender environments, queue server).
_CHILDREN_CHECK_S = 1.0
# What the sender processes together may take to import their handler and connect to the queue.
_ENVIRONMENTS_START_TIMEOUT_S = 120.0
# An environment process that ends is started again after a pause doubling with each end in a
# row (1 s, 2 s, 4 s ... up to a minute); one that ran this long has its count start over.
_RESTART_MAX_PAUSE_S = 60.0
_RESTART_FORGIVEN_AFTER_S = 60.0


def dev_settings(environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings from the environment, with loopback (only) allowed as a delivery target, on
    any port."""
    env = os.environ if environ is None else environ
    defaults: dict[str, Any] = {}
    if "TIDINGS_LEASE_S" not in env:
        defaults["lease_s"] = DEV_LEASE_S
    settings = Settings.from_env(env, **defaults)
    return settings.replace(
        allowed_networks=LOOPBACK_NETWORKS, endpoint_ports=ANY_PORT, **overrides
    )


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """How to run; the delivery semantics themselves come from ``Settings``."""

    data_dir: Path = Path(".tidings")
    host: str = "127.0.0.1"
    port: int = 8080
    serve_api: bool = True
    # Sender execution environments per lane, as the deployment's lanes have (tidings.deployment).
    sender_environments: int = FAST_LANE.local_environments
    slow_sender_environments: int = SLOW_LANE.local_environments
    # How long each claimer invocation runs before the next one starts (its "remaining time"
    # beyond the claimer's own stop margin).
    claimer_slice_s: float = 10.0
    intervals_s: Mapping[str, float] = field(default_factory=lambda: dict(DEFAULT_INTERVALS_S))
    alerts_stream: TextIO | None = sys.stdout
    functions_dir: Path | None = None
    # On shutdown, senders keep consuming what is already visible in the queue for this long.
    drain_timeout_s: float = 20.0
    # Sender environments as processes of their own (each with its interpreter and its pool
    # of sending threads, as on Lambda) instead of threads sharing this process's interpreter
    # lock; they start more slowly, and send more per second on a machine of several cores.
    sender_processes: bool = False

    def __post_init__(self) -> None:
        if self.sender_environments < 1:
            raise ValueError(
                f"sender_environments must be at least 1, got {self.sender_environments}"
            )
        if self.slow_sender_environments < 1:
            raise ValueError(
                f"slow_sender_environments must be at least 1, got {self.slow_sender_environments}"
            )
        if self.claimer_slice_s <= 0:
            raise ValueError(f"claimer_slice_s must be positive, got {self.claimer_slice_s}")
        unknown = set(self.intervals_s) - set(DEFAULT_INTERVALS_S)
        if unknown:
            raise ValueError(f"no scheduled function named {sorted(unknown)}")

    @property
    def alerts_path(self) -> Path:
        return self.data_dir / "alerts.jsonl"


def prepare_database(settings: Settings, keyring: Keyring) -> list[str]:
    """Apply pending migrations and keep the signing secrets encrypted under the current key;
    the names of the migrations applied now."""
    conn = connect(settings)
    try:
        return list(
            schema.prepare_database(
                conn,
                keyring,
                max_payload_bytes=settings.max_payload_bytes,
                operational_application=settings.operational_application,
                operational_failing_attempt=settings.operational_failing_attempt,
                policy=migrations.LockPolicy.from_settings(settings),
            ).applied
        )
    finally:
        conn.close()


def aws_collaborators(settings: Settings) -> tuple[SqsQueue, str, SnsNotifier]:
    """SQS queue (created when no URL is configured), its ARN, and the SNS alerts topic."""
    sqs = sqs_client(settings.aws_endpoint_url)
    queue_url = settings.delivery_queue_url or _create_queue(sqs, QUEUE_NAME)
    queue = SqsQueue(queue_url, client=sqs)
    topic_arn = settings.alerts_topic_arn
    sns = sns_client(settings.aws_endpoint_url)
    if not topic_arn:
        topic_arn = sns.create_topic(Name=TOPIC_NAME)["TopicArn"]
    return queue, queue.queue_arn(), SnsNotifier(topic_arn, client=sns)


class OpenAccess:
    """Whether no API token exists yet (the local API then lets loopback requests through
    without one). Asked on every request until a token exists, then never again: tokens are
    revoked, never removed."""

    def __init__(self) -> None:
        self._closed = False

    def __call__(self) -> bool:
        if not self._closed and wiring.database().run(any_token):
            self._closed = True
        return not self._closed


class DevRuntime:
    """Starts, runs and stops the local system; see the module docstring."""

    def __init__(self, settings: Settings, config: RuntimeConfig | None = None) -> None:
        self.config = config or RuntimeConfig()
        self._base_settings = settings
        self.settings = settings
        self.embedded: EmbeddedPostgres | None = None
        self.queue: DeliveryQueue | None = None
        self.slow_queue: DeliveryQueue | None = None
        self.dead_letter_queue: DeliveryQueue | None = None
        # With sender_processes and no real SQS: the process the local queues live in.
        self.queue_server: QueueServer | None = None
        self.queue_arn = LOCAL_QUEUE_ARN
        self.slow_queue_arn = LOCAL_SLOW_QUEUE_ARN
        self.notifier: Notifier | None = None
        self.api: ApiServer | None = None
        # Whether the API lets loopback requests through without a token (none exists yet).
        self.open_access = OpenAccess()
        self.scheduler: Scheduler | None = None
        self.keyring: Keyring | None = None
        self._stopping = threading.Event()
        self._draining = threading.Event()
        self._threads: list[threading.Thread] = []
        # Sender processes (with sender_processes): what each was started with, and the process.
        self._environments: dict[str, SenderProcess] = {}
        self._environments_lock = threading.Lock()
        # Why the runtime cannot go on (its queue server ended), once that happened.
        self.failure: str | None = None
        self._processes_draining = SharedFlag()
        self._claimer_context: LambdaContext | None = None
        self._counter_lock = threading.Lock()
        self._sender_counters = Counters(
            self.config.sender_environments + self.config.slow_sender_environments
        )
        self.claimer_invocations = 0
        self.claimer_failures = 0

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        config = self.config
        settings = self._base_settings
        # The embedded server first: without the local extra nothing is made, not even the folder.
        if not settings.database_url and not settings.database_secret_arn:
            self.embedded = EmbeddedPostgres(config.data_dir / "pgdata")
            settings = settings.replace(database_url=self.embedded.dsn)
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.keyring = local_keyring(settings, config.data_dir)
        applied = prepare_database(settings, self.keyring)
        if applied:
            logger.info("migrations applied", extra={"migrations": applied})
        self.settings = settings
        handlers = {
            name: load_handler(name, config.functions_dir)
            for name in ("claimer", *config.intervals_s)
        }
        if config.serve_api:
            handlers["ingest"] = load_handler("ingest", config.functions_dir)
            handlers["authorizer"] = load_handler("authorizer", config.functions_dir)
            handlers["portal"] = load_handler("portal", config.functions_dir)
            # Bound now (port 0 picks one), so that portal links can name the address.
            self.api = ApiServer(
                handlers["ingest"],
                config.host,
                config.port,
                authorizer=handlers["authorizer"],
                open_access=self.open_access,
                portal=handlers["portal"],
            )
            if not settings.portal_url:
                settings = settings.replace(portal_url=f"{self.api.url}/portal")
            self.settings = settings
        self._wire(settings)
        self.scheduler = Scheduler(
            [
                Job(name, float(interval), handlers[name])
                for name, interval in config.intervals_s.items()
            ]
        )
        if config.sender_processes:
            self._start_sender_processes(settings)
        else:
            self._start_sender_threads()
        self._spawn("claimer", self._claimer_loop, handlers["claimer"])
        self.scheduler.start()
        if self.api is not None:
            self.api.start()

    def _lanes(self) -> list[tuple[DeliveryLane, int, DeliveryQueue, str]]:
        """Each lane, its number of environments, its queue and the queue's ARN."""
        assert self.queue is not None and self.slow_queue is not None
        return [
            (FAST_LANE, self.config.sender_environments, self.queue, self.queue_arn),
            (SLOW_LANE, self.config.slow_sender_environments, self.slow_queue, self.slow_queue_arn),
        ]

    def _environment_names(self) -> list[tuple[DeliveryLane, str, int]]:
        """Each sender environment's lane, name and number (which gives its handler module)."""
        named = []
        environment = 0
        for lane, environments, _, _ in self._lanes():
            prefix = "sender" if lane is FAST_LANE else f"{lane.name}-sender"
            for index in range(environments):
                named.append((lane, f"{prefix}-{index + 1}", environment))
                environment += 1
        return named

    def _start_sender_threads(self) -> None:
        queues = {lane.name: (queue, arn) for lane, _, queue, arn in self._lanes()}
        for lane, name, environment in self._environment_names():
            queue, arn = queues[lane.name]
            sender = load_handler("sender", self.config.functions_dir, environment=environment)
            loop = partial(
                self._sender_loop, lane=lane, queue=queue, queue_arn=arn, environment=environment
            )
            self._spawn(name, loop, sender)

    def _start_sender_processes(self, settings: Settings) -> None:
        # Found here, so that a missing handler stops the start with its message, as it does
        # when the environments are threads.
        handler_path("sender", self.config.functions_dir)
        arns = {lane.name: arn for lane, _, _, arn in self._lanes()}
        sqs_urls = None
        if isinstance(self.queue, SqsQueue) and isinstance(self.slow_queue, SqsQueue):
            sqs_urls = (self.queue.queue_url, self.slow_queue.queue_url)
        for lane, name, environment in self._environment_names():
            spec = EnvironmentSpec(
                name=name,
                lane=lane,
                environment=environment,
                queue_arn=arns[lane.name],
                settings=settings,
                data_dir=self.config.data_dir,
                functions_dir=self.config.functions_dir,
                drain_timeout_s=self.config.drain_timeout_s,
                log_level=logger.log_level,
                queues=self.queue_server.address if self.queue_server is not None else None,
                sqs_urls=sqs_urls,
            )
            self._environments[name] = self._start_process(spec)
        deadline = time.monotonic() + _ENVIRONMENTS_START_TIMEOUT_S
        for environment_process in self._environments.values():
            environment_process.wait_ready(deadline)
        watch = threading.Thread(target=self._watch_children, name="children-watch", daemon=True)
        watch.start()
        self._threads.append(watch)

    def _start_process(self, spec: EnvironmentSpec) -> SenderProcess:
        return SenderProcess(spec, self._processes_draining, self._sender_counters).start()

    def _watch_children(self) -> None:
        """Start again an environment process that ended before the runtime stopped, as Lambda
        starts a new execution environment for one that crashed, pausing longer after each end
        in a row; and when the queue server ends, say that the runtime cannot go on."""
        ends: dict[str, int] = {}
        started_at = dict.fromkeys(self._environments, time.monotonic())
        while not self._stopping.wait(_CHILDREN_CHECK_S):
            try:
                if self._queue_server_lost():
                    return
                self._restart_ended(ends, started_at)
            except Exception:
                logger.exception("watching the sender processes failed; watching on")

    def _queue_server_lost(self) -> bool:
        server = self.queue_server
        if server is None or server.is_alive() or self._stopping.is_set():
            return False
        self.failure = (
            f"the queue server process ended (exit code {server.exit_code}); the runtime cannot "
            "go on without its queues (their rows come back when their leases end, at the next "
            "start)"
        )
        logger.error("the queue server process ended", extra={"exit_code": server.exit_code})
        return True

    def _restart_ended(self, ends: dict[str, int], started_at: dict[str, float]) -> None:
        now = time.monotonic()
        with self._environments_lock:
            for name, environment_process in list(self._environments.items()):
                if environment_process.is_alive() or self._stopping.is_set():
                    continue
                if now - started_at[name] >= _RESTART_FORGIVEN_AFTER_S:
                    ends[name] = 0
                pause_s = min(_RESTART_MAX_PAUSE_S, 2.0 ** ends.get(name, 0))
                if now - started_at[name] < pause_s:
                    continue
                ends[name] = ends.get(name, 0) + 1
                logger.error(
                    "a sender process ended; starting it again",
                    extra={
                        "environment": name,
                        "exit_code": environment_process.exit_code,
                        "ends_in_a_row": ends[name],
                    },
                )
                self._environments[name] = self._start_process(environment_process.spec)
                started_at[name] = now

    def child_pids(self) -> list[int]:
        """The processes this runtime started and that still run: sender environments and the
        queue server (none when the environments are threads)."""
        with self._environments_lock:
            children: list[Any] = list(self._environments.values())
        if self.queue_server is not None:
            children.append(self.queue_server)
        return [child.pid for child in children if child.is_alive() and child.pid is not None]

    def _wire(self, settings: Settings) -> None:
        if settings.aws_endpoint_url:
            queue, self.queue_arn, notifier = aws_collaborators(settings)
            slow_queue, self.slow_queue_arn = aws_slow_queue(settings)
            self.queue, self.slow_queue, self.notifier = queue, slow_queue, notifier
        else:
            if self.config.sender_processes:
                self.queue_server = QueueServer().start()
                served = self.queue_server.connect()
                self.queue, self.slow_queue = served[FAST_LANE.name], served[SLOW_LANE.name]
                self.dead_letter_queue = served[DEAD_LETTER]
            else:
                self.dead_letter_queue = LocalQueue(visibility_timeout_s=30)
                self.queue, self.slow_queue = (
                    LocalQueue(
                        visibility_timeout_s=QUEUE_VISIBILITY_TIMEOUT_S,
                        max_receive_count=MAX_RECEIVE_COUNT,
                        dead_letter=self.dead_letter_queue,
                    )
                    for _ in DELIVERY_LANES
                )
            stream = self.config.alerts_stream
            self.notifier = LocalNotifier(
                self.config.alerts_path, stream if stream is not None else _discard()
            )
        wiring.override(
            settings=settings,
            queue=self.queue,
            slow_queue=self.slow_queue,
            notifier=self.notifier,
            keyring=self.keyring,
            database_factory=database_factory(settings),
        )

    def stop(self) -> None:
        """Finish in-flight work and stop; what cannot finish in time is left to lease expiry.

        Intake stops first (API, claimer, schedules); then senders deliver what is already
        visible in the queue for up to ``drain_timeout_s``. Messages still delayed in a local
        queue are dropped with it: their rows stay leased and the claimer takes them back once
        the lease expires, on the next start.
        """
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self.api is not None:
            self.api.stop()
        context = self._claimer_context
        if context is not None:
            context.expire()
        if self.scheduler is not None:
            self.scheduler.stop()
        self._draining.set()
        self._processes_draining.set()
        # One deadline for threads and processes alike: they drain side by side.
        deadline = time.monotonic() + self.config.drain_timeout_s + SENDER_TIMEOUT_S
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        self._stop_sender_processes(deadline)
        if self.queue_server is not None:
            self.queue_server.stop()
        wiring.reset()
        if self.embedded is not None:
            self.embedded.stop()

    def _stop_sender_processes(self, deadline: float) -> None:
        """Wait for the draining environment processes; end those still running at
        ``deadline``."""
        with self._environments_lock:
            processes = list(self._environments.values())
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
        for process in processes:
            if process.is_alive():
                logger.warning(
                    "a sender process did not finish draining; ending it",
                    extra={"environment": process.spec.name},
                )
                process.kill()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def sender_invocations(self) -> int:
        """Sender invocations that ran, in every environment (threads or processes)."""
        return self._sender_counters.invocations

    @property
    def sender_failures(self) -> int:
        return self._sender_counters.failures

    def _spawn(self, name: str, target: Any, handler: Handler) -> None:
        thread = threading.Thread(target=target, args=(handler,), name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    # -- the simulated AWS services ----------------------------------------------------------

    def _claimer_loop(self, handler: Handler) -> None:
        """EventBridge invoking the claimer again as soon as an invocation ends."""
        stop_margin = self.settings.claim_stop_before_timeout_s
        try:
            while not self._stopping.is_set():
                context = LambdaContext(
                    "tidings-claimer", self.config.claimer_slice_s + stop_margin
                )
                self._claimer_context = context
                if self._stopping.is_set():
                    break
                try:
                    handler(scheduled_event("tidings-claimer"), context)
                    self._count("claimer_invocations")
                except Exception:
                    self._count("claimer_failures")
                    logger.exception("claimer invocation failed")
                    wiring.reset_database()
                    self._stopping.wait(FAILURE_WAIT_S)
        finally:
            wiring.reset_database()

    def _sender_loop(
        self,
        handler: Handler,
        *,
        lane: DeliveryLane,
        queue: DeliveryQueue,
        queue_arn: str,
        environment: int,
    ) -> None:
        """One sender execution environment on a thread of this process."""
        serve_lane(
            handler,
            lane=lane,
            queue=queue,
            queue_arn=queue_arn,
            stopping=self._stopping,
            draining=self._draining,
            drain_timeout_s=self.config.drain_timeout_s,
            counters=self._sender_counters,
            environment=environment,
        )

    def _count(self, name: str) -> None:
        with self._counter_lock:
            setattr(self, name, getattr(self, name) + 1)

    def queue_depth(self) -> int:
        """Messages in both lanes' queues."""
        return sum(
            queue.approximate_depth()
            for queue in (self.queue, self.slow_queue)
            if queue is not None
        )


def aws_slow_queue(settings: Settings) -> tuple[SqsQueue, str]:
    """The slow lane's SQS queue (created when no URL is configured) and its ARN."""
    sqs = sqs_client(settings.aws_endpoint_url)
    queue_url = settings.slow_delivery_queue_url or _create_queue(sqs, SLOW_QUEUE_NAME)
    queue = SqsQueue(queue_url, client=sqs)
    return queue, queue.queue_arn()


def _create_queue(sqs: Any, name: str) -> str:
    """A delivery queue with the deployment's visibility and redrive to the shared dead-letter
    queue (both created if missing); its URL."""
    dead_letter_url = sqs.create_queue(QueueName=f"{QUEUE_NAME}-dlq")["QueueUrl"]
    dead_letter_arn = sqs.get_queue_attributes(
        QueueUrl=dead_letter_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    url: str = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": str(int(QUEUE_VISIBILITY_TIMEOUT_S)),
            "RedrivePolicy": (
                f'{{"deadLetterTargetArn":"{dead_letter_arn}",'
                f'"maxReceiveCount":"{MAX_RECEIVE_COUNT}"}}'
            ),
        },
    )["QueueUrl"]
    return url


def _discard() -> TextIO:
    """A stream that drops what is written (alerts then go to the file only)."""
    return open(os.devnull, "w", encoding="utf-8")
