"""Message use cases: one message with its attempts, and filtered pages of messages."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from tidings.config import Settings, get_settings
from tidings.dal import messages as dal
from tidings.dal.applications import DEFAULT_APP_ID
from tidings.dal.connection import Database
from tidings.delivery import waiting
from tidings.logic.errors import InvalidInput, NotFound
from tidings.logic.validation import (
    MAX_TEXT,
    check_id,
    check_limit,
    clean_text,
    decode_cursor,
    encode_cursor,
)

MessageStatus = Literal["pending", "waiting", "in_flight", "delivered", "failed", "dead_letter"]
STATUSES: tuple[str, ...] = (
    "pending",
    "waiting",
    "in_flight",
    "delivered",
    "failed",
    "dead_letter",
)


class Message(BaseModel):
    id: int
    endpoint_id: int
    event_type: str
    event_id: str
    status: MessageStatus
    attempts: int
    max_attempts: int | None
    created_at: datetime
    next_attempt_at: datetime
    delivered_at: datetime | None
    dead_lettered_at: datetime | None
    last_error: str | None
    last_status_code: int | None
    last_response_ms: int | None
    # Sent by send-example: the first example of its event type's catalog entry.
    example: bool


class Attempt(BaseModel):
    attempt_number: int
    attempted_at: datetime
    status_code: int | None
    response_ms: int | None
    error_class: str | None
    response_excerpt: str | None


class WaitingFor(BaseModel):
    """What the message waits for and until when at the latest, if known."""

    reason: waiting.WaitReason
    until: datetime | None
    explanation: str


class MessageDetail(Message):
    payload: Any
    channels: list[str] = Field(description="The event's channels")
    ordering_key: str | None = Field(
        default=None, description="The event's ordering key (FIFO endpoints keep order per key)"
    )
    attempt_history: list[Attempt]
    waiting_for: WaitingFor


class MessagePage(BaseModel):
    items: list[Message]
    next_cursor: str | None


def get_message(
    db: Database,
    message_id: int,
    *,
    app_id: int = DEFAULT_APP_ID,
    settings: Settings | None = None,
) -> MessageDetail:
    """One message of an application, its payload, every attempt made so far (oldest first) and
    what it waits for (the deployment's slow lane from ``settings``)."""
    check_id(message_id, "message_id")
    cfg = settings or get_settings()

    def read(cur: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        return (
            dal.get_message(cur, app_id, message_id),
            dal.attempts_of_message(cur, app_id, message_id),
        )

    row, attempts = db.run(read, transaction=True)
    if row is None:
        raise NotFound("message", message_id)
    row["payload"] = json.loads(row["payload"])
    # The message's FIFO line, while its endpoint is FIFO.
    in_a_fifo_line = bool(row.pop("in_line")) and row.pop("ordering") == "fifo"
    line_facts = waiting.LineFacts(
        ordering_key=row["ordering_key"],
        head_id=row.pop("line_head_id"),
        head_status=row.pop("line_head_status"),
        paused_at=row.pop("line_paused_at"),
    )
    row.pop("ordering", None)
    line = line_facts if in_a_fifo_line else None
    wait = waiting.explain(
        waiting.WaitFacts(
            status=row["status"],
            attempts=row["attempts"],
            next_attempt_at=row["next_attempt_at"],
            leased=row.pop("leased"),
            last_error=row["last_error"],
            endpoint_enabled=row.pop("endpoint_enabled"),
            endpoint_deleted=row.pop("endpoint_deleted"),
            disabled_reason=row.pop("disabled_reason"),
            circuit_state=row.pop("circuit_state"),
            circuit_opened_at=row.pop("circuit_opened_at"),
            circuit_cooldown_s=row.pop("circuit_cooldown_s"),
            rate_limit_per_s=row.pop("rate_limit_per_s"),
            now=row.pop("db_now"),
            slow_lane=row.pop("slow_lane"),
            slow_until=row.pop("slow_until"),
            untried=row.pop("untried"),
            max_in_flight=row.pop("max_in_flight"),
            in_flight=row.pop("in_flight"),
            slow_lane_max_in_flight=cfg.slow_lane_max_in_flight,
            slow_lane_threshold_ms=cfg.slow_lane_threshold_ms,
            slow_lane_release_answers=cfg.slow_lane_release_answers,
            untried_max_in_flight=cfg.untried_max_in_flight,
            line=line,
            message_id=row["id"],
        )
    )
    return MessageDetail(
        **row,
        attempt_history=[Attempt(**a) for a in attempts],
        waiting_for=WaitingFor(reason=wait.reason, until=wait.until, explanation=wait.explanation),
    )


def list_messages(
    db: Database,
    *,
    status: str | None = None,
    endpoint_id: int | None = None,
    event_type: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = 50,
    app_id: int = DEFAULT_APP_ID,
) -> MessagePage:
    """An application's messages newest first, filtered by any of status, endpoint, event type
    and the time they were created (``since`` inclusive, ``until`` exclusive)."""
    check_limit(limit)
    if status is not None and status not in STATUSES:
        raise InvalidInput(
            "invalid_value", f"status must be one of {', '.join(STATUSES)}", "status"
        )
    if endpoint_id is not None:
        check_id(endpoint_id, "endpoint_id")
    if event_type is not None:
        clean_text(event_type, "event_type", max_length=MAX_TEXT)
    for name, moment in (("since", since), ("until", until)):
        if moment is not None and moment.tzinfo is None:
            raise InvalidInput("invalid_value", f"{name} must be a time with its zone", name)
    before_id = None if cursor is None else decode_cursor(cursor)
    rows = db.run(
        lambda cur: dal.list_messages(
            cur,
            app_id,
            before_id=before_id,
            limit=limit,
            status=status,
            endpoint_id=endpoint_id,
            event_type=event_type,
            since=since,
            until=until,
        )
    )
    items = [Message(**row) for row in rows[:limit]]
    more = len(rows) > limit
    return MessagePage(items=items, next_cursor=encode_cursor(items[-1].id) if more else None)
