"""Operator alerts behind one interface: SNS, a local printer and an in-memory list."""

from tidings.notify.base import MAX_MESSAGE_BYTES, MAX_SUBJECT_CHARS, Notifier, PublishedAlert
from tidings.notify.local import LocalNotifier, MemoryNotifier
from tidings.notify.sns import SnsNotifier

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_SUBJECT_CHARS",
    "LocalNotifier",
    "MemoryNotifier",
    "Notifier",
    "PublishedAlert",
    "SnsNotifier",
]
