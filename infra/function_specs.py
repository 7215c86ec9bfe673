"""The Lambda functions of Tidings: the one table every construct reads.

Each entry is ``functions/<name>/app.py`` with the handler ``app.handler``. The flags say what a
function may touch; the constructs turn them into grants and security-group rules, so a
function's permissions are read here and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FunctionSpec:
    name: str
    description: str
    timeout_s: int
    memory_mb: int
    # Started by the entry of the same name in the stage's ``schedules``.
    scheduled: bool = False
    sends_to_queue: bool = False
    publishes_alerts: bool = False
    # Makes HTTP requests to customer endpoints on any public address (ports 80 and 443).
    reaches_endpoints: bool = False
    # Connects to the database instance directly instead of through RDS Proxy.
    connects_directly: bool = False

    @property
    def construct_id(self) -> str:
        return "".join(part.capitalize() for part in self.name.split("_"))


CLAIMER = FunctionSpec(
    name="claimer",
    description="Leases due messages in a loop for about a minute and sends them to SQS",
    timeout_s=60,
    memory_mb=512,
    scheduled=True,
    sends_to_queue=True,
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
)
INGEST = FunctionSpec(
    name="ingest",
    description="The ingest API: events, endpoints, subscriptions, look-ups, replay",
    timeout_s=29,
    memory_mb=512,
)
PERCENTILES = FunctionSpec(
    name="percentiles",
    description="Refreshes per-endpoint latency percentiles and reports slow endpoints",
    # A rebuild of the histograms (first run, changed window) may take minutes on a large
    # deployment; its statements may run 600 s, so the function outlives them.
    timeout_s=900,
    memory_mb=256,
    scheduled=True,
)
HEALTH_MONITOR = FunctionSpec(
    name="health_monitor",
    description="Emits the health summary as metrics and alerts when delivery degrades",
    timeout_s=60,
    memory_mb=256,
    scheduled=True,
    publishes_alerts=True,
)
DEAD_LETTER_REPORT = FunctionSpec(
    name="dead_letter_report",
    description="Summarises dead letters per endpoint and publishes the report",
    timeout_s=120,
    memory_mb=256,
    scheduled=True,
    publishes_alerts=True,
)
PRUNER = FunctionSpec(
    name="pruner",
    description="Deletes old attempts and finished messages in bounded batches",
    timeout_s=300,
    memory_mb=256,
    scheduled=True,
)
MIGRATOR = FunctionSpec(
    name="migrator",
    description="Applies the SQL migrations (CloudFormation custom resource, runs on deploy)",
    timeout_s=600,
    memory_mb=256,
    connects_directly=True,
)

FUNCTION_SPECS: tuple[FunctionSpec, ...] = (
    CLAIMER,
    SENDER,
    INGEST,
    PERCENTILES,
    HEALTH_MONITOR,
    DEAD_LETTER_REPORT,
    PRUNER,
    MIGRATOR,
)
