"""Configuration, read once from the environment.

Every number in the delivery semantics is a setting here, with the defaults of DESIGN.md.
Environment variables are named ``TIDINGS_<FIELD>`` in upper case (``TIDINGS_BACKOFF_BASE_S``),
except the connection settings that tools already know by their usual names
(``DATABASE_URL``, ``AWS_ENDPOINT_URL``). A ``TIDINGS_*`` variable that is neither a setting nor
one of ``OTHER_VARIABLES`` is refused at start, with the closest known name: a misspelt setting
would otherwise be silently ignored. Numbers must be finite (``nan`` and ``inf`` are refused).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

ENV_PREFIX = "TIDINGS_"

# The most deliveries one delivery-queue message may carry (deliveries_per_message).
MAX_DELIVERIES_PER_MESSAGE = 100
# The most quick answers in a row the slow lane may ask for before it lets an endpoint go
# (slow_lane_release_answers): more would be the whole hold at the slow lane's pace.
MAX_SLOW_LANE_RELEASE_ANSWERS = 1000

# The waits between attempts of a message whose endpoint has no schedule of its own: 5 s, 5 min,
# 30 min, 2 h, 5 h, 10 h, 10 h (Svix's default). Eight attempts over 27.6 hours (99,305 s): the
# last comes no sooner than that after the first, so a receiver may be down for a day and lose
# nothing. See ``tidings.delivery.retry_schedule`` for how the delays and their jitter combine.
DEFAULT_RETRY_SCHEDULE: tuple[float, ...] = (5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 36000.0)
# The longest delay a schedule may hold, and the most delays.
MAX_RETRY_DELAY_S = 86_400.0
MAX_RETRY_DELAYS = 50
# The bodies an endpoint may receive (tidings.dal.delivery.PayloadFormat; a test keeps the two
# alike: configuration is read below every other layer).
PAYLOAD_FORMATS = ("raw", "envelope")


class ConfigError(ValueError):
    """A setting in the environment cannot be used; the message names it."""


# The TIDINGS_* variables read elsewhere than in Settings, by whom.
OTHER_VARIABLES = frozenset(
    {
        # tidings.secrets.master_keys: the local key of the signing secrets, and the keys it
        # replaced (never kept in Settings, so that no settings dump can show them).
        "TIDINGS_SECRETS_KEY",
        "TIDINGS_SECRETS_PREVIOUS_KEYS",
        # tidings.local.lambda_env: a folder of stand-in handlers for tidings dev.
        "TIDINGS_FUNCTIONS_DIR",
        # tidings.client and the command line's remote mode: a deployed stack's API and the
        # token to call it with.
        "TIDINGS_API_URL",
        "TIDINGS_TOKEN",
        # tidings.handlers.migrator (set by infra/functions.py): the login users it makes.
        "TIDINGS_DATABASE_LOGINS",
        # The test suite's own switches (tests/conftest.py, tests/support/clusters.py,
        # tests/e2e/test_portal_browser.py), in the environment of the code under test.
        "TIDINGS_TEST_POSTGRES",
        "TIDINGS_TEST_POSTGRES_BIN",
        "TIDINGS_UPDATE_SCREENSHOTS",
    }
)


# An origin allowed to frame the portal, as it goes into the Content-Security-Policy: nothing
# that could end the directive (no space, no ';') gets in.
FRAME_ANCESTOR = re.compile(
    r"https://(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:[0-9]{1,5})?"
    r"|http://(localhost|127\.0\.0\.1)(:[0-9]{1,5})?"
)
# An application's uid, as the applications table's CHECK has it.
APPLICATION_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
PORTAL_URL = re.compile(r"https?://[A-Za-z0-9.:\[\]-]+(/[A-Za-z0-9._~/-]*)?")


@dataclass(frozen=True, slots=True)
class Settings:
    # Connections
    database_url: str = ""
    # On AWS, each function but the migrator connects as its own login user (database_user)
    # to database_host (the RDS Proxy endpoint) with an IAM authentication token; the migrator
    # reads the master user's credentials from database_secret_arn and connects to database_host
    # (the instance) instead of the host named in the secret.
    database_user: str = ""
    database_secret_arn: str = ""
    database_host: str = ""
    database_port: int = 5432
    database_name: str = "tidings"
    # The CA certificates that the proxy's or the instance's certificate must chain to, for the
    # two connections above (sslmode=verify-full): the deployed functions name the bundle their
    # layer ships. Without it they refuse to connect. DATABASE_URL says its own sslmode.
    database_root_cert: str = ""
    # Bounds on every statement and on an open transaction's idle time, so that no invocation
    # can hold the queue's vacuum horizon for long.
    statement_timeout_ms: int = 30_000
    idle_in_transaction_timeout_ms: int = 10_000
    # Runs of a transaction after a deadlock, a serialization failure or a lost connection.
    database_max_retries: int = 5
    delivery_queue_url: str = ""
    # The slow lane's queue (its senders take one message at a time); empty: slow endpoints'
    # rows go to the delivery queue like the others (no lanes).
    slow_delivery_queue_url: str = ""
    alerts_topic_arn: str = ""
    aws_endpoint_url: str = ""
    # The API's usage plan (AWS): the authorizer adds one API key per token to it, so that each
    # caller is throttled on its own. Empty: no usage plan (the local runtime).
    usage_plan_name: str = ""

    # Claiming. The most rows one claim leases. A claim's cost is partly per call (counting the
    # rows in flight against claim_max_in_flight visits each of them; choosing the parts; the
    # commit): with a backlog, claims of 300 cost PostgreSQL about a tenth less per delivery
    # than claims of 100 (docs/DESIGN.md §7), for a statement about three times as long.
    claim_batch_size: int = 300
    # How long a sender's attempt holds its row (the sender's own time limit): a row whose outcome
    # is not recorded by then is claimed again.
    lease_s: float = 120.0
    # The claim's lease also covers this long waiting in the delivery queue, so that a sender that
    # begins the row within it needs no longer lease than it has (and its update of the row then
    # touches no index).
    lease_queue_allowance_s: float = 60.0
    claim_idle_poll_s: float = 1.0
    claim_stop_before_timeout_s: float = 10.0
    # At most this many rows leased and not yet answered: the queue never holds more than
    # the senders can work through before the leases expire.
    claim_max_in_flight: int = 5000
    # The fast lane's rows travel this many to a queue message (1..100; the slow lane's one to a
    # message): SQS bills requests, not deliveries, and a sender batch of ten messages then
    # carries up to ten times as many deliveries for the same begin statement.
    deliveries_per_message: int = 10

    # Speed lanes: an attempt that takes at least slow_lane_threshold_ms (or times out) puts its
    # endpoint in the slow lane for slow_lane_hold_s; there, an endpoint has at most
    # slow_lane_max_in_flight rows in flight (unless it has a max_in_flight of its own), so it
    # gets its messages at its own pace and cannot take every slow-lane sender. It leaves sooner,
    # once a hold, after slow_lane_release_answers deliveries accepted there in under half the
    # threshold without a failed attempt in between: one slow answer must not hold a quick
    # receiver to the slow lane's pace for the whole hold, and a flaky one stays.
    slow_lane_threshold_ms: int = 1000
    slow_lane_hold_s: float = 600.0
    slow_lane_release_answers: int = 50
    slow_lane_max_in_flight: int = 10
    # An endpoint that has never answered travels the slow lane with this many rows in flight
    # until it does (its speed is unknown: one request is what it takes to learn it).
    untried_max_in_flight: int = 1

    # Attempts
    http_timeout_s: float = 15.0
    # The deployment's retry schedule, in seconds (TIDINGS_RETRY_SCHEDULE="5,300,1800,..."); empty
    # means DEFAULT_RETRY_SCHEDULE. An endpoint may have its own.
    retry_schedule: tuple[float, ...] = ()
    # The exponential formula of earlier releases (base * 2**(n-1) capped at max, for max_attempts
    # attempts): when any of these is set (and retry_schedule is not), the schedule it generates is
    # the deployment's; unset ones take 30 s, 3600 s and 5.
    max_attempts: int | None = None
    backoff_base_s: float | None = None
    backoff_max_s: float | None = None
    sqs_max_delay_s: int = 900
    response_excerpt_bytes: int = 1024
    # Requests a sender has open at once: a batch goes out a wave of this many at a time. More at
    # once shortens a batch of fast receivers, but each answer needs the function's CPU (256 MB
    # has a seventh of a vCPU; about 0.12 ms a POST through libcurl): a hundred answers at once
    # stretch each request's measured time, and a stretched one can put its endpoint in the
    # slow lane.
    sender_concurrency: int = 20
    # The answers a sender writes with one record statement: it records after the wave that
    # brings its unwritten answers to this many (and after any wave that found a slow endpoint,
    # and at the batch's end). The record's database cost is mostly per statement, so more rows
    # a statement cost PostgreSQL less per delivery; but the answers not yet written when a
    # sender dies are delivered a second time. Measured both ways in docs/DESIGN.md §4 (packed
    # messages).
    sender_record_rows: int = 20

    # Circuit breaker
    circuit_failure_threshold: int = 10
    circuit_slow_failure_threshold: int = 5
    circuit_slow_p95_ms: int = 5000
    circuit_cooldown_s: float = 300.0
    circuit_max_cooldown_s: float = 3600.0

    # What a new endpoint receives as the body when neither its request nor its application's
    # default says (one of PAYLOAD_FORMATS): the producer's payload as it is (raw), or the
    # Standard Webhooks envelope {"type", "timestamp", "data"} around it (envelope). Endpoints
    # keep the format they were made with.
    payload_format: str = "raw"

    # Signing
    secret_rotation_overlap_s: float = 86400.0
    # At most this many secrets sign a delivery at once: the current one and those rotated out
    # within their overlap. A rotation beyond it drops the oldest rotated-out secret at once.
    max_signing_secrets: int = 5
    # Secrets at rest: the KMS key that encrypts the data keys (on AWS); else a local key from
    # TIDINGS_SECRETS_KEY (read by tidings.secrets, never kept here) or this key file (default:
    # secrets.key in the dev runtime's data directory). New secrets get a new data key once the
    # current one is this old.
    secrets_kms_key_id: str = ""
    secrets_key_file: str = ""
    secrets_data_key_max_age_s: float = 30 * 86400.0

    # SSRF guard: comma-separated networks that are allowed although private (e.g. "127.0.0.0/8")
    allowed_networks: tuple[str, ...] = field(default_factory=tuple)
    # The ports the deployed sender may open to endpoints (the stage's endpointPorts, which its
    # security group allows): an endpoint on another port could never be reached and is refused.
    # Comma-separated port numbers or ranges ("80,443,8000-8999"); the local runtime allows all.
    endpoint_ports: tuple[str, ...] = ("80", "443")

    # Ingest
    max_payload_bytes: int = 262144
    # The same (event_type, event_id) within this long of its first recording creates nothing:
    # the pruner forgets an event once this has passed and no message of it is kept any more.
    idempotency_window_s: float = 7 * 86400.0

    # Operational events: the application (by uid) whose events report what happens to the
    # other applications' endpoints and messages (made by the migrator when missing; it cannot be
    # deleted), and the failed attempt of a message that message.attempt.failing reports.
    operational_application: str = "tidings-operational"
    operational_failing_attempt: int = 4

    # Portal: where links point (empty: the API's own address, as the request that makes the link
    # reached it; the CLI, which has no request, then needs --base-url), how long a session lasts
    # once a link is opened, the longest a link may stay unused, and the origins whose pages may
    # embed the portal in a frame (comma-separated https origins; empty: none may).
    portal_url: str = ""
    portal_session_s: float = 3600.0
    portal_link_max_s: float = 7 * 86400.0
    portal_frame_ancestors: tuple[str, ...] = field(default_factory=tuple)

    # Measuring, alerting, pruning
    latency_window_s: float = 86400.0
    slow_endpoint_p95_ms: int = 2000
    slow_endpoint_min_samples: int = 20
    oldest_undelivered_alert_s: float = 1800.0
    disable_after_failing_s: float = 5 * 86400.0
    # Daily attempt partitions are dropped once their day is older than this (and the latency
    # window); the attempts of messages still kept are moved aside first, so keep it at least
    # the delivered retention: then only dead letters and late messages have attempts to move.
    attempts_retention_s: float = 7 * 86400.0
    delivered_retention_s: float = 7 * 86400.0
    dead_letter_retention_s: float = 30 * 86400.0
    prune_batch_size: int = 5000
    # Percentiles: attempts can commit after later ones (a slow batch), so each run re-reads the
    # attempts of this many seconds before the last roll-up; later stragglers are not counted
    # (a sender records its outcomes within seconds; a lease lasts lease_s).
    percentiles_rollup_margin_s: float = 300.0
    # Building the histograms from a whole window (first run, or the window's length changed):
    # a slice of the attempt log at a time, for at most a budget per run, so that every run of
    # the job is short however large the deployment.
    percentiles_build_slice_s: float = 3600.0
    percentiles_build_budget_s: float = 5.0
    # The period whose delivered/failed counts and delivery latency the health summary shows.
    health_recent_s: float = 3600.0
    # Applications (uids, comma-separated, at most 20) whose queue figures the health monitor
    # emits as metrics with an Application dimension. Listed, not every application: each
    # application is a CloudWatch metric of its own per figure, so the cost stays bounded.
    metrics_applications: tuple[str, ...] = field(default_factory=tuple)
    # Dead-letter report: the window the operator's view (tidings dead-letters) shows by default,
    # the most dead letters one scheduled report claims (the rest wait for the next run, so its
    # transaction stays short), and the pattern rules.
    dead_letter_report_window_s: float = 3600.0
    dead_letter_report_max_rows: int = 10_000
    dead_letter_outage_min_count: int = 5
    dead_letter_outage_span_s: float = 900.0
    dead_letter_pattern_share: float = 0.5
    # Pruning: daily attempt partitions kept ready ahead, the batches per table per run, and how
    # long a partition drop or creation may wait for its lock before it is left to the next run.
    attempt_partitions_ahead_days: int = 3
    prune_max_batches: int = 200
    prune_lock_timeout_ms: int = 2000
    # Migrations: the longest a migration waits for a table's lock (so what queues behind its
    # request waits no longer), and how often one that could not get its locks is tried.
    migration_lock_timeout_ms: int = 3000
    migration_lock_attempts: int = 20
    # Health monitor: undelivered messages of deleted or disabled endpoints dead-lettered per
    # batch, and the batches per run.
    unreachable_batch_size: int = 5000
    unreachable_max_batches: int = 200

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from ``environ`` (default: ``os.environ``), then apply ``overrides``."""
        env = os.environ if environ is None else environ
        check_environment(env)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            raw = _lookup(env, f.name)
            if raw is None:
                continue
            values[f.name] = _parse(f.name, f.type, raw)
        values.update(overrides)
        settings = cls(**values)
        settings.validate()
        return settings

    def replace(self, **changes: Any) -> Settings:
        updated = dataclasses.replace(self, **changes)
        updated.validate()
        return updated

    def _validate_finite(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            # nan passes every comparison in validate, and inf every upper bound.
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{_env_name(f.name)} must be a finite number, got {value}")

    def _validate_delivery_queue(self) -> None:
        if not 1 <= self.deliveries_per_message <= MAX_DELIVERIES_PER_MESSAGE:
            raise ConfigError(
                f"{_env_name('deliveries_per_message')} must be within "
                f"1..{MAX_DELIVERIES_PER_MESSAGE}, got {self.deliveries_per_message}"
            )
        if not 0 <= self.sqs_max_delay_s <= 900:
            raise ConfigError(f"{_env_name('sqs_max_delay_s')} must be within 0..900 (SQS limit)")
        if not 1 <= self.slow_lane_release_answers <= MAX_SLOW_LANE_RELEASE_ANSWERS:
            raise ConfigError(
                f"{_env_name('slow_lane_release_answers')} must be within "
                f"1..{MAX_SLOW_LANE_RELEASE_ANSWERS}, got {self.slow_lane_release_answers}"
            )

    def validate(self) -> None:
        positive = (
            "claim_batch_size",
            "claim_max_in_flight",
            "slow_lane_threshold_ms",
            "slow_lane_hold_s",
            "slow_lane_max_in_flight",
            "untried_max_in_flight",
            "lease_s",
            "http_timeout_s",
            "circuit_failure_threshold",
            "circuit_cooldown_s",
            "max_payload_bytes",
            "idempotency_window_s",
            "prune_batch_size",
            "sender_concurrency",
            "sender_record_rows",
            "latency_window_s",
            "percentiles_build_slice_s",
            "percentiles_build_budget_s",
            "health_recent_s",
            "dead_letter_report_window_s",
            "dead_letter_report_max_rows",
            "dead_letter_outage_min_count",
            "attempt_partitions_ahead_days",
            "prune_max_batches",
            "prune_lock_timeout_ms",
            "unreachable_batch_size",
            "unreachable_max_batches",
            "migration_lock_timeout_ms",
            "migration_lock_attempts",
            "secrets_data_key_max_age_s",
            "portal_session_s",
            "portal_link_max_s",
            "operational_failing_attempt",
        )
        self._validate_finite()
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{_env_name(name)} must be positive, got {getattr(self, name)}")
        if self.lease_queue_allowance_s < 0:
            raise ConfigError(f"{_env_name('lease_queue_allowance_s')} must not be negative")
        self._validate_retry_schedule()
        if not APPLICATION_UID.fullmatch(self.operational_application):
            raise ConfigError(
                f"{_env_name('operational_application')} must be an application uid "
                f"(letters, digits, '.', '_', ':', '-'; up to 200), "
                f"got {self.operational_application!r}"
            )
        if self.payload_format not in PAYLOAD_FORMATS:
            raise ConfigError(
                f"{_env_name('payload_format')} must be one of {', '.join(PAYLOAD_FORMATS)}, "
                f"got {self.payload_format!r}"
            )
        self._validate_delivery_queue()
        if not 0 < self.dead_letter_pattern_share <= 1:
            raise ConfigError(f"{_env_name('dead_letter_pattern_share')} must be within (0, 1]")
        if not 1 <= self.max_signing_secrets <= 20:
            raise ConfigError(f"{_env_name('max_signing_secrets')} must be within 1..20")
        if self.secret_rotation_overlap_s < 0:
            raise ConfigError(f"{_env_name('secret_rotation_overlap_s')} must not be negative")
        if self.circuit_max_cooldown_s < self.circuit_cooldown_s:
            raise ConfigError(f"{_env_name('circuit_max_cooldown_s')} is below the cooldown")
        try:
            port_ranges(self.endpoint_ports)
        except ValueError as exc:
            raise ConfigError(f"{_env_name('endpoint_ports')}: {exc}") from None
        self._validate_portal()
        if len(self.metrics_applications) > 20:
            raise ConfigError(
                f"{_env_name('metrics_applications')} names more than 20 applications "
                "(each one is a CloudWatch metric per figure)"
            )

    def _validate_portal(self) -> None:
        for origin in self.portal_frame_ancestors:
            if not FRAME_ANCESTOR.fullmatch(origin):
                raise ConfigError(
                    f"{_env_name('portal_frame_ancestors')}: {origin!r} is not an origin such as "
                    "https://app.example.com (https, a host or *.domain, an optional port; "
                    "http only for localhost)"
                )
        if self.portal_url and not PORTAL_URL.fullmatch(self.portal_url):
            raise ConfigError(
                f"{_env_name('portal_url')} must be an http(s) URL without query or fragment"
            )

    def _validate_retry_schedule(self) -> None:
        formula = ("max_attempts", "backoff_base_s", "backoff_max_s")
        for name in formula:
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ConfigError(f"{_env_name(name)} must be positive, got {value}")
        if self.backoff_max_s is not None and self.backoff_max_s < (self.backoff_base_s or 30.0):
            raise ConfigError(
                f"{_env_name('backoff_max_s')} ({self.backoff_max_s}) is below "
                f"{_env_name('backoff_base_s')} ({self.backoff_base_s or 30.0})"
            )
        if not self.retry_schedule:
            return
        given = [_env_name(name) for name in formula if getattr(self, name) is not None]
        if given:
            raise ConfigError(
                f"{_env_name('retry_schedule')} and {', '.join(given)} both set the retry "
                "schedule; keep one"
            )
        if len(self.retry_schedule) > MAX_RETRY_DELAYS:
            raise ConfigError(
                f"{_env_name('retry_schedule')} holds {len(self.retry_schedule)} delays; "
                f"at most {MAX_RETRY_DELAYS}"
            )
        for delay in self.retry_schedule:
            if not math.isfinite(delay) or not 0 < delay <= MAX_RETRY_DELAY_S:
                raise ConfigError(
                    f"{_env_name('retry_schedule')} holds {delay}: each delay must be above 0 "
                    f"and at most {MAX_RETRY_DELAY_S:.0f} seconds"
                )

    def allows_port(self, port: int) -> bool:
        """Whether an endpoint on ``port`` can be reached (``endpoint_ports``)."""
        return any(low <= port <= high for low, high in port_ranges(self.endpoint_ports))


def port_ranges(items: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """``("80", "8000-8999")`` as ``((80, 80), (8000, 8999))``; ValueError names a bad item."""
    if not items:
        raise ValueError("at least one port is needed")
    ranges: list[tuple[int, int]] = []
    for item in items:
        low_text, dash, high_text = item.strip().partition("-")
        try:
            low = int(low_text)
            high = int(high_text) if dash else low
        except ValueError:
            raise ValueError(f"{item!r} is not a port or a range of ports") from None
        if not 1 <= low <= high <= 65535:
            raise ValueError(f"{item!r} is not within 1..65535 (low-high)")
        ranges.append((low, high))
    return tuple(ranges)


_PLAIN_NAMES = {
    "database_url": "DATABASE_URL",
    "aws_endpoint_url": "AWS_ENDPOINT_URL",
}


def known_variables() -> frozenset[str]:
    """Every ``TIDINGS_*`` variable Tidings reads."""
    names = (_env_name(f.name) for f in dataclasses.fields(Settings))
    return OTHER_VARIABLES | {name for name in names if name.startswith(ENV_PREFIX)}


def check_environment(environ: Mapping[str, str]) -> None:
    """Refuse ``TIDINGS_*`` variables Tidings does not read (a misspelt setting would be
    silently ignored otherwise); the message names each with the closest known name."""
    known = known_variables()
    unknown = sorted(name for name in environ if name.startswith(ENV_PREFIX) and name not in known)
    if not unknown:
        return
    # Compared without the prefix that every name shares, which would make any name "close".
    suffixes = sorted(name.removeprefix(ENV_PREFIX) for name in known)
    problems = []
    for name in unknown:
        close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX), suffixes, n=1)
        hint = f" (did you mean {ENV_PREFIX}{close[0]}?)" if close else ""
        problems.append(f"{name} is not a Tidings setting{hint}")
    raise ConfigError("; ".join(problems))


def _env_name(field_name: str) -> str:
    return _PLAIN_NAMES.get(field_name, ENV_PREFIX + field_name.upper())


def _lookup(env: Mapping[str, str], field_name: str) -> str | None:
    return env.get(_env_name(field_name))


def _parse(name: str, type_name: Any, raw: str) -> Any:
    kind = str(type_name).removesuffix(" | None")
    try:
        if kind == "int":
            return int(raw)
        if kind == "float":
            numbers: tuple[float, ...] = (float(raw),)
        elif kind == "tuple[float, ...]":
            numbers = tuple(float(part) for part in raw.split(",") if part.strip())
        elif kind.startswith("tuple"):
            return tuple(part.strip() for part in raw.split(",") if part.strip())
        else:
            return raw
    except ValueError as exc:
        raise ConfigError(f"{_env_name(name)}={raw!r} is not a valid {kind}") from exc
    # float() reads "nan" and "inf"; no setting can use them (nan passes every comparison).
    if not all(math.isfinite(number) for number in numbers):
        raise ConfigError(f"{_env_name(name)}={raw!r} is not a finite number")
    return numbers[0] if kind == "float" else numbers


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings.from_env()
