"""Operator alerts: which conditions hold, which alerts to send or resolve, and sending them once.

A condition has a stable key (``oldest_undelivered``, ``circuit_open:42``). An alert is sent when
its condition starts to hold, never again while it holds, and a "resolved" message is sent once
when it stops. The ``alerts`` table remembers what is firing; each send is claimed there first by
one atomic statement, so overlapping monitor runs cannot send the same message twice.

Never lost: the statement that claims an alert also puts its notification in an outbox, which it
leaves only once published. A publish that fails leaves it due for the next run; a run that dies
between the claim and the publish (a timeout, a crash) leaves it held for ``PUBLISH_CLAIM_S``, and
a later run publishes it. Each run first publishes what earlier runs left, oldest first, so an
alert still goes before its resolution. The price of never losing one: a run that dies after
SNS accepted a notification but before the outbox heard of it sends that one twice.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

from tidings.dal import alerts as dal
from tidings.dal import health as health_dal
from tidings.dal.alerts import Notification, StoredAlert
from tidings.dal.applications import DEFAULT_APP_UID
from tidings.dal.connection import Cursor, Database
from tidings.dal.health import EndpointAttention
from tidings.delivery.ssrf import display_origin
from tidings.notify import Notifier
from tidings.observability import logger


class QueueHealth(Protocol):
    """The figures of the health summary that alerts look at."""

    @property
    def oldest_undelivered_age_s(self) -> float | None: ...
    @property
    def oldest_undelivered_application(self) -> str | None: ...
    @property
    def dead_letters(self) -> int: ...


class AlertSettings(Protocol):
    """What the alert conditions read of the settings."""

    @property
    def oldest_undelivered_alert_s(self) -> float: ...
    @property
    def slow_endpoint_min_samples(self) -> int: ...
    @property
    def slow_endpoint_p95_ms(self) -> int: ...
    @property
    def statement_timeout_ms(self) -> int: ...


# How long a run holds a notification it is publishing before another run may take it (an SNS
# publish gives up within seconds).
PUBLISH_CLAIM_S = 60.0
# Notifications left by earlier runs that one run publishes, at most.
MAX_WAITING_PER_RUN = 100
# An alert names at most this many applications (the largest first), the rest by their count.
MAX_NAMED_APPS = 10


class AlertKind(enum.StrEnum):
    DEAD_LETTERS_GROWING = "dead_letters_growing"
    OLDEST_UNDELIVERED = "oldest_undelivered"
    SLOW_ENDPOINT = "slow_endpoint"
    CIRCUIT_OPEN = "circuit_open"
    ENDPOINT_DISABLED = "endpoint_disabled"
    CLIENT_CERTIFICATE_EXPIRING = "client_certificate_expiring"


@dataclass(frozen=True, slots=True)
class Condition:
    """Something an operator should hear about, as it is now."""

    key: str
    kind: AlertKind
    headline: str
    explanation: str
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class AlertPlan:
    fire: tuple[Condition, ...]
    resolve: tuple[StoredAlert, ...]


def plan_alerts(current: Iterable[Condition], firing: Iterable[StoredAlert]) -> AlertPlan:
    """Fire what holds and is not firing yet; resolve what is firing and no longer holds."""
    holding = {c.key: c for c in current}
    firing_keys = {a.alert_key for a in firing}
    return AlertPlan(
        fire=tuple(c for key, c in sorted(holding.items()) if key not in firing_keys),
        resolve=tuple(
            sorted(
                (a for a in firing if a.alert_key not in holding),
                key=lambda a: a.alert_key,
            )
        ),
    )


def current_conditions(
    *,
    oldest_undelivered_age_s: float | None,
    new_dead_letters: int | None,
    dead_letters: int,
    endpoints: Sequence[EndpointAttention],
    settings: AlertSettings,
    new_dead_letters_by_application: Mapping[str, int] | None = None,
    oldest_undelivered_application: str | None = None,
) -> list[Condition]:
    """The conditions that hold now. ``new_dead_letters`` is the number dead-lettered since the
    previous monitor run (None before the first run, when growth cannot be told), and
    ``new_dead_letters_by_application`` the same per application uid."""
    found: list[Condition] = []
    if new_dead_letters:
        by_app = dict(new_dead_letters_by_application or {})
        named = ", ".join(f"{uid} {n}" for uid, n in list(by_app.items())[:MAX_NAMED_APPS])
        if len(by_app) > MAX_NAMED_APPS:
            named += f", {len(by_app) - MAX_NAMED_APPS} more"
        details: dict[str, Any] = {
            "new_dead_letters": new_dead_letters,
            "dead_letters": dead_letters,
        }
        if by_app:
            details["by_application"] = dict(list(by_app.items())[:MAX_NAMED_APPS])
        found.append(
            Condition(
                key=AlertKind.DEAD_LETTERS_GROWING.value,
                kind=AlertKind.DEAD_LETTERS_GROWING,
                headline=f"dead letters growing: {new_dead_letters} new, {dead_letters} in all",
                explanation=(
                    f"{new_dead_letters} messages were dead-lettered since the previous check"
                    + (f" (per application: {named})" if named else "")
                    + f"; {dead_letters} dead letters are waiting. See the dead-letter report "
                    "for the endpoints and the pattern."
                ),
                details=details,
            )
        )
    limit_s = settings.oldest_undelivered_alert_s
    if oldest_undelivered_age_s is not None and oldest_undelivered_age_s > limit_s:
        minutes = oldest_undelivered_age_s / 60
        where = (
            f" in application {oldest_undelivered_application}"
            if oldest_undelivered_application
            else ""
        )
        oldest_details: dict[str, Any] = {
            "oldest_undelivered_age_s": round(oldest_undelivered_age_s, 1)
        }
        if oldest_undelivered_application:
            oldest_details["application"] = oldest_undelivered_application
        found.append(
            Condition(
                key=AlertKind.OLDEST_UNDELIVERED.value,
                kind=AlertKind.OLDEST_UNDELIVERED,
                headline=f"oldest undelivered message is {minutes:.0f} minutes old",
                explanation=(
                    f"A message{where} has waited {minutes:.0f} minutes for delivery (limit "
                    f"{limit_s / 60:.0f}). Check open circuits, the senders and the queue."
                ),
                details=oldest_details,
            )
        )
    for endpoint in endpoints:
        found.extend(_endpoint_conditions(endpoint, settings))
    return found


def _endpoint_conditions(e: EndpointAttention, settings: AlertSettings) -> list[Condition]:
    found: list[Condition] = []
    # People read the application's uid beside the endpoint unless it is the default one (so a
    # single-tenant deployment reads as before); the JSON details always carry it.
    of_app = "" if e.app_uid == DEFAULT_APP_UID else f" of application {e.app_uid}"
    where = f"endpoint {e.endpoint_id}{of_app} ({display_origin(e.url)})"
    name = f"endpoint {e.endpoint_id}" + ("" if not of_app else f" ({e.app_uid})")
    if not e.enabled:
        found.append(
            Condition(
                key=f"{AlertKind.ENDPOINT_DISABLED.value}:{e.endpoint_id}",
                kind=AlertKind.ENDPOINT_DISABLED,
                headline=f"{name} disabled",
                explanation=(
                    f"{where} is disabled: {e.disabled_reason or 'no reason recorded'}. "
                    "Its undelivered messages become dead letters (replay them once it is "
                    "enabled again); events sent while it is disabled are not queued for it."
                ),
                details={
                    "endpoint_id": e.endpoint_id,
                    "application": e.app_uid,
                    "reason": e.disabled_reason,
                },
            )
        )
    if e.state != "closed":
        found.append(
            Condition(
                key=f"{AlertKind.CIRCUIT_OPEN.value}:{e.endpoint_id}",
                kind=AlertKind.CIRCUIT_OPEN,
                headline=f"circuit open for {name}",
                explanation=(
                    f"The circuit of {where} opened"
                    + (f" at {e.opened_at.isoformat()}" if e.opened_at else "")
                    + " after repeated failures; deliveries wait and one probe is sent after "
                    "each cooldown."
                ),
                details={"endpoint_id": e.endpoint_id, "application": e.app_uid, "state": e.state},
            )
        )
    slow = (
        e.p95_ms is not None
        and e.p95_ms > settings.slow_endpoint_p95_ms
        and e.sample_count >= settings.slow_endpoint_min_samples
    )
    if slow and e.p95_ms is not None:
        found.append(
            Condition(
                key=f"{AlertKind.SLOW_ENDPOINT.value}:{e.endpoint_id}",
                kind=AlertKind.SLOW_ENDPOINT,
                headline=f"{name} slow: p95 {e.p95_ms:.0f} ms",
                explanation=(
                    f"{where} answers slowly: p95 {e.p95_ms:.0f} ms over {e.sample_count} "
                    f"attempts (threshold {settings.slow_endpoint_p95_ms} ms)."
                ),
                details={
                    "endpoint_id": e.endpoint_id,
                    "application": e.app_uid,
                    "p95_ms": round(e.p95_ms, 1),
                    "sample_count": e.sample_count,
                },
            )
        )
    expires = e.client_certificate_not_after
    if expires is not None:
        found.append(
            Condition(
                key=f"{AlertKind.CLIENT_CERTIFICATE_EXPIRING.value}:{e.endpoint_id}",
                kind=AlertKind.CLIENT_CERTIFICATE_EXPIRING,
                headline=f"client certificate of {name} expires {expires:%Y-%m-%d %H:%M} UTC",
                explanation=(
                    f"The TLS client certificate {where} presents expires at "
                    f"{expires.isoformat()}; after that its receiver refuses the handshake. Set "
                    "a renewed one (tidings endpoints update --client-cert --client-key)."
                ),
                details={
                    "endpoint_id": e.endpoint_id,
                    "application": e.app_uid,
                    "not_after": expires.isoformat(),
                },
            )
        )
    return found


def firing_message(c: Condition) -> tuple[str, str, dict[str, str]]:
    """Subject, body and attributes of the message that an alert fires."""
    body = f"{c.explanation}\n\n{json.dumps(_envelope(c.key, c.kind, 'firing', c.details))}"
    return f"[Tidings] ALERT {c.headline}", body, _attributes(c.key, c.kind, "firing")


def resolved_message(a: StoredAlert, now: datetime) -> tuple[str, str, dict[str, str]]:
    """Subject, body and attributes of the message that an alert is resolved."""
    lasted_min = (now - a.first_fired_at).total_seconds() / 60
    body = (
        f"Resolved: {a.alert_key} no longer holds (it fired at {a.first_fired_at.isoformat()}, "
        f"{lasted_min:.0f} minutes ago).\n\n"
        f"{json.dumps(_envelope(a.alert_key, a.kind, 'resolved', a.details))}"
    )
    return f"[Tidings] RESOLVED {a.alert_key}", body, _attributes(a.alert_key, a.kind, "resolved")


def _envelope(key: str, kind: str, status: str, details: Mapping[str, Any]) -> dict[str, Any]:
    return {"alert_key": key, "kind": str(kind), "status": status, "details": dict(details)}


def _attributes(key: str, kind: str, status: str) -> dict[str, str]:
    return {"alert_key": key, "kind": str(kind), "status": status}


@dataclass(frozen=True, slots=True)
class Dispatched:
    fired: tuple[str, ...]
    resolved: tuple[str, ...]
    # Notifications earlier runs left unpublished, published by this one (their alert keys).
    caught_up: tuple[str, ...] = ()


def dispatch(
    cursor: Callable[[], AbstractContextManager[Cursor]],
    notifier: Notifier,
    plan: AlertPlan,
    now: datetime,
) -> Dispatched:
    """Publish what earlier runs left in the outbox, then claim and send each alert and
    resolution of ``plan``.

    Only the run whose claim succeeds sends. A notification that cannot be published stays in
    the outbox for the next run; the first such error is raised after the others went.
    """
    outbox = _Outbox(cursor, notifier, now)
    with cursor() as cur:
        waiting = dal.take_waiting_notifications(
            cur, now=now, claim_s=PUBLISH_CLAIM_S, max_rows=MAX_WAITING_PER_RUN
        )
    caught_up = [
        w.alert_key for w in waiting if outbox.publish(w.outbox_id, w.alert_key, w.notification)
    ]
    fired: list[str] = []
    resolved: list[str] = []
    for condition in plan.fire:
        notification = Notification(*firing_message(condition))
        with cursor() as cur:
            outbox_id = dal.claim_alert_firing(
                cur,
                alert_key=condition.key,
                kind=condition.kind,
                details=condition.details,
                now=now,
                notification=notification,
                claim_s=PUBLISH_CLAIM_S,
            )
        if outbox_id is not None and outbox.publish(outbox_id, condition.key, notification):
            fired.append(condition.key)
    for alert in plan.resolve:
        notification = Notification(*resolved_message(alert, now))
        with cursor() as cur:
            outbox_id = dal.claim_alert_resolved(
                cur,
                alert_key=alert.alert_key,
                now=now,
                notification=notification,
                claim_s=PUBLISH_CLAIM_S,
            )
        if outbox_id is not None and outbox.publish(outbox_id, alert.alert_key, notification):
            resolved.append(alert.alert_key)
    if outbox.failures:
        raise outbox.failures[0]
    return Dispatched(tuple(fired), tuple(resolved), tuple(caught_up))


class _Outbox:
    """Publishes notifications of the outbox; each leaves it once published."""

    def __init__(
        self,
        cursor: Callable[[], AbstractContextManager[Cursor]],
        notifier: Notifier,
        now: datetime,
    ) -> None:
        self.cursor = cursor
        self.notifier = notifier
        self.now = now
        self.failures: list[Exception] = []

    def publish(self, outbox_id: int, key: str, notification: Notification) -> bool:
        try:
            self.notifier.publish(notification.subject, notification.body, notification.attributes)
        except Exception as exc:  # any transport error: due for the next run, keep going
            logger.exception("alert not published; will retry next run", extra={"alert_key": key})
            with self.cursor() as cur:
                dal.notification_not_published(cur, outbox_id=outbox_id, now=self.now)
            self.failures.append(exc)
            return False
        logger.info("alert published", extra={"alert_key": key, "subject": notification.subject})
        with self.cursor() as cur:
            dal.notification_published(cur, outbox_id=outbox_id)
        return True


def check_and_send(
    db: Database, notifier: Notifier, settings: AlertSettings, summary: QueueHealth, now: datetime
) -> Dispatched:
    """The health monitor's alert job: find the conditions that hold now, send the alerts that
    start and the resolutions of those that stopped, then move the monitor's checkpoint."""
    checkpoint = db.run(dal.monitor_checkpoint)
    # A row's dead_lettered_at is when its recording statement began; the statement may commit
    # up to a statement timeout later, after the previous run had looked. Looking back that much
    # further never misses one (at worst it counts one twice, and the alert resolves a run later).
    by_application = (
        None
        if checkpoint is None
        else db.run(
            lambda cur: health_dal.count_dead_lettered_between(
                cur,
                since=checkpoint - timedelta(milliseconds=settings.statement_timeout_ms),
                now=now,
            )
        )
    )
    attention = db.run(
        lambda cur: health_dal.endpoints_needing_attention(
            cur,
            slow_p95_ms=settings.slow_endpoint_p95_ms,
            min_samples=settings.slow_endpoint_min_samples,
        )
    )
    firing = db.run(dal.firing_alerts)
    conditions = current_conditions(
        oldest_undelivered_age_s=summary.oldest_undelivered_age_s,
        new_dead_letters=None if by_application is None else sum(by_application.values()),
        dead_letters=summary.dead_letters,
        endpoints=attention,
        settings=settings,
        new_dead_letters_by_application=by_application,
        oldest_undelivered_application=summary.oldest_undelivered_application,
    )
    dispatched = dispatch(db.cursor, notifier, plan_alerts(conditions, firing), now)
    # Only after the alerts went out: a run that failed to send re-counts the same dead letters.
    db.run(lambda cur: dal.save_monitor_checkpoint(cur, now))
    return dispatched
