"""Per-stage deployment settings, read from the CDK context.

``cdk.json`` holds ``stages`` (one block of settings per stage) and ``stage`` (the default).
``-c stage=prod`` picks a stage; any setting can also be given on its own on the command line
(``-c alarmEmail=ops@example.com``) and then wins over the stage block.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from constructs import Node

from tidings.config import FRAME_ANCESTOR, MAX_DELIVERIES_PER_MESSAGE, PORTAL_URL, Settings
from tidings.deployment import (
    DEFAULT_SCHEDULES,
    MAX_RECEIVE_COUNT,
    SCHEDULED_FUNCTIONS,
    producer_database_user,
)

_SCHEDULE = re.compile(r"^(rate\(\d+ (minute|minutes|hour|hours|day|days)\)|cron\(.+\))$")
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_INSTANCE_TYPE = re.compile(r"^[a-z][a-z0-9]*\.[a-z0-9]+$")
_SECURITY_GROUP_ID = re.compile(r"^sg-[0-9a-f]{8,17}$")
# What an application's uid may be (migration 0040).
_UID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$")
MAX_METRICS_APPLICATIONS = 20

DEFAULT_DELIVERIES_PER_MESSAGE = Settings().deliveries_per_message


class StageConfigError(ValueError):
    """The CDK context does not describe a usable stage; the message names the setting."""


@dataclass(frozen=True, slots=True)
class StageConfig:
    stage: str
    # Database
    instance_type: str
    allocated_storage_gib: int
    max_allocated_storage_gib: int
    multi_az: bool
    backup_retention_days: int
    deletion_protection: bool
    retain_on_delete: bool
    secret_rotation_days: int
    # Security groups of producer applications in the VPC that call tidings.enqueue over SQL.
    producer_security_group_ids: tuple[str, ...]
    # The producers' own database login users (each a member of tidings_producer), by name.
    producer_logins: tuple[str, ...]
    # Performance Insights on the instance: slow statements seen normalised, never logged.
    performance_insights: bool
    statement_timeout_ms: int
    idle_in_transaction_timeout_ms: int
    # Network
    nat_gateways: int
    # Functions and queue
    log_level: str
    log_retention_days: int
    sender_max_concurrency: int
    # The slow lane's senders (one message each), beside the fast lane's: tidings.delivery.lanes.
    slow_sender_max_concurrency: int
    dlq_max_receive_count: int
    # Fast-lane rows per delivery-queue message (TIDINGS_DELIVERIES_PER_MESSAGE of the claimer
    # and the sender); 1 sends one row a message, as releases before packing did.
    deliveries_per_message: int
    http_timeout_s: int
    # TCP ports the sender may open to webhook endpoints on public addresses.
    endpoint_ports: tuple[int, ...]
    schedules: Mapping[str, str]
    # API
    api_rate_limit: int
    api_burst_limit: int
    # Applications (uids, at most 20) whose queue figures carry an Application dimension in the
    # health monitor's metrics: each is a CloudWatch metric per figure, so the list is bounded.
    metrics_applications: tuple[str, ...]
    # Portal: the origins whose pages may embed it in a frame (none by default), and its address
    # when the API is reached through a custom domain (empty: the API's own execute-api URL).
    portal_frame_ancestors: tuple[str, ...]
    portal_url: str
    # Alerts
    alarm_email: str
    oldest_message_alarm_s: int
    free_storage_alarm_gib: int
    db_connections_alarm: int

    @property
    def stack_name(self) -> str:
        return f"Tidings-{self.stage}"


def stage_config_from_node(node: Node) -> StageConfig:
    """The stage named by ``-c stage=`` (default: ``cdk.json``), read from a node's context."""
    return stage_config(node.try_get_context)


