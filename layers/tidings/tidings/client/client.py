"""``Client``: every operation of the Tidings API as a method, over ``requests``.

One method per operation of ``openapi.json`` (a test holds the two together), named after it.
What lives in an application (events, messages, endpoints, replay, portal links) is asked in the
client's application: the default one, or the one ``Client(app=…)`` or ``client.in_app(…)``
names. Applications, tokens and the operators' views name their application themselves.

Retries: a request that is safe to send again is retried after a connection failure, a timeout,
or an answer saying to try later (429, 502, 503, 504), with exponential backoff and jitter
(urllib3's ``Retry``, honouring ``Retry-After``): every GET, an event or a batch that carries its
event ids (the API's idempotency key), and an endpoint's recovery (the API makes repeating it
harmless). Any other request is sent again only when it could not be sent at all (the connection
was refused before it), never after it may have reached the API.

Nothing is logged but each request's method, path and status (logger ``tidings.client``, at
DEBUG); never a token, a secret or a body.
"""

from __future__ import annotations

import enum
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from requests.auth import AuthBase
from urllib3.util.retry import Retry

from tidings import __version__
from tidings.client.decoding import NotTheDocumentedShape, decode
from tidings.client.errors import ApiUnreachable, UnexpectedAnswer, error_for
from tidings.client.models import (
    Application,
    ApplicationPage,
    BatchResult,
    CreatedEndpoint,
    CreatedToken,
    DeadLetterReport,
    Endpoint,
    EndpointHealth,
    EndpointPage,
    EventToSend,
    EventType,
    EventTypePage,
    EventTypeVersion,
    FilterTestResult,
    ImportResult,
    Line,
    LinePage,
    Message,
    MessageDetail,
    MessagePage,
    PortalLink,
    PortalSession,
    RecoverResult,
    ReplayResult,
    ResumedLines,
    RevealedSecret,
    RotatedSecret,
    SendResult,
    StatusReport,
    Token,
    TokenPage,
)

T = TypeVar("T")
logger = logging.getLogger("tidings.client")

# The variables ``Client.from_env`` (and the command line's remote mode) read.
API_URL_VARIABLE = "TIDINGS_API_URL"
TOKEN_VARIABLE = "TIDINGS_TOKEN"  # noqa: S105 - the variable's name
# API Gateway gives an integration 29 s; a little more lets its own timeout answer first.
DEFAULT_TIMEOUT_S = 35.0
CONNECT_TIMEOUT_S = 10.0
DEFAULT_RETRIES = 4
# Waits of about 0.5, 1, 2, 4 s, each with up to 0.5 s of jitter, at most 20 s.
DEFAULT_BACKOFF_S = 0.5
MAX_BACKOFF_S = 20.0
# Answers that say the same request may succeed later: throttled, or the API's integration or
# database busy or out of reach. (500 is a fault, not a reason to try again.)
TRY_LATER = frozenset({429, 502, 503, 504})
PAGE_SIZE = 100


class _Unset(enum.Enum):
    UNSET = "unset"


# A field ``update_…`` leaves as it is (None is a value: back to the deployment's default).
UNSET = _Unset.UNSET


