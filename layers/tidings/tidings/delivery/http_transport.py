"""The HTTP side of a delivery attempt: SSRF-checked, address-pinned, measured, bounded.

The target's host is resolved once by ``ssrf.resolve_target``; the request then goes to that very
address while the ``Host`` header, TLS SNI and certificate check keep the host name, so a DNS
answer that changes after the check (rebinding) cannot steer the connection elsewhere. One
urllib3 pool manager serves every attempt of an execution environment, across invocations.

Requests go to urllib3's connection pools directly rather than through ``requests``: everything
requests adds on top (cookie jars, proxies from the environment, redirects, header merging and
re-validation, a second response object) is something a webhook sender must not do or does
already, and skipping it saves a quarter to a third of the CPU a POST costs
(``bench/transport.py``).
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import http.client
import itertools
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import urllib3
import urllib3.connection
import urllib3.connectionpool
import urllib3.exceptions
from requests.utils import DEFAULT_CA_BUNDLE_PATH, requote_uri

from tidings import __version__
from tidings.delivery.retry_policy import AttemptError
from tidings.delivery.ssrf import (
    BlockedTarget,
    InvalidTargetUrl,
    IPNetwork,
    Resolver,
    TargetUrl,
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


def pool_key(target: TargetUrl, address: str, tls: TlsProfile | None) -> dict[str, Any]:
    """The connection pool a request to ``target`` pinned to ``address`` goes through.

    The pool connects to the address; for TLS it verifies the certificate of the target's host
    name (SNI and hostname check), so pools to two names behind one address are never shared.
    An endpoint's own TLS profile decides alone what is trusted, and its context is part of the
    pool's key; every other TLS pool trusts the CA bundle ``requests`` ships (certifi's).
    """
    key: dict[str, Any] = {"scheme": target.scheme, "host": address, "port": target.port}
    if target.scheme != "https":
        return key
    tls_kwargs: dict[str, Any] = {
        "cert_reqs": "CERT_REQUIRED",
        "server_hostname": target.host,
        "assert_hostname": target.host,
    }
    if tls is None:
        tls_kwargs["ca_certs"] = DEFAULT_CA_BUNDLE_PATH
    else:
        tls_kwargs["ssl_context"] = tls.context
    return {**key, "pool_kwargs": tls_kwargs}


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
        # (endpoints may share an address), no redirects (to an address nobody checked), no
        # retries (the retry schedule decides when to try again). Beyond ``pool_size`` idle
        # connections to one address, the rest are closed after use; never waited for.
        self.pools = urllib3.PoolManager(
            num_pools=max(pool_size, 16), maxsize=pool_size, block=False, retries=False
        )
        self.pools.pool_classes_by_scheme = {"http": _HTTPPool, "https": _HTTPSPool}

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
        pool = self.pools.connection_from_host(**pool_key(target.url, str(target.ip), tls))
        sent_headers = {
            **headers,
            "Host": target.url.host_header,
            "User-Agent": USER_AGENT,
            "Content-Type": content_type,
            "Accept": "*/*" if content_type is _JSON else "application/json",
            # Compressed answers could inflate past any read limit.
            "Accept-Encoding": "identity",
            "Content-Length": str(len(body)),
        }
        deadline = _Deadline()
        _current.deadline = deadline
        started = time.perf_counter()
        _watchdog.arm(deadline, time.monotonic() + timeout_s)
        try:
            response = pool.urlopen(
                "POST",
                _request_target(target.url.path_and_query),
                body=body,
                headers=sent_headers,
                retries=False,
                redirect=False,
                assert_same_host=False,
                timeout=urllib3.Timeout(connect=timeout_s, read=timeout_s),
                preload_content=False,
                decode_content=False,
            )
            elapsed_ms = _ms_since(started)
            if deadline.expired:
                # Cut off mid-headers, http.client takes what arrived as a complete answer.
                _discard(response)
                return HttpResult(None, AttemptError.TIMEOUT, elapsed_ms, detail="deadline"), b""
            try:
                kept = self._read_body(response, keep)
            finally:
                _discard(response)
        except _NETWORK_FAILURES as exc:
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
            status_code=response.status,
            error=None,
            elapsed_ms=elapsed_ms,
            retry_after=response.headers.get("Retry-After"),
            excerpt=excerpt,
        )
        return result, kept

    @staticmethod
    def _read_body(response: urllib3.BaseHTTPResponse, keep_bytes: int) -> bytes:
        """Up to ``keep_bytes`` of the body, reading at most ``DRAIN_LIMIT_BYTES`` beyond."""
        kept = bytearray()
        read = 0
        try:
            for chunk in response.stream(_CHUNK_BYTES, decode_content=False):
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
        self.pools.clear()


def _discard(response: urllib3.BaseHTTPResponse) -> None:
    """Done with ``response``: a body read to its end has already given its connection back to
    the pool; one cut short closes its connection, which goes back as a free slot."""
    response.close()
    response.release_conn()


# Characters unsafe in a request line (non-ASCII in the path or query) escaped as requests
# escapes them; the rest of the path was validated by ``resolve_target``. An endpoint's path
# is the same on every attempt, hence the cache.
_request_target = functools.lru_cache(maxsize=4096)(requote_uri)

# What urlopen raises for anything the network or the receiver does (it wraps socket and
# http.client errors in its own, but is not relied on to).
_NETWORK_FAILURES = (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException)


# Checked in order against a failure and everything it wraps; the first match names it.
# urllib3 counts a connection that could not be made (refused, unreachable) as a connect
# timeout (NewConnectionError is a ConnectTimeoutError): the reasons behind it go first.
_FAILURE_KINDS: tuple[tuple[tuple[type[BaseException], ...], AttemptError], ...] = (
    ((urllib3.exceptions.SSLError, ssl.SSLError, ssl.CertificateError), AttemptError.TLS),
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
    ((urllib3.exceptions.ProtocolError,), AttemptError.CONNECTION_RESET),
    ((socket.gaierror, urllib3.exceptions.NameResolutionError), AttemptError.DNS),
)


def classify_exception(exc: BaseException) -> AttemptError:
    """The kind of network failure behind an exception of urllib3 (or of what it wraps)."""
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
