"""What the API answers, as typed, immutable dataclasses named and shaped as the schemas of
``openapi.json`` (a test holds each to its schema: the same fields, optional where the document
does not require them). Times are timezone-aware ``datetime``; a field the API adds later is
ignored until the client learns it.

Values with a fixed set (a message's ``status``, a token's ``scope``, an endpoint's ``lane``)
are plain strings, so that a value a newer API adds does not break an older client.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "Application",
    "ApplicationPage",
    "ApplicationQueue",
    "Attempt",
    "BatchResult",
    "CreatedEndpoint",
    "CreatedToken",
    "DeadLetterEndpoint",
    "DeadLetterReport",
    "Endpoint",
    "EndpointFigures",
    "EndpointHealth",
    "EndpointPage",
    "EventToSend",
    "EventType",
    "EventTypePage",
    "EventTypeVersion",
    "FailedClause",
    "FilterTestResult",
    "HourOfAttempts",
    "ImportResult",
    "Line",
    "LinePage",
    "Message",
    "MessageDetail",
    "MessagePage",
    "PortalLink",
    "PortalSession",
    "QueueSummary",
    "RecoverResult",
    "ReplayResult",
    "ResumedLines",
    "RevealedSecret",
    "RotatedSecret",
    "SendResult",
    "SessionApplication",
    "StatusReport",
    "Token",
    "TokenPage",
    "WaitingFor",
]


@dataclass(frozen=True, slots=True)
class EventToSend:
    """One event of a batch (``Client.send_events``)."""

    event_type: str
    payload: Any
    event_id: str | None = None
    endpoint_ids: list[int] | None = None
    channels: list[str] | None = None
    # For FIFO endpoints: the line the event joins (None: the line of events without a key).
    ordering_key: str | None = None


# -- events ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class SendResult:
    event_type: str
    event_id: str
    # False: the event id was sent before; these are the messages made then, nothing was made.
    created: bool
    message_ids: list[int]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchResult:
    results: list[SendResult]


# -- messages ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    id: int
    endpoint_id: int
    event_type: str
    event_id: str
    # pending, waiting (behind the head of its FIFO line), in_flight, delivered, failed
    # (awaiting a retry) or dead_letter
    status: str
    attempts: int
    max_attempts: int | None
    created_at: datetime
    next_attempt_at: datetime
    delivered_at: datetime | None
    dead_lettered_at: datetime | None
    last_error: str | None
    last_status_code: int | None
    last_response_ms: int | None
    # Sent by send-example: its event type's first example.
    example: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Attempt:
    attempt_number: int
    attempted_at: datetime
    status_code: int | None
    response_ms: int | None
    error_class: str | None
    response_excerpt: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitingFor:
    """What a message waits for, and until when."""

    reason: str
    until: datetime | None
    explanation: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MessageDetail(Message):
    payload: Any
    # The event's channels.
    channels: list[str]
    # The event's ordering key (FIFO endpoints keep order per key); None: it has none.
    ordering_key: str | None = None
    attempt_history: list[Attempt]
    waiting_for: WaitingFor


@dataclass(frozen=True, slots=True, kw_only=True)
class MessagePage:
    items: list[Message]
    next_cursor: str | None


# -- endpoints ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Endpoint:
    id: int
    url: str
    description: str
    enabled: bool
    disabled_reason: str | None
    disabled_at: datetime | None
    event_types: list[str]
    max_attempts: int | None
    retry_schedule: list[float]
    # endpoint (its own), max_attempts (the deployment's, cut to it) or default
    retry_schedule_source: str
    timeout_ms: int | None
    rate_limit_per_s: float | None
    # raw or envelope
    payload_format: str
    max_in_flight: int | None
    # fast or slow
    lane: str
    slow_until: datetime | None
    in_flight_limit: int | None
    previous_secret_expires_at: datetime | None
    # The receiver credentials, redacted.
    headers: dict[str, str] | None = None
    auth: dict[str, Any] | None = None
    tls_client_certificate: dict[str, Any] | None = None
    tls_server_ca: dict[str, Any] | None = None
    # The content filter (None: every event of its types) and the channels it subscribes to.
    filter: dict[str, Any] | None = None
    channels: list[str]
    # none, or fifo: each line of its messages (one per ordering key) delivered in order.
    ordering: str
    # For fifo: up to this many consecutive messages of a line in one request.
    fifo_batch_size: int
    # For fifo: continue (a dead letter lets its line go on) or pause (the line waits at it).
    fifo_on_dead_letter: str
    # How many of its lines are paused at a dead letter.
    paused_lines: int = 0
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatedEndpoint(Endpoint):
    # The signing secret, in this answer only.
    secret: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FailedClause:
    # The JSON pointer of the clause inside the filter ('' for the whole filter).
    path: str
    operator: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class FilterTestResult:
    matches: bool
    # The first clause that failed, when it does not match.
    failed: FailedClause | None
    # The PostgreSQL jsonpath predicate the filter compiles to.
    jsonpath: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointPage:
    items: list[Endpoint]
    next_cursor: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RotatedSecret:
    endpoint_id: int
    secret: str
    previous_secret_expires_at: datetime | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RevealedSecret:
    endpoint_id: int
    secret: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HourOfAttempts:
    hour: datetime
    delivered: int
    failed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointHealth:
    endpoint_id: int
    circuit_state: str
    consecutive_failures: int
    failure_threshold: int
    cooldown_s: float
    opened_at: datetime | None
    last_success_at: datetime | None
    last_failure_at: datetime | None
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    sample_count: int
    percentiles_at: datetime | None
    counts: dict[str, int]
    hourly: list[HourOfAttempts]


@dataclass(frozen=True, slots=True, kw_only=True)
class RecoverResult:
    endpoint_id: int
    since: datetime
    # The window's end: give it again to carry on an incomplete recovery.
    until: datetime
    matched: int
    requeued: int
    # False when the call ran out of time: call again with the same window.
    complete: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Line:
    """A FIFO line of an endpoint that has a message on its way, or is paused."""

    # None: the line of events without an ordering key.
    ordering_key: str | None
    # When it paused at its head, a dead letter (None: it is not paused).
    paused_at: datetime | None
    # The message at its front: the one being attempted, or the dead letter it paused at.
    head_message_id: int | None
    head_status: str | None
    head_attempts: int | None
    head_next_attempt_at: datetime | None
    # Messages waiting behind the head (counted up to 10000).
    waiting: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LinePage:
    items: list[Line]
    next_cursor: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ResumedLines:
    endpoint_id: int
    # The ordering keys of the lines resumed (None: the line of events without one).
    resumed: list[str | None]


# -- dead letters ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    requeued: int


# -- portal ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class PortalLink:
    # Opens the portal; the credential is after '#link='.
    url: str
    application: str
    read_only: bool
    expires_at: datetime
    token_id: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionApplication:
    id: int
    uid: str
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PortalSession:
    token: str
    read_only: bool
    expires_at: datetime
    application: SessionApplication


# -- applications ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Application:
    id: int
    uid: str
    name: str
    metadata: dict[str, str]
    default_payload_format: str | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplicationPage:
    items: list[Application]
    next_cursor: str | None


# -- tokens ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Token:
    id: int
    prefix: str
    # admin, producer, app, app_read or portal_link
    scope: str
    application: str | None
    description: str
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None
    exchanged_at: datetime | None = None
    portal_link_id: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class CreatedToken(Token):
    # The token, in this answer only.
    token: str


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenPage:
    items: list[Token]
    next_cursor: str | None


# -- the event-type catalog --------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class EventType:
    name: str
    description: str
    # A JSON Schema (draft 2020-12), or None.
    schema: Any
    examples: list[Any]
    deprecated: bool
    archived: bool
    validate_payloads: bool
    version: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class EventTypePage:
    items: list[EventType]
    next_cursor: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EventTypeVersion:
    name: str
    version: int
    schema: Any
    examples: list[Any]
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportResult:
    created: list[str]
    updated: list[str]
    unchanged: list[str]


# -- the operators' views ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueSummary:
    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letters: int
    delivered_recently: int
    failed_attempts_recently: int
    dead_lettered_recently: int
    oldest_undelivered_age_s: float | None
    oldest_undelivered_application: str | None
    delivery_mean_ms: float | None
    delivery_p95_ms: float | None
    open_circuits: int
    disabled_endpoints: int
    checked_at: datetime
    # "Recently" is the last recent_s seconds before checked_at.
    recent_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplicationQueue:
    app_uid: str
    pending: int
    awaiting_retry: int
    in_flight: int
    dead_letters: int
    oldest_undelivered_age_s: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointFigures:
    endpoint_id: int
    url: str
    description: str
    enabled: bool
    circuit: str
    total: int
    pending: int
    in_flight: int
    retrying: int
    delivered: int
    dead_letter: int
    attempts: int
    p95_ms: float | None
    app_uid: str
    lane: str
    slow_until: datetime | None
    max_in_flight: int | None
    in_flight_limit: int | None

    @property
    def settled(self) -> int:
        """Messages that reached an end state, or wait for a disabled endpoint to return."""
        held = 0 if self.enabled else self.pending + self.retrying
        return self.delivered + self.dead_letter + held


@dataclass(frozen=True, slots=True, kw_only=True)
class StatusReport:
    # The application the figures are of (None: every application).
    application: str | None
    summary: QueueSummary
    applications: list[ApplicationQueue]
    endpoints: list[EndpointFigures]


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterEndpoint:
    endpoint_id: int
    application: str
    # The endpoint's origin (scheme, host and port).
    url: str
    dead_letters: int
    top_error: str | None
    top_status_code: int | None
    first_at: datetime
    last_at: datetime
    mean_attempts: float
    # endpoint_disabled, endpoint_misconfigured, credentials_changed, rate_limited, redirected,
    # outage_cluster or slow_accumulation
    pattern: str
    # What to do about it.
    action: str


@dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterReport:
    since: datetime
    until: datetime
    total: int
    endpoints: list[DeadLetterEndpoint]

    @property
    def is_empty(self) -> bool:
        return not self.endpoints
