"""Alerts' data access: what is firing, claimed before it is sent, and the monitor's checkpoint
(see ``queries/alerts.sql``). Each function is one statement.
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
    cur: Cursor, *, alert_key: str, kind: str, details: Mapping[str, Any], now: datetime
) -> bool:
    """True when this caller turned the alert on (and so must send it)."""
    cur.execute(
        sql("claim_alert_firing"),
        {"alert_key": alert_key, "kind": kind, "details": json.dumps(details), "now": now},
    )
    return cur.fetchone() is not None


def claim_alert_resolved(cur: Cursor, *, alert_key: str, now: datetime) -> bool:
    """True when this caller turned the alert off (and so must send the resolution)."""
    cur.execute(sql("claim_alert_resolved"), {"alert_key": alert_key, "now": now})
    return cur.fetchone() is not None


def unclaim_alert(cur: Cursor, *, alert_key: str, firing: bool) -> None:
    cur.execute(sql("unclaim_alert"), {"alert_key": alert_key, "firing": firing})
