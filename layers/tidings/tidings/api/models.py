"""Request and response bodies of the API; the OpenAPI document is generated from these."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    AwareDatetime,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
)

from tidings.logic.applications import UID_PATTERN, Application, ApplicationPage
from tidings.logic.channels import MAX_CHANNELS
from tidings.logic.channels import SYNTAX as CHANNEL_SYNTAX
from tidings.logic.endpoints import (
    MAX_MAX_IN_FLIGHT,
    MAX_RATE_LIMIT_PER_S,
    MIN_MAX_IN_FLIGHT,
    MIN_RATE_LIMIT_PER_S,
    CreatedEndpoint,
    Endpoint,
    EndpointHealth,
    EndpointPage,
    PayloadFormatName,
    RevealedSecret,
    RotatedSecret,
)
from tidings.logic.event_types import (
    MAX_DESCRIPTION,
    MAX_EXAMPLES,
    NAME_PATTERN,
    EventType,
    EventTypePage,
    EventTypeVersion,
    ImportResult,
)
from tidings.logic.events import SendResult
from tidings.logic.lines import LinePage, ResumedLines
from tidings.logic.messages import Attempt, Message, MessageDetail, MessagePage, MessageStatus
from tidings.logic.portal import DEFAULT_LINK_S, PortalLink, PortalSession
from tidings.logic.replay import ReplayResult
from tidings.logic.resend import RecoverResult
from tidings.logic.status import (
    ApplicationQueue,
    DeadLetterEndpoint,
    DeadLetterReport,
    EndpointFigures,
    QueueSummary,
    StatusReport,
)
from tidings.logic.tokens import CreatedToken, Token, TokenPage, TokenScope


def _not_null(value: Any) -> Any:
    if value is None:
        raise ValueError("the payload must not be null")
    return value


# What pydantic would read as seconds since 1970.
_NUMBER = re.compile(r"\s*[+-]?[0-9]*\.?[0-9]+([eE][+-]?[0-9]+)?\s*")


def _text_only(value: Any) -> Any:
    # A time is an RFC 3339 string, as documented; pydantic would also take a number of
    # seconds since 1970 (or a string of one, as a query parameter always is), which the
    # document does not allow. Other strings go on to pydantic, whose refusals name the fault
    # (timezone_aware, datetime_from_date_parsing).
    if not isinstance(value, str) or _NUMBER.fullmatch(value):
        raise ValueError("a time is an RFC 3339 string with its zone")
    return value


def _not_a_boolean(value: Any) -> Any:
    # A whole number in a body is a JSON number, never true or false: pydantic would read true
    # as 1 (strict ints would also refuse 5.0 and change the reasons other mistakes get).
    if isinstance(value, bool):
        raise ValueError("a number is required, not true or false")
    return value


# (The constraints come first, so that the document still states them as minimum and maximum.)
Id = Annotated[int, Field(ge=1, le=2**63 - 1), BeforeValidator(_not_a_boolean)]
RateLimit = Annotated[
    float,
    Field(
        ge=MIN_RATE_LIMIT_PER_S,
        le=MAX_RATE_LIMIT_PER_S,
        description="Requests per second to this endpoint, at least one a minute (1/60).",
    ),
]
MaxInFlight = Annotated[
    int,
    Field(
        ge=MIN_MAX_IN_FLIGHT,
        le=MAX_MAX_IN_FLIGHT,
        description="The endpoint's own cap on its deliveries in flight, in either lane (null: "
        "none of its own; in the slow lane the deployment's cap applies, 10 by default).",
    ),
    BeforeValidator(_not_a_boolean),
]
RetryDelay = Annotated[
    int, Field(ge=1, le=86_400, description="seconds"), BeforeValidator(_not_a_boolean)
]
RetrySchedule = Annotated[
    list[RetryDelay],
    Field(
        min_length=1,
        max_length=50,
        description="The waits between attempts, in whole seconds (1 s to 24 h each, 1 to 50 "
        "of them): len + 1 attempts, each retry drawn within its delay and the last no sooner "
        "than the whole schedule after the first. null: the deployment's schedule.",
    ),
]
MAX_ATTEMPTS_DEPRECATED = (
    "Deprecated: use retry_schedule. The deployment's schedule cut or extended to "
    "max_attempts - 1 delays; excludes retry_schedule."
)
Moment = Annotated[AwareDatetime, BeforeValidator(_text_only)]
EventTypeName = Annotated[str, Field(min_length=1, max_length=200)]
EventId = Annotated[str, Field(min_length=1, max_length=200)]
# Any JSON value except null: objects, arrays, strings, numbers, booleans.
Payload = Annotated[
    Any,
    AfterValidator(_not_null),
    Field(
        description="The event's JSON payload (not null), at most 256 KiB by default.",
        json_schema_extra={"not": {"type": "null"}},
    ),
]

__all__ = [
    "Application",
    "ApplicationPage",
    "ApplicationQueue",
    "Attempt",
    "BatchResult",
    "CatalogDocument",
    "CreateApplication",
    "CreateEndpoint",
    "CreateEventType",
    "CreatePortalLink",
    "CreateToken",
    "CreatedEndpoint",
    "CreatedToken",
    "DeadLetterEndpoint",
    "DeadLetterReport",
    "Endpoint",
    "EndpointFigures",
    "EndpointHealth",
    "EndpointPage",
    "ErrorBody",
    "ErrorDetail",
    "EventBatch",
    "EventType",
    "EventTypePage",
    "EventTypeVersion",
    "FailedClause",
    "FilterTest",
    "FilterTestResult",
    "ImportResult",
    "LinePage",
    "Message",
    "MessageDetail",
    "MessagePage",
    "MessageStatus",
    "Moment",
    "PortalLink",
    "PortalSession",
    "QueueSummary",
    "RecoverRequest",
    "RecoverResult",
    "ReplayRequest",
    "ReplayResult",
    "ResumeLines",
    "ResumedLines",
    "RevealedSecret",
    "RotatedSecret",
    "SendEvent",
    "SendExample",
    "SendResult",
    "StatusReport",
    "Token",
    "TokenPage",
    "UpdateApplication",
    "UpdateEndpoint",
    "UpdateEventType",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


Channel = Annotated[
    str,
    Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,199}$",
        description="A channel name: " + CHANNEL_SYNTAX,
    ),
]
FILTER_DESCRIPTION = (
    "A content filter over the payload (and $event_type): a JSON object in the MongoDB-like "
    "dialect ($eq $ne $gt $gte $lt $lte $in $nin $exists $and $or $not, dotted paths). Of the "
    "events of its types, the endpoint receives only those it matches."
)
Ordering = Literal["none", "fifo"]
OnDeadLetter = Literal["continue", "pause"]
FifoBatchSize = Annotated[int, Field(ge=1, le=100), BeforeValidator(_not_a_boolean)]
ORDERING_DESCRIPTION = (
    "fifo: each line of the endpoint's messages (one per ordering key; events without one share "
    "a line) is delivered one message at a time, in the order the events were accepted, the next "
    "once the one before is delivered or dead-lettered; absent: none (concurrent, no order)."
)
BATCH_DESCRIPTION = (
    "For fifo: up to this many consecutive messages of a line in one request, a JSON array of "
    "{id, type, timestamp, ordering_key, data} signed once (1 to 100; absent: 1)."
)
ON_DEAD_LETTER_DESCRIPTION = (
    "For fifo: continue (a dead letter lets its line go on; the default) or pause (the line "
    "waits at it until resumed or replayed)."
)
CHANNELS_DESCRIPTION = (
    "Channels to subscribe to (at most 10): the endpoint then receives an event of its types "
    "only if the event carries one of them."
)


class SendEvent(_Strict):
    event_type: EventTypeName
    payload: Payload
    event_id: EventId | None = Field(
        default=None,
        description="The producer's idempotency key: the same (event_type, event_id) again "
        "returns the original message ids and creates nothing.",
    )
    endpoint_ids: list[Id] | None = Field(
        default=None,
        max_length=100,
        description="Deliver to these endpoints instead of the subscribed ones (their "
        "filters and channels do not apply).",
    )
    channels: list[Channel] | None = Field(
        default=None,
        max_length=MAX_CHANNELS,
        description="The event's channels (at most 10): subscribers with channels receive it "
        "only if they share one.",
    )
    ordering_key: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="For FIFO endpoints: the line the event joins (a customer id, an account). "
        "Events of one key are delivered in the order they were accepted; different keys go "
        "side by side; events without one share a line.",
    )


class EventBatch(_Strict):
    events: list[SendEvent] = Field(min_length=1, max_length=100)


class BatchResult(BaseModel):
    results: list[SendResult]


class BasicAuth(_Strict):
    type: Literal["basic"]
    username: str = Field(min_length=1, max_length=1000)
    password: str = Field(min_length=1, max_length=4096)


class BearerAuth(_Strict):
    type: Literal["bearer"]
    token: str = Field(min_length=1, max_length=4096)


class OAuth2ClientCredentials(_Strict):
    type: Literal["oauth2_client_credentials"]
    token_url: str = Field(
        min_length=1,
        max_length=2048,
        description="Where the sender gets tokens; the same rules as an endpoint's URL",
    )
    client_id: str = Field(min_length=1, max_length=1000)
    client_secret: str = Field(min_length=1, max_length=4096)
    scope: str | None = Field(default=None, max_length=1000)
    audience: str | None = Field(default=None, max_length=1000)
    client_auth: Literal["basic", "post"] = Field(
        default="basic",
        description="How the client authenticates to the token URL: HTTP Basic (basic) or "
        "client_id and client_secret in the form (post)",
    )


ReceiverAuth = Annotated[
    BasicAuth | BearerAuth | OAuth2ClientCredentials, Field(discriminator="type")
]


class ClientCertificate(_Strict):
    certificate_pem: str = Field(
        min_length=1, max_length=65536, description="The certificate, then any intermediates"
    )
    private_key_pem: str = Field(
        min_length=1, max_length=65536, description="Its private key, unencrypted PEM"
    )


HEADERS_DESCRIPTION = (
    "Static headers sent with every request (at most 20; values stored encrypted, read back "
    "redacted). Names Tidings sets or that change framing are refused."
)
AUTH_DESCRIPTION = "How requests authenticate: Basic, a bearer token, or OAuth2 client credentials"
CLIENT_CERT_DESCRIPTION = (
    "A client certificate and key presented in the TLS handshake (mTLS); the key is never read back"
)
SERVER_CA_DESCRIPTION = (
    "PEM CA certificates the receiver's server certificate must chain to, instead of the "
    "public roots (host names are still checked)"
)


class CreateEndpoint(_Strict):
    url: str = Field(
        min_length=1,
        max_length=2048,
        description="http(s), no credentials, on a port the deployment allows (80 and 443 "
        "unless its endpointPorts say otherwise)",
    )
    description: str = Field(default="", max_length=1000)
    event_types: list[EventTypeName] = Field(
        default_factory=lambda: ["*"], min_length=1, max_length=100
    )
    rate_limit_per_s: RateLimit | None = None
    retry_schedule: RetrySchedule | None = None
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description=MAX_ATTEMPTS_DEPRECATED,
        json_schema_extra={"deprecated": True},
    )
    timeout_ms: int | None = Field(default=None, ge=100, le=60_000)
    payload_format: PayloadFormatName | None = Field(
        default=None,
        description="The body the endpoint receives: raw (the payload as sent) or envelope "
        "({type, timestamp, data}); absent: the application's default, else the deployment's",
    )
    max_in_flight: MaxInFlight | None = None
    ordering: Ordering | None = Field(default=None, description=ORDERING_DESCRIPTION)
    fifo_batch_size: FifoBatchSize | None = Field(default=None, description=BATCH_DESCRIPTION)
    fifo_on_dead_letter: OnDeadLetter | None = Field(
        default=None, description=ON_DEAD_LETTER_DESCRIPTION
    )
    filter: dict[str, Any] | None = Field(default=None, description=FILTER_DESCRIPTION)
    channels: list[Channel] | None = Field(
        default=None, max_length=MAX_CHANNELS, description=CHANNELS_DESCRIPTION
    )
    headers: dict[str, str] | None = Field(
        default=None, max_length=20, description=HEADERS_DESCRIPTION
    )
    auth: ReceiverAuth | None = Field(default=None, description=AUTH_DESCRIPTION)
    tls_client_certificate: ClientCertificate | None = Field(
        default=None, description=CLIENT_CERT_DESCRIPTION
    )
    tls_server_ca_pem: str | None = Field(
        default=None, max_length=65536, description=SERVER_CA_DESCRIPTION
    )


class UpdateEndpoint(_Strict):
    """Only the fields present change; a null override returns to the deployment default."""

    url: str | None = Field(default=None, min_length=1, max_length=2048)
    description: str | None = Field(default=None, max_length=1000)
    event_types: list[EventTypeName] | None = Field(default=None, min_length=1, max_length=100)
    rate_limit_per_s: RateLimit | None = None
    retry_schedule: RetrySchedule | None = None
    max_attempts: int | None = Field(
        default=None,
        ge=1,
        le=100,
        description=MAX_ATTEMPTS_DEPRECATED,
        json_schema_extra={"deprecated": True},
    )
    timeout_ms: int | None = Field(default=None, ge=100, le=60_000)
    payload_format: PayloadFormatName | None = Field(
        default=None, description="raw or envelope (a format must be named: null is refused)"
    )
    max_in_flight: MaxInFlight | None = None
    ordering: Ordering | None = Field(
        default=None,
        description=ORDERING_DESCRIPTION + " Switching takes effect for messages not yet "
        "attempted; null: none.",
    )
    fifo_batch_size: FifoBatchSize | None = Field(
        default=None, description=BATCH_DESCRIPTION + " null: 1."
    )
    fifo_on_dead_letter: OnDeadLetter | None = Field(
        default=None, description=ON_DEAD_LETTER_DESCRIPTION + " null: continue."
    )
    filter: dict[str, Any] | None = Field(
        default=None, description=FILTER_DESCRIPTION + " null removes it."
    )
    channels: list[Channel] | None = Field(
        default=None,
        max_length=MAX_CHANNELS,
        description=CHANNELS_DESCRIPTION + " null or [] removes them.",
    )
    headers: dict[str, str] | None = Field(
        default=None,
        max_length=20,
        description=HEADERS_DESCRIPTION + " Replaces the set; null removes it.",
    )
    auth: ReceiverAuth | None = Field(
        default=None, description=AUTH_DESCRIPTION + "; null removes it"
    )
    tls_client_certificate: ClientCertificate | None = Field(
        default=None, description=CLIENT_CERT_DESCRIPTION
    )
    tls_server_ca_pem: str | None = Field(
        default=None, max_length=65536, description=SERVER_CA_DESCRIPTION
    )
    enabled: bool | None = None


class ReplayRequest(_Strict):
    """Dead letters matching every given filter are requeued; at least one filter is needed."""

    message_ids: list[Id] | None = Field(default=None, min_length=1, max_length=1000)
    endpoint_id: Id | None = None
    since: Moment | None = Field(default=None, description="dead-lettered at or after")
    until: Moment | None = Field(default=None, description="dead-lettered before")


Uid = Annotated[str, Field(min_length=1, max_length=200, pattern=UID_PATTERN)]
MetadataKey = Annotated[str, Field(min_length=1, max_length=100)]
MetadataValue = Annotated[str, Field(max_length=1000)]
Metadata = Annotated[dict[MetadataKey, MetadataValue], Field(max_length=50)]


class CreateApplication(_Strict):
    uid: Uid = Field(
        description="Your own id for this customer: letters, digits and . _ : - (unique; "
        "a deleted application keeps its uid)"
    )
    name: str = Field(default="", max_length=200)
    metadata: Metadata = Field(default_factory=dict, description="Your own string pairs")
    default_payload_format: PayloadFormatName | None = Field(
        default=None,
        description="The body its new endpoints receive when they do not say (raw or envelope); "
        "absent or null: the deployment's default",
    )


class ResumeLines(_Strict):
    """Which paused lines to resume: those of the given ordering keys (null names the line of
    events without one); absent: every paused line of the endpoint."""

    ordering_keys: list[str | None] | None = Field(default=None, min_length=1, max_length=100)


class UpdateApplication(_Strict):
    """Only the fields present change; metadata is replaced whole."""

    name: str | None = Field(default=None, max_length=200)
    metadata: Metadata | None = None
    default_payload_format: PayloadFormatName | None = Field(
        default=None,
        description="The body its new endpoints receive when they do not say; null: back to "
        "the deployment's default. Existing endpoints keep theirs.",
    )


class CreateToken(_Strict):
    scope: TokenScope = Field(
        description="admin: everything; producer: send events, read messages; "
        "app: everything inside one application; app_read: read everything inside one "
        "application, change nothing, reveal no secret"
    )
    application: Uid | None = Field(
        default=None,
        description="The application (uid or id) of an app or app_read token; only for those",
    )
    description: str = Field(default="", max_length=200)
    expires_at: Moment | None = Field(
        default=None, description="When the token stops working (never, when absent)"
    )


class CreatePortalLink(_Strict):
    read_only: StrictBool = Field(
        default=False, description="Open a session that reads everything and changes nothing"
    )
    expires_in_s: int = Field(
        default=DEFAULT_LINK_S,
        ge=1,
        description="Seconds until the link expires unused (at most the deployment's "
        "TIDINGS_PORTAL_LINK_MAX_S, 7 days by default)",
    )


class RecoverRequest(_Strict):
    """The window of the messages to send again, by the time they were created."""

    since: Moment = Field(description="created at or after")
    until: Moment | None = Field(
        default=None, description="created before (default: now; the answer says which)"
    )


class ErrorDetail(BaseModel):
    code: str = Field(description="Stable, machine-readable reason, e.g. unknown_endpoint")
    message: str
    field: str | None = Field(default=None, description="The request field at fault, if one is")
    path: str | None = Field(
        default=None,
        description="For a filter refused: the JSON pointer of the clause at fault inside it",
    )
    operator: str | None = Field(
        default=None, description="For a filter refused: the operator at fault, if one is"
    )
    pointer: str | None = Field(
        default=None,
        description="A payload or example that does not match its event type's schema: the JSON "
        "pointer, inside the value at field, of the first place that does not",
    )
    keyword: str | None = Field(
        default=None, description="The schema keyword that failed there (type, required…)"
    )


class FilterTest(_Strict):
    filter: dict[str, Any] = Field(description=FILTER_DESCRIPTION)
    payload: Payload
    event_type: EventTypeName = Field(description="The type the event would have ($event_type)")


class FailedClause(BaseModel):
    path: str = Field(description="The JSON pointer of the clause inside the filter ('' is all)")
    operator: str | None = Field(description="Its operator ($gt, $or, …); null for a plain match")


class FilterTestResult(BaseModel):
    matches: bool
    failed: FailedClause | None = Field(
        description="When it does not match: the first clause that failed (an $or as a whole)"
    )
    jsonpath: str = Field(
        description="The PostgreSQL jsonpath predicate the filter compiles to, which the "
        'fan-out evaluates with the event type as $"event_type"'
    )


class ErrorBody(BaseModel):
    error: ErrorDetail


CatalogName = Annotated[
    str,
    Field(
        pattern=NAME_PATTERN,
        description="The event type: 1 to 200 letters, digits or . _ : ~ -",
        examples=["invoice.paid"],
    ),
]
PayloadSchema = Annotated[
    dict[str, Any] | StrictBool | None,
    Field(
        description="A JSON Schema (draft 2020-12) the type's payloads follow, checked against "
        "the meta-schema; references resolve inside it only ($defs). null: none.",
    ),
]
Examples = Annotated[
    list[Payload],
    Field(
        max_length=MAX_EXAMPLES,
        description="Example payloads, each checked against the schema; the first is what "
        "send-example sends",
    ),
]


class CreateEventType(_Strict):
    name: CatalogName
    description: str = Field(default="", max_length=MAX_DESCRIPTION)
    schema_: PayloadSchema = Field(default=None, alias="schema")
    examples: Examples = Field(default_factory=list)
    deprecated: StrictBool = False
    archived: StrictBool = Field(default=False, description="Hidden from the portal; still sent")
    validate_payloads: StrictBool = Field(
        default=False,
        description="Refuse (422) events of this type whose payload does not match the schema",
    )


class UpdateEventType(_Strict):
    """Only the fields present change; a new schema or new examples make a new version."""

    description: str | None = Field(default=None, max_length=MAX_DESCRIPTION)
    schema_: PayloadSchema = Field(default=None, alias="schema")
    examples: Examples | None = None
    deprecated: StrictBool | None = None
    archived: StrictBool | None = Field(
        default=None, description="Hidden from the portal; still sent"
    )
    validate_payloads: StrictBool | None = None


class SendExample(_Strict):
    event_type: CatalogName = Field(description="The catalogued type whose first example to send")


class CatalogDocument(BaseModel):
    """An OpenAPI 3.1 document: its webhooks are read, one event type per operation."""

    model_config = ConfigDict(extra="allow")

    openapi: str = Field(description="3.1.x", examples=["3.1.0"])
    webhooks: dict[str, Any] = Field(default_factory=dict)
