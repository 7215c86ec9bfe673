"""Notifiers that stay on this machine: printed and kept as JSON lines, or kept in memory."""

from __future__ import annotations

import json
import sys
import threading
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from tidings.notify.base import PublishedAlert, clean_subject, validate_alert


def _build(subject: str, message: str, attributes: Mapping[str, str] | None) -> PublishedAlert:
    fields = dict(attributes or {})
    validate_alert(message, fields)
    return PublishedAlert(
        message_id=str(uuid.uuid4()),
        subject=clean_subject(subject),
        message=message,
        attributes=fields,
        published_at=datetime.now(UTC),
    )


class LocalNotifier:
    """Prints each alert to ``stream`` and appends it to ``path`` as one JSON line."""

    def __init__(self, path: Path | None, stream: TextIO = sys.stdout) -> None:
        self.path = path
        self.stream = stream
        self._lock = threading.Lock()

    def publish(
        self, subject: str, message: str, attributes: Mapping[str, str] | None = None
    ) -> str:
        alert = _build(subject, message, attributes)
        record = {
            "message_id": alert.message_id,
            "published_at": alert.published_at.isoformat(),
            "subject": alert.subject,
            "message": alert.message,
            "attributes": dict(alert.attributes),
        }
        with self._lock:
            self.stream.write(_readable(alert))
            self.stream.flush()
            if self.path is not None:
                with self.path.open("a", encoding="utf-8") as log:
                    log.write(json.dumps(record, ensure_ascii=False) + "\n")
        return alert.message_id


class MemoryNotifier:
    """Keeps every alert in ``published``, in order."""

    def __init__(self) -> None:
        self.published: list[PublishedAlert] = []
        self._lock = threading.Lock()

    def publish(
        self, subject: str, message: str, attributes: Mapping[str, str] | None = None
    ) -> str:
        alert = _build(subject, message, attributes)
        with self._lock:
            self.published.append(alert)
        return alert.message_id


def _readable(alert: PublishedAlert) -> str:
    lines = [f"[ALERT {alert.published_at:%Y-%m-%d %H:%M:%S}Z] {alert.subject}"]
    lines += [f"  {name}: {value}" for name, value in sorted(alert.attributes.items())]
    lines += ["  " + line for line in alert.message.splitlines()]
    return "\n".join(lines) + "\n\n"