def stage_config(lookup: Callable[[str], Any]) -> StageConfig:
    """Build the stage settings from a context look-up function (``node.try_get_context``)."""
    stage = lookup("stage") or "dev"
    stages = lookup("stages")
    if not isinstance(stages, Mapping) or not stages:
        raise StageConfigError("context 'stages' is missing: cdk.json must define the stages")
    if stage not in stages:
        raise StageConfigError(f"stage {stage!r} is not defined; known stages: {sorted(stages)}")
    block: Mapping[str, Any] = stages[stage]

    def setting(name: str, default: Any = None) -> Any:
        override = lookup(name)
        if override is not None:
            return override
        if name in block:
            return block[name]
        if default is not None:
            return default
        raise StageConfigError(f"stage {stage!r} lacks the setting {name!r}")

    # The deployment's own schedules, unless the stage or the command line says otherwise.
    schedules = {**DEFAULT_SCHEDULES, **block.get("schedules", {})}
    override_schedules = lookup("schedules")
    if isinstance(override_schedules, Mapping):
        schedules.update(override_schedules)

    config = StageConfig(
        stage=str(stage),
        instance_type=_text(setting, "instanceType"),
        allocated_storage_gib=_integer(setting, "allocatedStorageGiB", minimum=20),
        max_allocated_storage_gib=_integer(setting, "maxAllocatedStorageGiB", minimum=20),
        multi_az=_flag(setting, "multiAz"),
        backup_retention_days=_integer(setting, "backupRetentionDays", minimum=1, maximum=35),
        deletion_protection=_flag(setting, "deletionProtection"),
        retain_on_delete=_flag(setting, "retainOnDelete"),
        secret_rotation_days=_integer(setting, "secretRotationDays", minimum=1, maximum=365),
        producer_security_group_ids=_id_list(setting, "producerSecurityGroupIds"),
        producer_logins=_id_list(setting, "producerLogins"),
        performance_insights=_flag(setting, "performanceInsights"),
        statement_timeout_ms=_integer(setting, "statementTimeoutMs", minimum=1000),
        idle_in_transaction_timeout_ms=_integer(
            setting, "idleInTransactionTimeoutMs", minimum=1000
        ),
        nat_gateways=_integer(setting, "natGateways", minimum=1, maximum=3),
        log_level=_text(setting, "logLevel").upper(),
        log_retention_days=_integer(setting, "logRetentionDays", minimum=1),
        # 2 is the least maximum concurrency an SQS event source accepts.
        sender_max_concurrency=_integer(setting, "senderMaxConcurrency", minimum=2, maximum=1000),
        slow_sender_max_concurrency=_integer(
            setting, "slowSenderMaxConcurrency", minimum=2, maximum=1000
        ),
        dlq_max_receive_count=_integer(
            lambda name: setting(name, MAX_RECEIVE_COUNT), "dlqMaxReceiveCount", 1, 1000
        ),
        deliveries_per_message=_integer(
            lambda name: setting(name, DEFAULT_DELIVERIES_PER_MESSAGE),
            "deliveriesPerMessage",
            1,
            MAX_DELIVERIES_PER_MESSAGE,
        ),
        http_timeout_s=_integer(setting, "httpTimeoutS", minimum=1, maximum=60),
        endpoint_ports=_ports(setting, "endpointPorts"),
        schedules=schedules,
        api_rate_limit=_integer(setting, "apiRateLimit", minimum=1),
        api_burst_limit=_integer(setting, "apiBurstLimit", minimum=1),
        metrics_applications=_id_list(lambda name: setting(name, []), "metricsApplications"),
        portal_frame_ancestors=_portal_frame_ancestors(setting("portalFrameAncestors", [])),
        portal_url=_portal_url(setting("portalUrl", "")),
        alarm_email=str(setting("alarmEmail") or ""),
        oldest_message_alarm_s=_integer(setting, "oldestMessageAlarmS", minimum=60),
        free_storage_alarm_gib=_integer(setting, "freeStorageAlarmGiB", minimum=1),
        db_connections_alarm=_integer(setting, "dbConnectionsAlarm", minimum=1),
    )
    _validate(config)
    return config


