"""Channels: names an event carries and an endpoint may subscribe to, beside its event types.

An endpoint with channels receives an event of its types only when the event carries at least
one of them; an endpoint without channels receives the events of its types whatever their
channels. A channel name has the syntax of an application's uid (so an application's uid is
always a channel name), which ``tidings.enqueue_batch`` checks as well."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tidings.logic.errors import InvalidInput

MAX_CHANNELS = 10
# The same pattern as tidings.applications.uid and tidings.channel_names_valid (SQL).
CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
SYNTAX = (
    "1 to 200 characters of letters, digits, '.', '_', ':' and '-', starting with a letter or digit"
)


def check_channels(value: Any, field: str) -> list[str] | None:
    """``value`` as a list of channel names (None when it is None; an empty list is none)."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise InvalidInput("invalid_type", f"{field} must be a list of channel names", field)
    if len(value) > MAX_CHANNELS:
        raise InvalidInput("invalid_value", f"{field} holds at most {MAX_CHANNELS} channels", field)
    for name in value:
        if not isinstance(name, str) or not CHANNEL_NAME.fullmatch(name):
            raise InvalidInput("invalid_value", f"{field}: a channel name is {SYNTAX}", field)
    return list(value) or None
