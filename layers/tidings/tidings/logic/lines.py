"""Ordered delivery as the API and the CLI see it: an endpoint's ordering options, checked, and
its FIFO lines, listed and resumed.

An endpoint with ``ordering`` ``fifo`` receives the messages of each line (one per ordering key;
events without a key share one) one at a time, in the order the events were accepted: the next
is attempted once the one before it is delivered or dead-lettered. ``fifo_batch_size`` (1-100)
above 1 sends up to that many messages of a line in one request (``tidings.delivery.fifo``).
``fifo_on_dead_letter``: ``continue`` (a dead letter lets its line go on) or ``pause`` (the line
waits at it until a person resumes it, or replays it).
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from tidings.dal import endpoints as endpoints_dal
from tidings.dal import lines as dal
from tidings.dal.applications import DEFAULT_APP_ID
from tidings.dal.connection import Cursor, Database
from tidings.logic.errors import InvalidInput, NotFound
from tidings.logic.validation import check_id, check_limit, clean_text, text_problem

Ordering = Literal["none", "fifo"]
OnDeadLetter = Literal["continue", "pause"]
ORDERINGS: tuple[str, ...] = ("none", "fifo")
ON_DEAD_LETTER: tuple[str, ...] = ("continue", "pause")
MIN_BATCH_SIZE = 1
MAX_BATCH_SIZE = 100
# What each option is when not given, or given as null.
DEFAULTS: dict[str, Any] = {
    "ordering": "none",
    "fifo_batch_size": 1,
    "fifo_on_dead_letter": "continue",
}
OPTIONS = tuple(DEFAULTS)
MAX_ORDERING_KEY_LENGTH = 200
# A line's waiting messages are counted up to this many.
WAITING_COUNT_LIMIT = 10_000


def check_option(name: str, value: Any) -> Any:
    """An ordering option's value, checked; None stands for its default."""
    if value is None:
        return DEFAULTS[name]
    if name == "fifo_batch_size":
        if isinstance(value, bool) or not isinstance(value, int):
            raise InvalidInput("invalid_type", f"{name} must be a whole number", name)
        if not MIN_BATCH_SIZE <= value <= MAX_BATCH_SIZE:
            raise InvalidInput(
                "invalid_value", f"{name} must be {MIN_BATCH_SIZE} to {MAX_BATCH_SIZE}", name
            )
        return value
    allowed = ORDERINGS if name == "ordering" else ON_DEAD_LETTER
    if value not in allowed:
        raise InvalidInput("invalid_value", f"{name} must be one of {', '.join(allowed)}", name)
    return value


def check_ordering_key(value: Any, field: str = "ordering_key") -> str | None:
    """An event's ordering key: None, or 1 to 200 characters PostgreSQL can store."""
    if value is None:
        return None
    return clean_text(value, field, max_length=MAX_ORDERING_KEY_LENGTH)


def reorder_if_changed(cur: Cursor, endpoint_id: int, changes: Sequence[str]) -> None:
    """After an endpoint update in the same transaction: when its ordering was set, its
    messages not yet attempted move into (or out of) its lines."""
    if "ordering" in changes:
        dal.reorder_endpoint(cur, endpoint_id)


class Line(BaseModel):
    """A FIFO line of an endpoint that has a message on its way, or is paused."""

    ordering_key: str | None = Field(
        description="The events' ordering key; null for the line of events without one."
    )
    paused_at: datetime | None = Field(
        description="When the line paused at its head, a dead letter (fifo_on_dead_letter "
        "pause): nothing more of it is sent until it is resumed or the dead letter replayed."
    )
    head_message_id: int | None = Field(
        description="The message at the front of the line: the one being attempted (or the "
        "dead letter it paused at)."
    )
    head_status: str | None
    head_attempts: int | None
    head_next_attempt_at: datetime | None
    waiting: int = Field(
        description=f"Messages waiting behind the head (counted up to {WAITING_COUNT_LIMIT})."
    )


class LinePage(BaseModel):
    items: list[Line]
    next_cursor: str | None


class ResumedLines(BaseModel):
    endpoint_id: int
    resumed: list[str | None] = Field(
        description="The ordering keys of the lines resumed (null: the line of events without one)."
    )


def list_lines(
    db: Database,
    endpoint_id: int,
    *,
    paused: bool = False,
    cursor: str | None = None,
    limit: int = 50,
    app_id: int = DEFAULT_APP_ID,
) -> LinePage:
    """An endpoint's lines with a head (or only the paused ones), by ordering key."""
    check_id(endpoint_id, "endpoint_id")
    check_limit(limit)
    after = None if cursor is None else _decode_key_cursor(cursor)

    def read(cur: Cursor) -> list[dict[str, Any]] | None:
        if endpoints_dal.get_endpoint(cur, app_id, endpoint_id) is None:
            return None
        return dal.list_lines(
            cur,
            app_id,
            endpoint_id,
            after_key=after,
            limit=limit,
            paused_only=paused,
            count_limit=WAITING_COUNT_LIMIT,
        )

    rows = db.run(read)
    if rows is None:
        raise NotFound("endpoint", endpoint_id)
    items = [Line(**{**row, "ordering_key": row["ordering_key"] or None}) for row in rows[:limit]]
    more = len(rows) > limit
    return LinePage(
        items=items,
        next_cursor=_encode_key_cursor(rows[limit - 1]["ordering_key"]) if more else None,
    )


def resume_lines(
    db: Database,
    endpoint_id: int,
    *,
    ordering_keys: Sequence[str | None] | None = None,
    app_id: int = DEFAULT_APP_ID,
) -> ResumedLines:
    """Resume an endpoint's paused lines: every one, or those of ``ordering_keys`` (None in it
    names the line of events without a key). A line that is not paused is left alone."""
    check_id(endpoint_id, "endpoint_id")
    keys = None
    if ordering_keys is not None:
        keys = [check_ordering_key(k, "ordering_keys") or "" for k in ordering_keys]

    def resume(cur: Cursor) -> list[str] | None:
        if endpoints_dal.get_endpoint(cur, app_id, endpoint_id) is None:
            return None
        return dal.resume_lines(cur, endpoint_id, keys)

    resumed = db.run(resume, transaction=True)
    if resumed is None:
        raise NotFound("endpoint", endpoint_id)
    return ResumedLines(endpoint_id=endpoint_id, resumed=[k or None for k in resumed])


def _encode_key_cursor(key: str) -> str:
    return base64.urlsafe_b64encode(f"key:{key}".encode()).decode().rstrip("=")


def _decode_key_cursor(cursor: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("utf-8")
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raw = ""
    prefix, _, key = raw.partition(":")
    if prefix != "key" or text_problem(key):
        raise InvalidInput("invalid_cursor", "the cursor is not one this API returned", "cursor")
    return key
