"""Sending events: one, or a batch that is accepted whole or not at all."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg2
from pydantic import BaseModel

from tidings.config import Settings, get_settings
from tidings.dal import ingest as dal
from tidings.dal.connection import Database
from tidings.logic.channels import check_channels
from tidings.logic.errors import Conflict, InvalidInput, NotFound, PayloadTooLarge
from tidings.logic.lines import check_ordering_key
from tidings.logic.operational import refuse_operational
from tidings.logic.payload_validation import SentPayload, check_payloads
from tidings.logic.validation import MAX_TEXT, check_id, clean_text, payload_json

MAX_BATCH = 100
MAX_ENDPOINT_IDS = 100
_SQL_PREFIX = "tidings.enqueue: "
# Runs of a send whose key's event was pruned (its window over) while the send read it.
_WINDOW_RACE_RUNS = 3


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One event as a producer describes it; ``payload`` is any JSON value but null."""

    event_type: str
    payload: Any
    event_id: str | None = None
    endpoint_ids: Sequence[int] | None = None
    channels: Sequence[str] | None = None
    ordering_key: str | None = None


class SendResult(BaseModel):
    event_type: str
    event_id: str
    # False when the (event_type, event_id) key was seen before: nothing new was created.
    created: bool
    message_ids: list[int]


def send_event(
    db: Database,
    *,
    event_type: str,
    payload: Any,
    event_id: str | None = None,
    endpoint_ids: Sequence[int] | None = None,
    settings: Settings | None = None,
    application: str | None = None,
    channels: Sequence[str] | None = None,
    ordering_key: str | None = None,
) -> SendResult:
    """Fan one event out to its endpoints through ``tidings.enqueue``'s path; ``application``
    is the uid of the application it is sent to ('default' when None)."""
    cfg = settings or get_settings()
    refuse_operational(application, cfg.operational_application, "be sent events")
    spec = EventSpec(event_type, payload, event_id, endpoint_ids, channels, ordering_key)
    new = _checked(spec, "", cfg)
    sent = [SentPayload(new.event_type, payload, "payload")]

    def record(cur: Any) -> dal.Enqueued:
        check_payloads(cur, sent)
        return dal.enqueue_event(cur, new, application=application)

    outcome = _at_window_end(lambda: [db.run(record, transaction=True)], application)[0]
    return _result(new, outcome)


def send_events(
    db: Database,
    events: Sequence[EventSpec],
    *,
    settings: Settings | None = None,
    application: str | None = None,
) -> list[SendResult]:
    """Up to 100 events for one application (its uid; 'default' when None) in one transaction:
    all are recorded or none is."""
    if not events:
        raise InvalidInput("invalid_value", "events must hold at least one event", "events")
    if len(events) > MAX_BATCH:
        raise InvalidInput("too_many_events", f"a batch holds at most {MAX_BATCH} events", "events")
    cfg = settings or get_settings()
    refuse_operational(application, cfg.operational_application, "be sent events")
    new = [_checked(spec, f"events[{i}].", cfg) for i, spec in enumerate(events)]
    sent = [
        SentPayload(checked.event_type, spec.payload, f"events[{i}].payload")
        for i, (spec, checked) in enumerate(zip(events, new, strict=True))
    ]

    def record(cur: Any) -> list[dal.Enqueued]:
        # Every payload is checked before the batch is recorded: one that does not match its
        # type's schema refuses the whole batch.
        check_payloads(cur, sent)
        return dal.enqueue_batch(cur, new, application=application)

    outcomes = _at_window_end(lambda: db.run(record, transaction=True), application)
    return [_result(event, outcome) for event, outcome in zip(new, outcomes, strict=True)]


def _checked(spec: EventSpec, where: str, settings: Settings) -> dal.NewEvent:
    event_type = clean_text(spec.event_type, f"{where}event_type", max_length=MAX_TEXT)
    # Without a key of the producer's, every call is a new event; naming it here lets the
    # answer say which id it got.
    event_id = (
        str(uuid.uuid4())
        if spec.event_id is None
        else clean_text(spec.event_id, f"{where}event_id", max_length=MAX_TEXT)
    )
    endpoint_ids = None
    if spec.endpoint_ids is not None:
        field = f"{where}endpoint_ids"
        if isinstance(spec.endpoint_ids, str | bytes) or not isinstance(
            spec.endpoint_ids, Sequence
        ):
            raise InvalidInput("invalid_type", f"{field} must be a list of ids", field)
        if len(spec.endpoint_ids) > MAX_ENDPOINT_IDS:
            raise InvalidInput(
                "invalid_value", f"{field} names more than {MAX_ENDPOINT_IDS} endpoints", field
            )
        endpoint_ids = [check_id(i, field) for i in spec.endpoint_ids]
    channels = check_channels(spec.channels, f"{where}channels")
    ordering_key = check_ordering_key(spec.ordering_key, f"{where}ordering_key")
    text = payload_json(spec.payload, f"{where}payload", max_bytes=settings.max_payload_bytes)
    return dal.NewEvent(event_type, text, event_id, endpoint_ids, channels, ordering_key)


def _at_window_end(
    call: Callable[[], list[dal.Enqueued]], application: str | None
) -> list[dal.Enqueued]:
    """``call``'s outcomes, made again when a key's event was pruned (its idempotency window
    over) between the moment the key was found taken and the moment its event was read: the
    key is free now, so the next run records the event anew."""
    for _ in range(_WINDOW_RACE_RUNS - 1):
        outcomes: list[dal.Enqueued] = _calling_sql(call, application)
        if all(o.event_ref is not None for o in outcomes):
            return outcomes
    outcomes = _calling_sql(call, application)
    if any(o.event_ref is None for o in outcomes):
        raise RuntimeError("an event key's event kept disappearing while it was sent")
    return outcomes


def _calling_sql(call: Any, application: str | None) -> Any:
    # The SQL functions check their arguments too; their refusals become the same errors as ours.
    try:
        return call()
    except psycopg2.Error as exc:
        field = exc.diag.message_detail or None
        if exc.pgcode == "42501" and field == "application":
            # The operational application, named by the database's setting where this
            # process's TIDINGS_OPERATIONAL_APPLICATION names another (migration 0124).
            raise Conflict("operational_application", _sql_message(exc), field) from None
        if exc.pgcode not in ("22023", "23503", "54000"):
            raise
        message = _sql_message(exc)
        if exc.pgcode == "54000":
            # The payload limit, which the functions measure as we do: ours refused nothing
            # over it, but a number jsonb spells out in full (1e300) can make the stored text
            # longer than the text we measured.
            raise PayloadTooLarge("payload_too_large", message, field) from None
        if exc.pgcode == "23503" and field == "application":
            # Deleted since the request found it (or never there, on a direct call).
            raise NotFound("application", application or "default") from None
        code = "unknown_endpoint" if exc.pgcode == "23503" else "invalid_event"
        raise InvalidInput(code, message, field) from None


def _sql_message(exc: psycopg2.Error) -> str:
    return (exc.diag.message_primary or "bad event").removeprefix(_SQL_PREFIX)


def _result(new: dal.NewEvent, outcome: dal.Enqueued) -> SendResult:
    return SendResult(
        event_type=new.event_type,
        event_id=new.event_id or "",
        created=outcome.created,
        message_ids=list(outcome.message_ids),
    )
