"""The notifier contract: publish one operator alert, get its message id back."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

# SNS limits: a subject of at most 100 characters without line breaks or control characters,
# and at most 256 KiB for the message together with its attributes.
MAX_SUBJECT_CHARS = 100
MAX_MESSAGE_BYTES = 262_144

_ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_CONTROL_CHARS = re.compile(r"[\x00-\x1f\x7f]+")


class Notifier(Protocol):
    def publish(
        self, subject: str, message: str, attributes: Mapping[str, str] | None = None
    ) -> str:
        """Publish an alert; return the message id the transport assigned."""
        ...


@dataclass(frozen=True, slots=True)
class PublishedAlert:
    """An alert as a local notifier keeps it."""

    message_id: str
    subject: str
    message: str
    published_at: datetime
    attributes: Mapping[str, str] = field(default_factory=dict)


def clean_subject(subject: str) -> str:
    """One line of at most 100 characters, as SNS requires; longer subjects end in '...'."""
    line = _CONTROL_CHARS.sub(" ", subject).strip()
    if not line:
        raise ValueError("an alert subject must contain visible text")
    if len(line) > MAX_SUBJECT_CHARS:
        line = line[: MAX_SUBJECT_CHARS - 3].rstrip() + "..."
    return line


def validate_alert(message: str, attributes: Mapping[str, str]) -> None:
    """Refuse what SNS would refuse, with the reason spelled out."""
    if not message:
        raise ValueError("an alert message must not be empty")
    size = len(message.encode("utf-8")) + sum(
        len(name.encode("utf-8")) + len(value.encode("utf-8")) for name, value in attributes.items()
    )
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(
            f"alert is {size} bytes with its attributes; SNS accepts at most {MAX_MESSAGE_BYTES}"
        )
    for name, value in attributes.items():
        if not _ATTRIBUTE_NAME.fullmatch(name) or name.lower().startswith(("aws.", "amazon.")):
            raise ValueError(
                f"alert attribute name {name!r} must be 1..256 of A-Z, a-z, 0-9, _ - . "
                "and must not start with AWS. or Amazon."
            )
        if not isinstance(value, str) or not value:
            raise ValueError(f"alert attribute {name!r} must have a non-empty string value")
