"""What a deployment is made of: the functions, their timeouts and schedules, the delivery
queue's visibility and redrive. The one table that the CDK app builds the stack from and that the
local runtime imitates, so the two cannot disagree.

Each function's handler is ``tidings.handlers.<name>``, deployed through its entry point
``functions/<name>/app.py`` (``app.handler``). The flags say what
a function may touch; the constructs turn them into grants and security-group rules, so a
function's permissions are read here and nowhere else: its database role and login user
included (what each role may run is ``tidings.dal.access``).

Producers that call ``tidings.enqueue`` over SQL get login users of their own, members of
``tidings_producer``; their names follow ``producer_database_user``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    description: str
    timeout_s: int
    memory_mb: int
    # Started by EventBridge on this schedule (a stage may override it in cdk.json); None when
    # something else starts the function.
    schedule: str | None = None
    # Sends rows to the fast lane's queue (the claimer; the sender, its retries).
    sends_to_queue: bool = False
    # Sends rows to the slow lane's queue too: only the claimer, for the sender sends a slow
    # endpoint's retries through the database, so that they pass the claim's cap.
    fills_slow_lane: bool = False
    publishes_alerts: bool = False
    # Makes HTTP requests to customer endpoints on any public address (ports 80 and 443).
    reaches_endpoints: bool = False
    # Creates and changes endpoints, so it must know which ports the sender may open
    # (``TIDINGS_ENDPOINT_PORTS``, the stage's endpointPorts) to refuse the others.
    manages_endpoints: bool = False
    # Connects to the database instance directly instead of through RDS Proxy.
    connects_directly: bool = False
    # Makes API Gateway API keys for tokens and adds them to the API's usage plan.
    manages_usage_keys: bool = False
    # Writes the deploy's first admin token into its Secrets Manager secret.
    bootstraps_admin_token: bool = False
    # Emits the queue's figures per listed application (TIDINGS_METRICS_APPLICATIONS).
    emits_application_metrics: bool = False
    # The database group role its own login user joins (tidings.dal.access says what that role
    # runs); None for the migrator, which connects as the master user, a member of the owner role.
    database_role: str | None = None
    # Opens the data keys of signing secrets (KMS Decrypt): to sign, or to re-encrypt.
    opens_signing_secrets: bool = False
    # Makes data keys for new signing secrets (KMS GenerateDataKey).
    seals_signing_secrets: bool = False

    @property
    def scheduled(self) -> bool:
        return self.schedule is not None

    @property
    def database_user(self) -> str | None:
        """The login user it connects as (through RDS Proxy, with IAM authentication)."""
        return None if self.database_role is None else f"tidings_fn_{self.name}"

    @property
    def construct_id(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


CLAIMER = FunctionSpec(
    name="claimer",
    description="Leases due messages in a loop for about a minute and sends them to SQS",
    timeout_s=60,
    memory_mb=512,
    schedule="rate(1 minute)",
    sends_to_queue=True,
    fills_slow_lane=True,
    database_role="tidings_claimer",
)
SENDER = FunctionSpec(
    name="sender",
    description="Delivers SQS batches of messages to their endpoints",
    # Beginning a batch (one statement, at most the 30 s statement timeout), its requests (sent
    # concurrently, each at most the endpoint's timeout: 60 s at most, the API's limit) and
    # recording them (30 s at most) fit; the sender also caps the requests' timeouts by the time
    # left, so a slow start cannot push the record past the end of the invocation.
    timeout_s=120,
    memory_mb=512,
    sends_to_queue=True,
    reaches_endpoints=True,
    database_role="tidings_sender",
    opens_signing_secrets=True,
)
INGEST = FunctionSpec(
    name="ingest",
    description="The ingest API: events, endpoints, subscriptions, look-ups, replay",
    timeout_s=29,
    memory_mb=512,
    manages_endpoints=True,
    database_role="tidings_ingest",
    opens_signing_secrets=True,
    seals_signing_secrets=True,
)
AUTHORIZER = FunctionSpec(
    name="authorizer",
    description="The ingest API's token authorizer: checks bearer tokens, names scope and app",
    timeout_s=10,
    memory_mb=256,
    manages_usage_keys=True,
    database_role="tidings_authorizer",
)
PERCENTILES = FunctionSpec(
    name="percentiles",
    description="Refreshes per-endpoint latency percentiles and reports slow endpoints",
    # A rebuild of the histograms (first run, changed window) may take minutes on a large
    # deployment; its statements may run 600 s, so the function outlives them.
    timeout_s=900,
    memory_mb=256,
    schedule="rate(5 minutes)",
    database_role="tidings_percentiles",
)
HEALTH_MONITOR = FunctionSpec(
    name="health_monitor",
    description="Emits the health summary as metrics and alerts when delivery degrades",
    timeout_s=60,
    memory_mb=256,
    schedule="rate(5 minutes)",
    publishes_alerts=True,
    emits_application_metrics=True,
    database_role="tidings_health_monitor",
)
DEAD_LETTER_REPORT = FunctionSpec(
    name="dead_letter_report",
    description="Summarises dead letters per endpoint and publishes the report",
    timeout_s=120,
    memory_mb=256,
    schedule="rate(1 hour)",
    publishes_alerts=True,
    database_role="tidings_dead_letter_report",
)
PRUNER = FunctionSpec(
    name="pruner",
    description="Deletes old attempts and finished messages in bounded batches",
    timeout_s=300,
    memory_mb=256,
    schedule="rate(1 hour)",
    database_role="tidings_pruner",
)
MIGRATOR = FunctionSpec(
    name="migrator",
    description="Applies the SQL migrations and makes the first admin token (custom resource)",
    timeout_s=600,
    memory_mb=256,
    connects_directly=True,
    bootstraps_admin_token=True,
    opens_signing_secrets=True,
    seals_signing_secrets=True,
)

FUNCTION_SPECS: tuple[FunctionSpec, ...] = (
    CLAIMER,
    SENDER,
    INGEST,
    AUTHORIZER,
    PERCENTILES,
    HEALTH_MONITOR,
    DEAD_LETTER_REPORT,
    PRUNER,
    MIGRATOR,
)

FUNCTIONS_BY_NAME: Mapping[str, FunctionSpec] = {spec.name: spec for spec in FUNCTION_SPECS}
SCHEDULED_FUNCTIONS: tuple[str, ...] = tuple(s.name for s in FUNCTION_SPECS if s.scheduled)
# The schedule each scheduled function has unless a stage says otherwise.
DEFAULT_SCHEDULES: Mapping[str, str] = {
    s.name: s.schedule for s in FUNCTION_SPECS if s.schedule is not None
}

# The delivery queue: its visibility timeout is this many times the sender's timeout, as AWS
# recommends for queues that feed Lambda (a batch retried by the poller after a throttle or a slow
# invocation must not become visible while the first invocation may still work on it), and a
# message that failed this many receives moves to the dead-letter queue.
VISIBILITY_TIMEOUT_FACTOR = 6
QUEUE_VISIBILITY_TIMEOUT_S = VISIBILITY_TIMEOUT_FACTOR * SENDER.timeout_s
MAX_RECEIVE_COUNT = 5


@dataclass(frozen=True, slots=True)
class DeliveryLane:
    """A delivery queue and the sender event source that drains it (``tidings.delivery.lanes``):
    the fast lane's senders take batches, the slow lane's one message at a time, so that an
    invocation waits for one slow endpoint at most and its time is billed to that endpoint's
    delivery alone. On AWS each lane's concurrency is the stage's (``senderMaxConcurrency``,
    ``slowSenderMaxConcurrency``); the local runtime runs ``local_environments`` of each."""

    name: str
    # Messages per sender invocation: the event source mapping's batch size.
    batch_size: int
    local_environments: int


FAST_LANE = DeliveryLane(name="fast", batch_size=10, local_environments=4)
SLOW_LANE = DeliveryLane(name="slow", batch_size=1, local_environments=4)
DELIVERY_LANES: tuple[DeliveryLane, ...] = (FAST_LANE, SLOW_LANE)


# How long API Gateway keeps the authorizer's answer for one Authorization header: a revoked or
# expired token is refused within this long.
AUTHORIZER_CACHE_TTL_S = 60


def usage_plan_name(stage: str) -> str:
    """The name of the ingest API's usage plan, by which the authorizer finds it."""
    return f"tidings-{stage}"