class Client:
    """The Tidings API at ``api_url`` (the stack's ``IngestApiUrl`` output, ending in ``/v1/``,
    or the address before it, such as ``http://127.0.0.1:8080`` for ``tidings dev``), with the
    bearer ``token``, acting in the application ``app`` (its uid or id; None: the default one).

    Use it as a context manager, or ``close()`` it, to release its connections.
    """

    def __init__(
        self,
        api_url: str,
        token: str,
        *,
        app: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retries: int = DEFAULT_RETRIES,
        backoff_s: float = DEFAULT_BACKOFF_S,
    ) -> None:
        self._root = _api_root(api_url)
        if not token or any(c.isspace() for c in token):
            raise ValueError("the token must be given, without spaces")
        if app is not None and not app:
            raise ValueError("app must name an application, or be None for the default one")
        self._app = app
        self._timeout = (CONNECT_TIMEOUT_S, timeout_s)
        bearer = _Bearer(token)
        self._safe = _session(bearer, _retry(retries, backoff_s, on_answers=True))
        self._once = _session(bearer, _retry(retries, backoff_s, on_answers=False))

    @classmethod
    def from_env(
        cls, environ: Mapping[str, str] | None = None, *, app: str | None = None, **options: Any
    ) -> Client:
        """The API at ``TIDINGS_API_URL``, with the token in ``TIDINGS_TOKEN``."""
        env = os.environ if environ is None else environ
        missing = [name for name in (API_URL_VARIABLE, TOKEN_VARIABLE) if not env.get(name)]
        if missing:
            raise ValueError(f"set {' and '.join(missing)} to reach the API")
        return cls(env[API_URL_VARIABLE], env[TOKEN_VARIABLE], app=app, **options)

    def in_app(self, app: str | None) -> Client:
        """This client, acting in the application ``app`` (None: the default one); it shares
        this client's connections."""
        if app is not None and not app:
            raise ValueError("app must name an application, or be None for the default one")
        other = object.__new__(Client)
        other.__dict__.update(self.__dict__)
        other._app = app
        return other

    @property
    def api_url(self) -> str:
        return self._root

    @property
    def app(self) -> str | None:
        return self._app

    def __repr__(self) -> str:
        return f"Client({self._root!r}, app={self._app!r})"

    def close(self) -> None:
        self._safe.close()
        self._once.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- events --------------------------------------------------------------------------------

    def send_event(
        self,
        event_type: str,
        payload: Any,
        *,
        event_id: str | None = None,
        endpoint_ids: Sequence[int] | None = None,
        channels: Sequence[str] | None = None,
        ordering_key: str | None = None,
    ) -> SendResult:
        """Record an event for the application's subscribed endpoints (or ``endpoint_ids``).
        With an ``event_id`` (your idempotency key) it is retried when that is safe, and the
        same id again returns the first call's messages (``created`` False). ``channels``: the
        event's channels (subscribers with channels receive it only if they share one).
        ``ordering_key``: for FIFO endpoints, the line it joins (events of one key are delivered
        in the order they were accepted; events without one share a line)."""
        event = EventToSend(
            event_type,
            payload,
            event_id,
            _ids(endpoint_ids),
            None if channels is None else list(channels),
            ordering_key,
        )
        body = _event_body(event)
        return self._call(
            SendResult, "POST", self._in_app("/events"), body=body, safe=event_id is not None
        )

    def send_events(self, events: Sequence[EventToSend]) -> list[SendResult]:
        """Record up to 100 events in one transaction: all of them or none. Retried when safe:
        when every event carries its ``event_id``."""
        body = {"events": [_event_body(e) for e in events]}
        safe = bool(events) and all(e.event_id is not None for e in events)
        batch = self._call(BatchResult, "POST", self._in_app("/events/batch"), body=body, safe=safe)
        return batch.results

    # -- filters -------------------------------------------------------------------------------

    def test_filter(
        self, filter: Mapping[str, Any], payload: Any, event_type: str
    ) -> FilterTestResult:
        """Whether a content filter matches an event of this payload and type, as the fan-out
        decides; when not, the clause that failed first. Reads and changes nothing."""
        body = {"filter": dict(filter), "payload": payload, "event_type": event_type}
        return self._call(FilterTestResult, "POST", "/v1/filters/test", body=body, safe=True)

    # -- messages ------------------------------------------------------------------------------

    def list_messages(
        self,
        *,
        status: str | None = None,
        endpoint_id: int | None = None,
        event_type: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        cursor: str | None = None,
        limit: int | None = None,
    ) -> MessagePage:
        """A page of messages, newest first; ``since``/``until`` bound their creation time."""
        query = {
            "status": status,
            "endpoint_id": endpoint_id,
            "event_type": event_type,
            "since": _time(since),
            "until": _time(until),
            "cursor": cursor,
            "limit": limit,
        }
        return self._call(MessagePage, "GET", self._in_app("/messages"), query=query)

    def iter_messages(
        self,
        *,
        status: str | None = None,
        endpoint_id: int | None = None,
        event_type: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> Iterator[Message]:
        """Every message that matches, newest first, a page at a time."""
        cursor: str | None = None
        while True:
            page = self.list_messages(
                status=status,
                endpoint_id=endpoint_id,
                event_type=event_type,
                since=since,
                until=until,
                cursor=cursor,
                limit=PAGE_SIZE,
            )
            yield from page.items
            cursor = page.next_cursor
            if cursor is None:
                return

    def get_message(self, message_id: int) -> MessageDetail:
        """A message with its payload, its attempts and what it waits for."""
        return self._call(MessageDetail, "GET", self._in_app(f"/messages/{_id(message_id)}"))

    def resend_message(self, message_id: int) -> Message:
        """Deliver a delivered or dead-lettered message again (fresh attempts, same
        webhook-id)."""
        path = self._in_app(f"/messages/{_id(message_id)}/resend")
        return self._call(Message, "POST", path)

    # -- endpoints -----------------------------------------------------------------------------

    def create_endpoint(
        self,
        url: str,
        *,
        event_types: Sequence[str] | None = None,
        description: str | None = None,
        rate_limit_per_s: float | None = None,
        retry_schedule: Sequence[int] | None = None,
        timeout_ms: int | None = None,
        payload_format: str | None = None,
        max_in_flight: int | None = None,
        headers: Mapping[str, str] | None = None,
        auth: Mapping[str, Any] | None = None,
        tls_client_certificate: Mapping[str, str] | None = None,
        tls_server_ca_pem: str | None = None,
        max_attempts: int | None = None,
        filter: Mapping[str, Any] | None = None,
        channels: Sequence[str] | None = None,
        ordering: str | None = None,
        fifo_batch_size: int | None = None,
        fifo_on_dead_letter: str | None = None,
    ) -> CreatedEndpoint:
        """A new endpoint (``event_types`` default to every type, ``*``). Its signing secret is
        in this answer only. What is left None takes the API's default. ``filter``: a content
        filter over the payload; ``channels``: those it subscribes to. ``ordering``: none or
        fifo (each line of its messages, one per ordering key, delivered in order);
        ``fifo_batch_size`` (1 to 100) and ``fifo_on_dead_letter`` (continue or pause) go with
        fifo."""
        given = {
            "url": url,
            "event_types": None if event_types is None else list(event_types),
            "description": description,
            "rate_limit_per_s": rate_limit_per_s,
            "retry_schedule": None if retry_schedule is None else list(retry_schedule),
            "timeout_ms": timeout_ms,
            "payload_format": payload_format,
            "max_in_flight": max_in_flight,
            "headers": None if headers is None else dict(headers),
            "auth": None if auth is None else dict(auth),
            "tls_client_certificate": (
                None if tls_client_certificate is None else dict(tls_client_certificate)
            ),
            "tls_server_ca_pem": tls_server_ca_pem,
            "max_attempts": max_attempts,
            "filter": None if filter is None else dict(filter),
            "channels": None if channels is None else list(channels),
            "ordering": ordering,
            "fifo_batch_size": fifo_batch_size,
            "fifo_on_dead_letter": fifo_on_dead_letter,
        }
        body = {name: value for name, value in given.items() if value is not None}
        return self._call(CreatedEndpoint, "POST", self._in_app("/endpoints"), body=body)

    def list_endpoints(
        self, *, cursor: str | None = None, limit: int | None = None
    ) -> EndpointPage:
        query = {"cursor": cursor, "limit": limit}
        return self._call(EndpointPage, "GET", self._in_app("/endpoints"), query=query)

    def iter_endpoints(self) -> Iterator[Endpoint]:
        """Every endpoint of the application, by ascending id."""
        return _pages(lambda cursor: self.list_endpoints(cursor=cursor, limit=PAGE_SIZE))

    def get_endpoint(self, endpoint_id: int) -> Endpoint:
        """An endpoint (never its secret), with the retry schedule its messages follow."""
        return self._call(Endpoint, "GET", self._in_app(f"/endpoints/{_id(endpoint_id)}"))

    def update_endpoint(
        self,
        endpoint_id: int,
        *,
        url: str | _Unset = UNSET,
        description: str | _Unset = UNSET,
        event_types: Sequence[str] | _Unset = UNSET,
        enabled: bool | _Unset = UNSET,
        rate_limit_per_s: float | _Unset | None = UNSET,
        retry_schedule: Sequence[int] | _Unset | None = UNSET,
        timeout_ms: int | _Unset | None = UNSET,
        payload_format: str | _Unset = UNSET,
        max_in_flight: int | _Unset | None = UNSET,
        headers: Mapping[str, str] | _Unset | None = UNSET,
        auth: Mapping[str, Any] | _Unset | None = UNSET,
        tls_client_certificate: Mapping[str, str] | _Unset | None = UNSET,
        tls_server_ca_pem: str | _Unset | None = UNSET,
        max_attempts: int | _Unset | None = UNSET,
        filter: Mapping[str, Any] | _Unset | None = UNSET,
        channels: Sequence[str] | _Unset | None = UNSET,
        ordering: str | _Unset | None = UNSET,
        fifo_batch_size: int | _Unset | None = UNSET,
        fifo_on_dead_letter: str | _Unset | None = UNSET,
    ) -> Endpoint:
        """Change the fields given; None returns an override to the deployment's default (or
        removes a credential, the filter or the channels; sets an ordering option's default:
        none, 1, continue). A change of ``ordering`` applies to the messages not yet
        attempted."""
        given: dict[str, Any] = {
            "url": url,
            "description": description,
            "event_types": event_types,
            "enabled": enabled,
            "rate_limit_per_s": rate_limit_per_s,
            "retry_schedule": retry_schedule,
            "timeout_ms": timeout_ms,
            "payload_format": payload_format,
            "max_in_flight": max_in_flight,
            "headers": headers,
            "auth": auth,
            "tls_client_certificate": tls_client_certificate,
            "tls_server_ca_pem": tls_server_ca_pem,
            "max_attempts": max_attempts,
            "filter": filter,
            "channels": channels,
            "ordering": ordering,
            "fifo_batch_size": fifo_batch_size,
            "fifo_on_dead_letter": fifo_on_dead_letter,
        }
        body = {name: _plain(value) for name, value in given.items() if value is not UNSET}
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}")
        return self._call(Endpoint, "PATCH", path, body=body)

    def delete_endpoint(self, endpoint_id: int) -> None:
        """Delete an endpoint; its messages and attempts are kept."""
        self._send("DELETE", self._in_app(f"/endpoints/{_id(endpoint_id)}"))

    def rotate_secret(self, endpoint_id: int) -> RotatedSecret:
        """A new signing secret; the earlier ones keep signing for their overlap."""
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}/rotate-secret")
        return self._call(RotatedSecret, "POST", path)

    def reveal_secret(self, endpoint_id: int) -> RevealedSecret:
        """The endpoint's current signing secret."""
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}/secret")
        return self._call(RevealedSecret, "GET", path)

    def endpoint_health(self, endpoint_id: int) -> EndpointHealth:
        """Circuit state, failures, latency percentiles, counts, the last 24 hours by hour."""
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}/health")
        return self._call(EndpointHealth, "GET", path)

    def recover_endpoint(
        self, endpoint_id: int, *, since: datetime, until: datetime | None = None
    ) -> RecoverResult:
        """Send again every message of the endpoint created in [since, until) that is not
        delivered. A call stops after about 20 s: when ``complete`` is False, call again with
        the answer's ``until`` (``recover_endpoint_fully`` does)."""
        body = {"since": _time(since), **({"until": _time(until)} if until is not None else {})}
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}/recover")
        return self._call(RecoverResult, "POST", path, body=body, safe=True)

    def recover_endpoint_fully(
        self, endpoint_id: int, *, since: datetime, until: datetime | None = None
    ) -> Iterator[RecoverResult]:
        """``recover_endpoint`` again and again over the same window until it is complete;
        yields each call's answer (the last one's ``complete`` is True)."""
        while True:
            done = self.recover_endpoint(endpoint_id, since=since, until=until)
            yield done
            if done.complete:
                return
            until = done.until

    # -- FIFO lines ----------------------------------------------------------------------------

    def list_lines(
        self,
        endpoint_id: int,
        *,
        paused: bool = False,
        cursor: str | None = None,
        limit: int | None = 50,
    ) -> LinePage:
        """A page of a FIFO endpoint's lines with a message on its way, or paused (``paused``:
        only those), by ordering key: each line's head and how many messages wait behind it."""
        query = {"paused": "true" if paused else None, "cursor": cursor, "limit": limit}
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}/lines")
        return self._call(LinePage, "GET", path, query=query)

    def iter_lines(self, endpoint_id: int, *, paused: bool = False) -> Iterator[Line]:
        """Every line ``list_lines`` finds, by ordering key, a page at a time."""
        return _pages(
            lambda cursor: self.list_lines(
                endpoint_id, paused=paused, cursor=cursor, limit=PAGE_SIZE
            )
        )

    def resume_lines(
        self, endpoint_id: int, *, ordering_keys: Sequence[str | None] | None = None
    ) -> ResumedLines:
        """Resume a FIFO endpoint's lines paused at a dead letter: those of ``ordering_keys``
        (at most 100; None in it names the line of events without a key), or, when it is None,
        every paused line. Each goes on with the message behind its dead letter; a line that is
        not paused is left alone. The answer names the lines resumed."""
        body: dict[str, Any] = {}
        if ordering_keys is not None:
            if isinstance(ordering_keys, str):
                raise TypeError("ordering_keys is a sequence of keys, not one key")
            keys = list(ordering_keys)
            if not keys:
                raise ValueError("name at least one ordering key, or None for every paused line")
            body["ordering_keys"] = keys
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}/lines/resume")
        return self._call(ResumedLines, "POST", path, body=body)

    # -- dead letters --------------------------------------------------------------------------

    def replay_dead_letters(
        self,
        *,
        message_ids: Sequence[int] | None = None,
        endpoint_id: int | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> ReplayResult:
        """Requeue the dead letters that match every filter given (at least one): these ids,
        this endpoint's, dead-lettered in [since, until)."""
        given = {
            "message_ids": _ids(message_ids),
            "endpoint_id": endpoint_id,
            "since": _time(since),
            "until": _time(until),
        }
        body = {name: value for name, value in given.items() if value is not None}
        return self._call(ReplayResult, "POST", self._in_app("/dead-letters/replay"), body=body)

    # -- portal --------------------------------------------------------------------------------

    def create_portal_link(
        self, *, read_only: bool = False, expires_in_s: int | None = None
    ) -> PortalLink:
        """A link that opens the consumer portal for the application once, before it expires."""
        body: dict[str, Any] = {"read_only": read_only}
        if expires_in_s is not None:
            body["expires_in_s"] = expires_in_s
        return self._call(PortalLink, "POST", self._in_app("/portal-links"), body=body)

    def open_portal_session(self) -> PortalSession:
        """Exchange the portal link this client was made with (its credential as the token)
        for a session, once."""
        return self._call(PortalSession, "POST", "/v1/portal/sessions")

    # -- applications --------------------------------------------------------------------------

    def create_application(
        self,
        uid: str,
        *,
        name: str | None = None,
        metadata: Mapping[str, str] | None = None,
        default_payload_format: str | None = None,
    ) -> Application:
        """A new application (one per customer); ``uid`` is your own id for it."""
        given = {
            "uid": uid,
            "name": name,
            "metadata": None if metadata is None else dict(metadata),
            "default_payload_format": default_payload_format,
        }
        body = {key: value for key, value in given.items() if value is not None}
        return self._call(Application, "POST", "/v1/apps", body=body)

    def list_applications(
        self, *, cursor: str | None = None, limit: int | None = None
    ) -> ApplicationPage:
        query = {"cursor": cursor, "limit": limit}
        return self._call(ApplicationPage, "GET", "/v1/apps", query=query)

    def iter_applications(self) -> Iterator[Application]:
        """Every application, by ascending id."""
        return _pages(lambda cursor: self.list_applications(cursor=cursor, limit=PAGE_SIZE))

    def get_application(self, app: str) -> Application:
        """An application, by uid or id."""
        return self._call(Application, "GET", _app_path(app))

    def update_application(
        self,
        app: str,
        *,
        name: str | _Unset = UNSET,
        metadata: Mapping[str, str] | _Unset = UNSET,
        default_payload_format: str | _Unset | None = UNSET,
    ) -> Application:
        """Change an application's name, metadata (replaced whole) or default payload format
        (None: back to the deployment's)."""
        given: dict[str, Any] = {
            "name": name,
            "metadata": metadata,
            "default_payload_format": default_payload_format,
        }
        body = {key: _plain(value) for key, value in given.items() if value is not UNSET}
        return self._call(Application, "PATCH", _app_path(app), body=body)

    def delete_application(self, app: str) -> None:
        """Delete an application: its endpoints are disabled, its queued messages become dead
        letters, its history stays."""
        self._send("DELETE", _app_path(app))

    # -- tokens --------------------------------------------------------------------------------

    def create_token(
        self,
        scope: str,
        *,
        application: str | None = None,
        description: str | None = None,
        expires_at: datetime | None = None,
    ) -> CreatedToken:
        """A new token (admin, producer, app or app_read; ``application`` for the last two).
        The token is in this answer only."""
        given = {
            "scope": scope,
            "application": application,
            "description": description,
            "expires_at": _time(expires_at),
        }
        body = {key: value for key, value in given.items() if value is not None}
        return self._call(CreatedToken, "POST", "/v1/tokens", body=body)

    def list_tokens(self, *, cursor: str | None = None, limit: int | None = None) -> TokenPage:
        query = {"cursor": cursor, "limit": limit}
        return self._call(TokenPage, "GET", "/v1/tokens", query=query)

    def iter_tokens(self) -> Iterator[Token]:
        """Every token (never the tokens themselves), revoked and expired ones included."""
        return _pages(lambda cursor: self.list_tokens(cursor=cursor, limit=PAGE_SIZE))

    def get_token(self, token_id: int) -> Token:
        return self._call(Token, "GET", f"/v1/tokens/{_id(token_id)}")

    def revoke_token(self, token_id: int) -> Token:
        """Refuse a token from now on (on AWS within the authorizer's 60 s cache)."""
        return self._call(Token, "DELETE", f"/v1/tokens/{_id(token_id)}")

    def send_example(self, endpoint_id: int, event_type: str) -> SendResult:
        """Send the catalogued type's first example to the endpoint, as a real, signed message
        marked as an example."""
        path = self._in_app(f"/endpoints/{_id(endpoint_id)}/send-example")
        return self._call(SendResult, "POST", path, body={"event_type": event_type})

    # -- the event-type catalog ----------------------------------------------------------------

    def create_event_type(
        self,
        name: str,
        *,
        description: str | None = None,
        schema: Any = None,
        examples: Sequence[Any] | None = None,
        deprecated: bool | None = None,
        archived: bool | None = None,
        validate_payloads: bool | None = None,
    ) -> EventType:
        """A new catalog entry (an admin token's): its JSON Schema (draft 2020-12) and examples
        are checked before it is stored."""
        given = {
            "name": name,
            "description": description,
            "schema": schema,
            "examples": None if examples is None else list(examples),
            "deprecated": deprecated,
            "archived": archived,
            "validate_payloads": validate_payloads,
        }
        body = {key: value for key, value in given.items() if value is not None}
        return self._call(EventType, "POST", "/v1/event-types", body=body)

    def list_event_types(
        self,
        *,
        cursor: str | None = None,
        limit: int | None = None,
        include_archived: bool | None = None,
    ) -> EventTypePage:
        query = {
            "cursor": cursor,
            "limit": limit,
            "include_archived": None if include_archived is None else str(include_archived).lower(),
        }
        return self._call(EventTypePage, "GET", "/v1/event-types", query=query)

    def iter_event_types(self, *, include_archived: bool = False) -> Iterator[EventType]:
        """The whole catalog, in the order types were added."""
        return _pages(
            lambda cursor: self.list_event_types(
                cursor=cursor, limit=PAGE_SIZE, include_archived=include_archived
            )
        )

    def get_event_type(self, name: str) -> EventType:
        return self._call(EventType, "GET", _event_type_path(name))

    def update_event_type(
        self,
        name: str,
        *,
        description: str | _Unset = UNSET,
        schema: Any = UNSET,
        examples: Sequence[Any] | _Unset = UNSET,
        deprecated: bool | _Unset = UNSET,
        archived: bool | _Unset = UNSET,
        validate_payloads: bool | _Unset = UNSET,
    ) -> EventType:
        """Change the fields given (an admin token's); a new schema or new examples make a new
        version, and ``archived=True`` archives the type."""
        given: dict[str, Any] = {
            "description": description,
            "schema": schema,
            "examples": examples if examples is UNSET else list(examples),
            "deprecated": deprecated,
            "archived": archived,
            "validate_payloads": validate_payloads,
        }
        body = {key: value for key, value in given.items() if value is not UNSET}
        return self._call(EventType, "PATCH", _event_type_path(name), body=body)

    def get_event_type_version(self, name: str, version: int) -> EventTypeVersion:
        """One version of a type's schema and examples."""
        path = f"{_event_type_path(name)}/versions/{_id(version)}"
        return self._call(EventTypeVersion, "GET", path)

    def import_event_types(self, document: Mapping[str, Any]) -> ImportResult:
        """Add or change the event types of an OpenAPI 3.1 document's ``webhooks``, all or
        none (an admin token's)."""
        return self._call(ImportResult, "POST", "/v1/event-types/import", body=dict(document))

    # -- the operators' views ------------------------------------------------------------------

    def deployment_status(self) -> StatusReport:
        """The whole queue's status, every application's (an admin token's)."""
        return self._call(StatusReport, "GET", "/v1/admin/status")

    def application_status(self, app: str) -> StatusReport:
        """One application's status."""
        return self._call(StatusReport, "GET", f"{_app_path(app)}/status")

    def deployment_dead_letters(self, *, window_s: int | None = None) -> DeadLetterReport:
        """Every application's dead letters of the last ``window_s`` seconds (default: the
        scheduled report's window), per endpoint (an admin token's)."""
        query = {"window_s": window_s}
        return self._call(DeadLetterReport, "GET", "/v1/admin/dead-letters", query=query)

    def application_dead_letters(
        self, app: str, *, window_s: int | None = None
    ) -> DeadLetterReport:
        """One application's dead letters of the last ``window_s`` seconds, per endpoint."""
        query = {"window_s": window_s}
        path = f"{_app_path(app)}/dead-letters"
        return self._call(DeadLetterReport, "GET", path, query=query)

    # -- transport -----------------------------------------------------------------------------

    def _in_app(self, path: str) -> str:
        return f"/v1{path}" if self._app is None else f"{_app_path(self._app)}{path}"

    def _call(
        self,
        kind: type[T],
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        safe: bool = False,
    ) -> T:
        """Send a request and read its answer as ``kind``."""
        response = self._send(method, path, query=query, body=body, safe=safe)
        try:
            return decode(kind, _json(response))
        except NotTheDocumentedShape as exc:
            raise UnexpectedAnswer(
                f"the answer is not a {kind.__name__}: {exc}", response.status_code
            ) from None

    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        safe: bool = False,
    ) -> requests.Response:
        """Send a request (retried as the module says: ``safe`` ones, and every GET, after any
        failure that may pass); the answer, or the error it stands for."""
        session = self._safe if method == "GET" or safe else self._once
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        try:
            response = session.request(
                method,
                self._root + path,
                params=params or None,
                json=body,
                timeout=self._timeout,
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            # Named by its kind alone: the exception's text could carry the request's URL.
            raise ApiUnreachable(f"cannot reach the API at {self._root}: {_reason(exc)}") from exc
        logger.debug("%s %s: %d", method, path, response.status_code)
        if response.status_code >= 400:
            raise error_for(response.status_code, _json_or_none(response), response.text)
        return response


def _json(response: requests.Response) -> Any:
    """A successful answer's JSON body."""
    try:
        return response.json()
    except ValueError:
        raise UnexpectedAnswer(
            f"the answer (HTTP {response.status_code}) is not JSON: is this the Tidings API?",
            response.status_code,
        ) from None


def _json_or_none(response: requests.Response) -> Any:
    try:
        return response.json() if response.content else None
    except ValueError:
        return None


def _pages(page_at: Any) -> Iterator[Any]:
    cursor: str | None = None
    while True:
        page = page_at(cursor)
        yield from page.items
        cursor = page.next_cursor
        if cursor is None:
            return


def _api_root(api_url: str) -> str:
    """The address the API's paths (``/v1/…``) follow, from its URL with or without ``/v1``."""
    root = api_url.strip().rstrip("/")
    if not root.startswith(("https://", "http://")) or "?" in root or "#" in root:
        raise ValueError(f"the API's URL must be http(s) without query or fragment: {api_url!r}")
    return root.removesuffix("/v1")


def _event_type_path(name: str) -> str:
    return "/v1/event-types/" + quote(name, safe="")


def _app_path(app: str) -> str:
    if not app:
        raise ValueError("name the application by its uid or id")
    return f"/v1/apps/{quote(app, safe='')}"


def _id(value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"an id is a whole number, not {type(value).__name__}")
    return value


def _ids(values: Sequence[int] | None) -> list[int] | None:
    return None if values is None else [_id(v) for v in values]


def _time(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        raise ValueError("a time must carry its time zone (datetime.now(UTC), not utcnow())")
    return value.isoformat()


def _plain(value: Any) -> Any:
    """A changed field's value as JSON: sequences as lists, mappings as objects."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return list(value)
    return value


def _event_body(event: EventToSend) -> dict[str, Any]:
    if event.payload is None:
        raise ValueError("an event's payload is a JSON value other than null")
    body: dict[str, Any] = {"event_type": event.event_type, "payload": event.payload}
    if event.event_id is not None:
        body["event_id"] = event.event_id
    if event.endpoint_ids is not None:
        body["endpoint_ids"] = _ids(event.endpoint_ids)
    if event.channels is not None:
        body["channels"] = list(event.channels)
    if event.ordering_key is not None:
        body["ordering_key"] = event.ordering_key
    return body


def _reason(exc: requests.RequestException) -> str:
    if isinstance(exc, requests.Timeout):
        return "no answer in time"
    if isinstance(exc, requests.ConnectionError):
        return "the connection failed"
    return exc.__class__.__name__


class _Bearer(AuthBase):
    """The bearer token, set on each request. (As the session's auth, it also keeps requests
    from putting credentials of a .netrc file in its place.)"""

    def __init__(self, token: str) -> None:
        self._header = f"Bearer {token}"

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        request.headers["Authorization"] = self._header
        return request

    def __repr__(self) -> str:
        return "_Bearer(…)"


def _session(bearer: _Bearer, retry: Retry) -> requests.Session:
    session = requests.Session()
    session.auth = bearer
    session.headers.update(
        {
            "Accept": "application/json",
            "User-Agent": f"tidings-client/{__version__} requests/{requests.__version__}",
        }
    )
    adapter = HTTPAdapter(max_retries=retry)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    return session


def _retry(retries: int, backoff_s: float, *, on_answers: bool) -> Retry:
    """Retries after failed connections always; after an answer or a broken one (``on_answers``)
    only for a request that is safe to send again."""
    return Retry(
        total=retries,
        connect=retries,
        read=retries if on_answers else 0,
        status=retries if on_answers else 0,
        other=0,
        redirect=0,
        # Which requests are safe is the client's choice (it picks the session), not the
        # method's: None retries any method that reaches this session's retries.
        allowed_methods=None if on_answers else Retry.DEFAULT_ALLOWED_METHODS,
        status_forcelist=TRY_LATER if on_answers else (),
        backoff_factor=backoff_s,
        backoff_jitter=backoff_s,
        backoff_max=MAX_BACKOFF_S,
        respect_retry_after_header=True,
        raise_on_status=False,
        raise_on_redirect=False,
    )
