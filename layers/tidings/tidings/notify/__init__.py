"""Operator alerts behind one interface (``Notifier``), and its SNS implementation.

The local notifiers (printed and kept in a file, or kept in memory) live in
``tidings.local.notifier``.
"""

from tidings.notify.base import MAX_MESSAGE_BYTES, MAX_SUBJECT_CHARS, Notifier, PublishedAlert
from tidings.notify.sns import SnsNotifier

__all__ = [
    "MAX_MESSAGE_BYTES",
    "MAX_SUBJECT_CHARS",
    "Notifier",
    "PublishedAlert",
    "SnsNotifier",
]