_RATE = re.compile(r"^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$")
_UNIT_S = {"minute": 60, "hour": 3600, "day": 86400}


def schedule_interval_s(expression: str) -> float:
    """The interval of a ``rate(N unit)`` schedule, in seconds."""
    match = _RATE.match(expression)
    if match is None:
        raise ValueError(f"{expression!r} is not a rate(N minutes|hours|days) schedule")
    return float(int(match[1]) * _UNIT_S[match[2].rstrip("s")])


# The deployed schedules of the functions EventBridge starts at intervals (the claimer, which
# the local runtime invokes back to back, aside).
SCHEDULED_INTERVALS_S: Mapping[str, float] = {
    name: schedule_interval_s(expression)
    for name, expression in DEFAULT_SCHEDULES.items()
    if name != "claimer"
}


PRODUCER_ROLE = "tidings_producer"


def producer_database_user(name: str) -> str:
    """The login user of the producer called ``name`` (a stage's ``producerLogins``)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,39}", name):
        raise ValueError(
            f"producer login name {name!r} must be 1 to 40 lower-case letters, digits or _ "
            "and start with a letter"
        )
    return f"tidings_producer_{name}"


# How the deployed database logs: never a statement's text (which holds the values psycopg2
# sends inline: payloads, response excerpts), never an error's DETAIL or CONTEXT (which quote
# rows and values). Slow statements are found in pg_stat_statements (and Performance Insights),
# which normalise literals away; lock waits are still logged, without the statement. The
# parameter group (infra/database.py) sets these, and a test runs a server configured with
# exactly these settings and searches its log for secrets and payloads.
DATABASE_LOG_PARAMETERS: Mapping[str, str] = {
    "log_statement": "none",
    "log_min_duration_statement": "-1",
    "log_min_error_statement": "panic",
    "log_error_verbosity": "terse",
    "log_lock_waits": "1",
    "log_parameter_max_length": "0",
    "log_parameter_max_length_on_error": "0",
}