def _validate(config: StageConfig) -> None:
    if not _INSTANCE_TYPE.match(config.instance_type):
        raise StageConfigError(
            f"instanceType {config.instance_type!r} is not an instance type like 't4g.micro'"
        )
    if config.max_allocated_storage_gib < config.allocated_storage_gib:
        raise StageConfigError("maxAllocatedStorageGiB is below allocatedStorageGiB")
    if config.log_level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise StageConfigError(f"logLevel {config.log_level!r} is not a Python logging level")
    for group_id in config.producer_security_group_ids:
        if not _SECURITY_GROUP_ID.match(group_id):
            raise StageConfigError(
                f"producerSecurityGroupIds: {group_id!r} is not a security group id (sg-...)"
            )
    _validate_metrics_applications(config.metrics_applications)
    _validate_producer_logins(config.producer_logins)
    if config.alarm_email and not _EMAIL.match(config.alarm_email):
        raise StageConfigError(f"alarmEmail {config.alarm_email!r} is not an email address")
    unknown = sorted(set(config.schedules) - set(SCHEDULED_FUNCTIONS))
    if unknown:
        raise StageConfigError(
            f"schedules name unknown functions {unknown}; scheduled: {list(SCHEDULED_FUNCTIONS)}"
        )
    for name in SCHEDULED_FUNCTIONS:
        expression = config.schedules.get(name)
        if expression is None:
            raise StageConfigError(f"schedules lacks an entry for {name!r}")
        if not _SCHEDULE.match(expression):
            raise StageConfigError(
                f"schedule for {name!r} is {expression!r}; "
                "expected 'rate(N minutes)' or 'cron(...)'"
            )


def _portal_frame_ancestors(origins: Any) -> tuple[str, ...]:
    if not isinstance(origins, list) or not all(isinstance(o, str) for o in origins):
        raise StageConfigError("portalFrameAncestors must be a list of origins")
    for origin in origins:
        if not FRAME_ANCESTOR.fullmatch(origin):
            raise StageConfigError(
                f"portalFrameAncestors: {origin!r} is not an origin such as https://app.example.com"
            )
    return tuple(origins)


def _portal_url(url: Any) -> str:
    if not isinstance(url, str) or (url and not PORTAL_URL.fullmatch(url)):
        raise StageConfigError(f"portalUrl {url!r} is not an https URL without query or fragment")
    return url


def _validate_metrics_applications(uids: tuple[str, ...]) -> None:
    if len(uids) > MAX_METRICS_APPLICATIONS:
        raise StageConfigError(
            f"metricsApplications names {len(uids)} applications; "
            f"at most {MAX_METRICS_APPLICATIONS} (each is a CloudWatch metric per figure)"
        )
    for uid in uids:
        if not _UID.match(uid):
            raise StageConfigError(f"metricsApplications: {uid!r} is not an application uid")


def _validate_producer_logins(names: tuple[str, ...]) -> None:
    for name in names:
        try:
            producer_database_user(name)
        except ValueError as exc:
            raise StageConfigError(f"producerLogins: {exc}") from None
    if len(set(names)) != len(names):
        raise StageConfigError("producerLogins names a producer twice")


def _text(setting: Callable[[str], Any], name: str) -> str:
    value = setting(name)
    if not isinstance(value, str) or not value:
        raise StageConfigError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _id_list(setting: Callable[[str], Any], name: str) -> tuple[str, ...]:
    value = setting(name)
    # A list in cdk.json, a comma-separated string with -c on the command line.
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise StageConfigError(f"{name} must be a list of strings, got {value!r}")
    return tuple(item.strip() for item in items if item.strip())


def _ports(setting: Callable[[str], Any], name: str) -> tuple[int, ...]:
    value = setting(name)
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not items:
        raise StageConfigError(f"{name} must be a non-empty list of ports, got {value!r}")
    ports = []
    for item in items:
        try:
            port = int(str(item).strip())
        except ValueError as exc:
            raise StageConfigError(f"{name}: {item!r} is not a port number") from exc
        if not 1 <= port <= 65535:
            raise StageConfigError(f"{name}: {port} is not within 1..65535")
        ports.append(port)
    return tuple(sorted(set(ports)))


def _flag(setting: Callable[[str], Any], name: str) -> bool:
    value = setting(name)
    # Values given with -c on the command line arrive as strings.
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise StageConfigError(f"{name} must be true or false, got {value!r}")
    return value


def _integer(
    setting: Callable[[str], Any], name: str, minimum: int, maximum: int | None = None
) -> int:
    value = setting(name)
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise StageConfigError(f"{name} must be an integer, got {value!r}") from exc
    if isinstance(value, bool) or str(number) != str(value).strip():
        raise StageConfigError(f"{name} must be an integer, got {value!r}")
    if number < minimum or (maximum is not None and number > maximum):
        bound = f"{minimum}..{maximum}" if maximum is not None else f">= {minimum}"
        raise StageConfigError(f"{name} must be {bound}, got {number}")
    return number
