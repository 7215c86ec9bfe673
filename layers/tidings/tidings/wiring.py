"""Where handlers get their collaborators: settings, database, delivery queue, notifier, usage
keys, and the keyring that encrypts and decrypts signing secrets.

Each is built on first use from the settings (the environment) and then reused, so a Lambda
execution environment keeps one database connection and one client per service across
invocations. The database is per thread: Lambda runs one invocation at a time per environment,
and the local runtime runs each simulated execution environment on a thread of its own.

The local runtime and tests replace collaborators with ``override`` (a local queue, a notifier
that prints) and the handlers run unchanged.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from tidings.config import Settings, get_settings
from tidings.dal.connection import Database

if TYPE_CHECKING:
    from tidings.notify import Notifier
    from tidings.queue import DeliveryQueue
    from tidings.secrets.keyring import Keyring
    from tidings.usage_keys import UsageKeys

_lock = threading.Lock()
_overrides: dict[str, Any] = {}
_shared: dict[str, Any] = {}
_local = threading.local()


def settings() -> Settings:
    found = _overrides.get("settings")
    return found if isinstance(found, Settings) else get_settings()


def database() -> Database:
    """This thread's database connection (one per execution environment)."""
    db: Database | None = getattr(_local, "db", None)
    if db is None:
        factory = _overrides.get("database_factory")
        db = factory() if factory is not None else Database.from_settings(settings())
        _local.db = db
    return db


def delivery_queue() -> DeliveryQueue:
    queue: DeliveryQueue = _get("queue", _default_queue)
    return queue


def slow_delivery_queue() -> DeliveryQueue | None:
    """The slow lane's queue, or None when the deployment has no slow lane."""
    queue: DeliveryQueue | None = _get("slow_queue", _default_slow_queue)
    return queue


def notifier() -> Notifier:
    found: Notifier = _get("notifier", _default_notifier)
    return found


def usage_keys() -> UsageKeys:
    found: UsageKeys = _get("usage_keys", _default_usage_keys)
    return found


def keyring() -> Keyring:
    """The process's keyring: its data keys are opened once and shared by every thread."""
    found: Keyring = _get("keyring", _default_keyring)
    return found


def _get(name: str, build: Any) -> Any:
    if name in _overrides:
        return _overrides[name]
    with _lock:
        if name not in _shared:
            _shared[name] = build(settings())
        return _shared[name]


def _default_queue(cfg: Settings) -> DeliveryQueue:
    from tidings.queue import SqsQueue

    if not cfg.delivery_queue_url:
        raise ValueError("TIDINGS_DELIVERY_QUEUE_URL is not set")
    return SqsQueue(cfg.delivery_queue_url)


def _default_slow_queue(cfg: Settings) -> DeliveryQueue | None:
    from tidings.queue import SqsQueue

    return SqsQueue(cfg.slow_delivery_queue_url) if cfg.slow_delivery_queue_url else None


def _default_notifier(cfg: Settings) -> Notifier:
    from tidings.notify import SnsNotifier

    if not cfg.alerts_topic_arn:
        raise ValueError("TIDINGS_ALERTS_TOPIC_ARN is not set")
    return SnsNotifier(cfg.alerts_topic_arn)


def _default_usage_keys(cfg: Settings) -> UsageKeys:
    from tidings.usage_keys import ApiGatewayUsageKeys, NoUsageKeys

    if not cfg.usage_plan_name:
        return NoUsageKeys()
    from tidings.aws_clients import apigateway_client

    return ApiGatewayUsageKeys(cfg.usage_plan_name, apigateway_client(cfg.aws_endpoint_url or None))


def _default_keyring(cfg: Settings) -> Keyring:
    from tidings.secrets.keyring import Keyring
    from tidings.secrets.master_keys import configured_master_key

    return Keyring(configured_master_key(cfg), data_key_max_age_s=cfg.secrets_data_key_max_age_s)


def override(**collaborators: Any) -> None:
    """Replace collaborators for this process: ``settings``, ``queue``, ``slow_queue``,
    ``notifier``, ``usage_keys``, ``keyring``, and ``database_factory`` (a callable returning a
    new ``Database``, used once per thread)."""
    allowed = {
        "settings",
        "queue",
        "slow_queue",
        "notifier",
        "usage_keys",
        "keyring",
        "database_factory",
    }
    unknown = set(collaborators) - allowed
    if unknown:
        raise TypeError(f"unknown collaborators: {sorted(unknown)}")
    with _lock:
        _overrides.update(collaborators)
        _shared.clear()
    reset_database()


def reset() -> None:
    """Forget every override and every built collaborator."""
    with _lock:
        _overrides.clear()
        _shared.clear()
    reset_database()


def reset_database() -> None:
    db: Database | None = getattr(_local, "db", None)
    if db is not None:
        db.close()
        _local.db = None


@contextmanager
def overridden(**collaborators: Any) -> Iterator[None]:
    """``override`` for the duration of a block (tests)."""
    override(**collaborators)
    try:
        yield
    finally:
        reset()
