"""The HTTP side of a delivery attempt: SSRF-checked, address-pinned, measured, bounded.

The target's host is resolved once by ``ssrf.resolve_target``; the request then goes to that very
address while the ``Host`` header, TLS SNI and certificate check keep the host name, so a DNS
answer that changes after the check (rebinding) cannot steer the connection elsewhere. One pooled
``requests`` transport adapter serves every attempt of an execution environment, across
invocations.

Requests go to the adapter directly rather than through a ``requests.Session``: everything a
session adds on top (cookie jars, proxies from the environment, redirects, merged default
headers) is something a webhook sender must not do, and skipping it costs about a third less CPU
per delivery.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import http.client
import ipaddress
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import requests
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
from requests.adapters import HTTPAdapter
from requests.utils import requote_uri

from tidings import __version__
from tidings.delivery.retry_policy import AttemptError
from tidings.delivery.ssrf import (
    BlockedTarget,
    InvalidTargetUrl,
    IPNetwork,
    Resolver,
    parse_allowed_networks,
    resolve_target,
)

USER_AGENT = f"Tidings/{__version__}"
# A response body is read this far at most (beyond the excerpt) to keep its connection pooled;
# a longer body closes the connection instead, so a huge response cannot hold the sender.
DRAIN_LIMIT_BYTES = 64 * 1024
# What an OAuth2 token endpoint's answer may hold (a token response is well under this).
TOKEN_RESPONSE_LIMIT_BYTES = 64 * 1024
_CHUNK_BYTES = 8192
_JSON = "application/json"
_FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True, slots=True, eq=False)
class TlsProfile:
    """An endpoint's own TLS settings: a context that presents its client certificate and/or
    trusts only its CA bundle. Requests with one use connection pools of their own (the context
    is part of the pool's key), never the shared ones."""

    context: ssl.SSLContext


@dataclass(frozen=True, slots=True)
class HttpResult:
    """What one POST got: a status (with headers of interest and an excerpt) or an error."""

    status_code: int | None
    error: AttemptError | None
    elapsed_ms: int
    retry_after: str | None = None
    excerpt: str | None = None
    # A short description of an error, for logs; never the body, headers or URL sent.
    detail: str | None = None


class _Deadline:
    """The end of one attempt. When it passes while the attempt still holds its connection,
    the socket is shut down, so a receiver that trickles bytes cannot outlast the timeout
    (socket timeouts only bound each read)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection: Any = None
        self.expired = False

    def attach(self, connection: Any) -> None:
        with self._lock:
            self._connection = connection
            if self.expired:
                _shut_down(connection)

    def detach(self, connection: Any) -> None:
        """The connection goes back to the pool: from now on it belongs to other attempts."""
        with self._lock:
            if self._connection is connection:
                self._connection = None

    def finish(self) -> None:
        with self._lock:
            self._connection = None

    def expire(self) -> None:
        with self._lock:
            self.expired = True
            if self._connection is not None:
                _shut_down(self._connection)


def _shut_down(connection: Any) -> None:
    sock = getattr(connection, "sock", None)
    if sock is not None:
        # Already closed by its owner: nothing left to stop.
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _Watchdog:
    """One thread that expires deadlines when their time comes."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._heap: list[tuple[float, int, _Deadline]] = []
        self._sequence = itertools.count()
        self._thread: threading.Thread | None = None

    def arm(self, deadline: _Deadline, at: float) -> None:
        with self._changed:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="tidings-attempt-deadlines", daemon=True
                )
                self._thread.start()
            entry = (at, next(self._sequence), deadline)
            heapq.heappush(self._heap, entry)
            # The thread sleeps until the earliest deadline; only a new earliest one changes that.
            if self._heap[0] is entry:
                self._changed.notify()

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    wait = self._heap[0][0] - time.monotonic() if self._heap else None
                    self._changed.wait(wait)
                _, _, deadline = heapq.heappop(self._heap)
            deadline.expire()


_watchdog = _Watchdog()
# The deadline of the attempt running on this thread, for the connection it uses.
_current = threading.local()


