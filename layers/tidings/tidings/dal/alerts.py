"""Alerts' data access: what is firing, claimed together with its notification in the outbox,
the outbox itself, and the monitor's checkpoint (see ``queries/alerts.sql``). Each function is
one statement.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql


@dataclass(frozen=True, slots=True)
class StoredAlert:
    alert_key: str
    kind: str
    first_fired_at: datetime
    details: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Notification:
    """What to publish for an alert or its resolution."""

    subject: str
    body: str
    attributes: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class WaitingNotification:
    """A notification of the outbox that an earlier run did not publish."""

    outbox_id: int
    alert_key: str
    notification: Notification
    tries: int


def monitor_checkpoint(cur: Cursor) -> datetime | None:
    cur.execute(sql("monitor_checkpoint"))
    row = cur.fetchone()
    return None if row is None else row[0]


def save_monitor_checkpoint(cur: Cursor, checked_at: datetime) -> None:
    cur.execute(sql("save_monitor_checkpoint"), {"checked_at": checked_at})


def firing_alerts(cur: Cursor) -> list[StoredAlert]:
    cur.execute(sql("firing_alerts"))
    return [StoredAlert(**row) for row in fetch_dicts(cur)]


def claim_alert_firing(
    cur: Cursor,
    *,
    alert_key: str,
    kind: str,
    details: Mapping[str, Any],
    now: datetime,
    notification: Notification,
    claim_s: float,
) -> int | None:
    """When this caller turned the alert on (and so must send it): the outbox entry holding
    its notification; else None."""
    cur.execute(
        sql("claim_alert_firing"),
        {
            "alert_key": alert_key,
            "kind": kind,
            "details": json.dumps(details),
            "now": now,
            "claim_s": claim_s,
            **_columns(notification),
        },
    )
    row = cur.fetchone()
    return None if row is None else int(row[0])


def claim_alert_resolved(
    cur: Cursor, *, alert_key: str, now: datetime, notification: Notification, claim_s: float
) -> int | None:
    """When this caller turned the alert off (and so must send the resolution): the outbox
    entry holding it; else None."""
    cur.execute(
        sql("claim_alert_resolved"),
        {"alert_key": alert_key, "now": now, "claim_s": claim_s, **_columns(notification)},
    )
    row = cur.fetchone()
    return None if row is None else int(row[0])


def take_waiting_notifications(
    cur: Cursor, *, now: datetime, claim_s: float, max_rows: int
) -> list[WaitingNotification]:
    cur.execute(
        sql("take_waiting_notifications"), {"now": now, "claim_s": claim_s, "max_rows": max_rows}
    )
    return sorted(
        (
            WaitingNotification(
                outbox_id=row["id"],
                alert_key=row["alert_key"],
                notification=Notification(row["subject"], row["body"], row["attributes"]),
                tries=row["tries"],
            )
            for row in fetch_dicts(cur)
        ),
        key=lambda w: w.outbox_id,
    )


def notification_published(cur: Cursor, *, outbox_id: int) -> None:
    cur.execute(sql("notification_published"), {"outbox_id": outbox_id})


def notification_not_published(cur: Cursor, *, outbox_id: int, now: datetime) -> None:
    cur.execute(sql("notification_not_published"), {"outbox_id": outbox_id, "now": now})


def _columns(notification: Notification) -> dict[str, Any]:
    return {
        "subject": notification.subject,
        "body": notification.body,
        "attributes": json.dumps(dict(notification.attributes)),
    }