class _DeadlineAware:
    """Connection mix-in: binds the connection to the deadline of the attempt using it."""

    def request(self, *args: Any, **kwargs: Any) -> Any:
        deadline: _Deadline | None = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.attach(self)
        return super().request(*args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(_DeadlineAware, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(_DeadlineAware, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(urllib3.connectionpool.HTTPConnectionPool):
    ConnectionCls = _HTTPConnection

    def _put_conn(self, conn: Any) -> None:
        deadline: _Deadline | None = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.detach(conn)
        super()._put_conn(conn)


class _HTTPSPool(urllib3.connectionpool.HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection

    def _put_conn(self, conn: Any) -> None:
        deadline: _Deadline | None = getattr(_current, "deadline", None)
        if deadline is not None:
            deadline.detach(conn)
        super()._put_conn(conn)


class PinnedAddressAdapter(HTTPAdapter):
    """Connects to the address in the request URL and verifies TLS for the ``Host`` header's name.

    Requests reach this adapter with the resolved IP address as their URL host; the pool for a
    TLS connection is keyed on the real host name too, so connections to two names behind one
    address are never mixed up.
    """

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> Any:
        profile = cert if isinstance(cert, TlsProfile) else None
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, None if profile is not None else cert
        )
        tls_kwargs: dict[str, Any] = dict(pool_kwargs)
        if host_params.get("scheme") == "https":
            name = host_name_of(request.headers.get("Host"))
            if name is not None:
                tls_kwargs["server_hostname"] = name
                tls_kwargs["assert_hostname"] = name
            if profile is not None:
                # Its context alone decides what is trusted: no bundle is added to it.
                tls_kwargs["ssl_context"] = profile.context
                tls_kwargs.pop("ca_certs", None)
                tls_kwargs.pop("ca_cert_dir", None)
        return host_params, tls_kwargs

    def cert_verify(self, conn: Any, url: str, verify: Any, cert: Any) -> None:
        if isinstance(cert, TlsProfile):
            conn.cert_reqs = "CERT_REQUIRED"
            conn.ca_certs = None
            conn.ca_cert_dir = None
            return
        super().cert_verify(conn, url, verify, cert)  # type: ignore[no-untyped-call]

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}


def host_name_of(host_header: str | bytes | None) -> str | None:
    """The host name of a ``Host`` header value, without port or IPv6 brackets."""
    if host_header is None:
        return None
    text = host_header.decode("ascii") if isinstance(host_header, bytes) else host_header
    if text.startswith("["):
        return text[1 : text.index("]")]
    return text.rsplit(":", 1)[0] if text.count(":") == 1 else text


class HttpTransport:
    """POSTs webhook bodies; one instance per execution environment, safe to share by threads."""

    def __init__(
        self,
        *,
        allowed_networks: Sequence[IPNetwork] = (),
        pool_size: int = 10,
        excerpt_bytes: int = 1024,
        resolver: Resolver | None = None,
    ) -> None:
        if excerpt_bytes < 0:
            raise ValueError(f"excerpt_bytes must be >= 0, got {excerpt_bytes}")
        self.allowed_networks = tuple(allowed_networks)
        self.excerpt_bytes = excerpt_bytes
        self._resolver = resolver
        # No proxies (they would connect somewhere other than the checked address), no cookies
        # (endpoints may share an address), no redirects (to an address nobody checked).
        self.adapter = PinnedAddressAdapter(
            pool_connections=max(pool_size, 16), pool_maxsize=pool_size, max_retries=0
        )

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        tls: TlsProfile | None = None,
    ) -> HttpResult:
        """POST ``body`` to ``url``; never raises for anything the target or network does."""
        return self._send(url, body, headers, timeout_s, _JSON, tls=tls, keep=self.excerpt_bytes)[0]

    def exchange(
        self,
        url: str,
        form: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        tls: TlsProfile | None = None,
        *,
        max_bytes: int = TOKEN_RESPONSE_LIMIT_BYTES,
    ) -> tuple[HttpResult, bytes]:
        """POST a form (an OAuth2 token request) with the same guard, pinning and limits as a
        delivery; the answer and up to ``max_bytes`` of its body (more is cut)."""
        return self._send(url, form, headers, timeout_s, _FORM, tls=tls, keep=max_bytes)

    def _send(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        content_type: str,
        *,
        tls: TlsProfile | None,
        keep: int,
    ) -> tuple[HttpResult, bytes]:
        try:
            target = resolve_target(url, self.allowed_networks, self._resolver)
        except InvalidTargetUrl as exc:
            return HttpResult(None, AttemptError.INVALID_URL, 0, detail=str(exc)), b""
        except BlockedTarget as exc:
            return HttpResult(None, AttemptError.BLOCKED_ADDRESS, 0, detail=str(exc)), b""
        except OSError as exc:
            return HttpResult(None, AttemptError.DNS, 0, detail=str(exc)), b""
        address = target.ip
        host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        request = requests.PreparedRequest()
        request.prepare_method("POST")
        # The parts were validated by resolve_target; only characters unsafe in a request line
        # (non-ASCII in the path or query) still need escaping, as requests would escape them.
        request.url = requote_uri(
            f"{target.url.scheme}://{host}:{target.url.port}{target.url.path_and_query}"
        )
        request.prepare_headers(
            {
                **headers,
                "Host": target.url.host_header,
                "User-Agent": USER_AGENT,
                "Content-Type": content_type,
                "Accept": "*/*" if content_type is _JSON else "application/json",
                # Compressed answers could inflate past any read limit.
                "Accept-Encoding": "identity",
            }
        )
        request.prepare_body(body, None)
        deadline = _Deadline()
        _current.deadline = deadline
        started = time.perf_counter()
        _watchdog.arm(deadline, time.monotonic() + timeout_s)
        try:
            response = self.adapter.send(
                request,
                stream=True,
                timeout=(timeout_s, timeout_s),
                verify=True,
                proxies={},
                cert=tls,  # type: ignore[arg-type]  # the adapter reads a TlsProfile
            )
            elapsed_ms = _ms_since(started)
            if deadline.expired:
                # Cut off mid-headers, http.client takes what arrived as a complete answer.
                response.close()
                return HttpResult(None, AttemptError.TIMEOUT, elapsed_ms, detail="deadline"), b""
            try:
                kept = self._read_body(response, keep)
            finally:
                response.close()
        except requests.RequestException as exc:
            elapsed_ms = _ms_since(started)
            kind = AttemptError.TIMEOUT if deadline.expired else classify_exception(exc)
            return HttpResult(None, kind, elapsed_ms, detail=_describe(exc)), b""
        finally:
            deadline.finish()
            _current.deadline = None
        excerpt = None
        if content_type is _JSON and kept:
            # A delivery's answer is kept as an excerpt; PostgreSQL text cannot hold NULs.
            excerpt = kept.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
        result = HttpResult(
            status_code=response.status_code,
            error=None,
            elapsed_ms=elapsed_ms,
            retry_after=response.headers.get("Retry-After"),
            excerpt=excerpt,
        )
        return result, kept

    @staticmethod
    def _read_body(response: requests.Response, keep_bytes: int) -> bytes:
        """Up to ``keep_bytes`` of the body, reading at most ``DRAIN_LIMIT_BYTES`` beyond."""
        kept = bytearray()
        read = 0
        try:
            for chunk in response.raw.stream(_CHUNK_BYTES, decode_content=False):
                if len(kept) < keep_bytes:
                    kept.extend(chunk[: keep_bytes - len(kept)])
                read += len(chunk)
                if read > keep_bytes + DRAIN_LIMIT_BYTES:
                    break
        except (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException):
            # The status line already arrived and decides the outcome; the body is only context.
            pass
        return bytes(kept)

    def close(self) -> None:
        self.adapter.close()


# Checked in order against a failure and everything it wraps; the first match names it.
_FAILURE_KINDS: tuple[tuple[tuple[type[BaseException], ...], AttemptError], ...] = (
    ((requests.Timeout,), AttemptError.TIMEOUT),
    ((requests.exceptions.SSLError,), AttemptError.TLS),
    ((ConnectionRefusedError,), AttemptError.CONNECTION_REFUSED),
    ((socket.timeout, urllib3.exceptions.TimeoutError), AttemptError.TIMEOUT),
    # Before the malformed answers: a closed connection (RemoteDisconnected) is also a
    # BadStatusLine to http.client.
    (
        (ConnectionResetError, ConnectionAbortedError, BrokenPipeError),
        AttemptError.CONNECTION_RESET,
    ),
    # Garbage instead of a status line, a header line over 64 KiB, more than 100 headers.
    ((http.client.HTTPException,), AttemptError.INVALID_RESPONSE),
    (
        (urllib3.exceptions.ProtocolError, requests.exceptions.ChunkedEncodingError),
        AttemptError.CONNECTION_RESET,
    ),
    ((socket.gaierror, urllib3.exceptions.NameResolutionError), AttemptError.DNS),
)


def classify_exception(exc: BaseException) -> AttemptError:
    """The kind of network failure behind a ``requests`` exception."""
    causes = list(_causes(exc))
    for types, kind in _FAILURE_KINDS:
        if any(isinstance(cause, types) for cause in causes):
            return kind
    return AttemptError.OTHER


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and every exception it wraps, through causes, contexts, args and ``reason``."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        linked = [current.__cause__, current.__context__, getattr(current, "reason", None)]
        linked.extend(current.args)
        pending.extend(item for item in linked if isinstance(item, BaseException))


def _describe(exc: BaseException) -> str:
    # Type names only: exception texts quote the URL, whose query may carry a customer's token.
    names = dict.fromkeys(type(cause).__name__ for cause in _causes(exc))
    return " <- ".join(names)[:300]


def _ms_since(started: float) -> int:
    return round((time.perf_counter() - started) * 1000)


class TransportSettings(Protocol):
    """What the shared HTTP transport is built from."""

    @property
    def allowed_networks(self) -> tuple[str, ...]: ...
    @property
    def response_excerpt_bytes(self) -> int: ...
    @property
    def sender_concurrency(self) -> int: ...


@functools.cache
def shared_transport(settings: TransportSettings) -> HttpTransport:
    """The execution environment's transport for these settings, built on first use."""
    return HttpTransport(
        allowed_networks=parse_allowed_networks(settings.allowed_networks),
        pool_size=settings.sender_concurrency,
        excerpt_bytes=settings.response_excerpt_bytes,
    )
