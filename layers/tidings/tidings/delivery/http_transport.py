"""The HTTP side of a delivery attempt: SSRF-checked, address-pinned, measured, bounded.

The target's host is resolved once by ``ssrf.resolve_target``; the request then goes to that very
address (libcurl's ``CONNECT_TO``) while the ``Host`` header, TLS SNI and the certificate check
keep the host name, so a DNS answer that changes after the check (rebinding) cannot steer the
connection elsewhere, and a connection is only ever reused for the address it was made to.

Requests go out through libcurl (``pycurl``): every request of a batch is one transfer of a
multi handle, driven on the calling thread, so a part of a batch's deliveries costs one thread
and one event loop rather than a thread for each that wakes for its answer (a fifth of the CPU a
POST cost through urllib3 on ten threads: ``bench/transport.py``). Each thread keeps a multi
handle of its own, whose connections are reused across invocations. What a webhook sender must
not do is switched off: proxies from the environment, redirects, cookies, protocols other than
HTTP(S), HTTP/2, compressed answers, ``Expect: 100-continue``, path normalisation.

What an answer may hold is bounded as http.client bounds it (a header line of 64 KiB, 100 header
lines; more is an invalid response), its body is read up to the excerpt and at most
``DRAIN_LIMIT_BYTES`` more (the connection is then dropped), and the whole attempt, connection
and TLS included, has one deadline. Once the status line and headers are in, the answer stands:
what the body does afterwards (ends early, trickles past the deadline, is cut) only shortens the
excerpt.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import pycurl
from requests.utils import DEFAULT_CA_BUNDLE_PATH, requote_uri

from tidings import __version__
from tidings.delivery.retry_policy import AttemptError
from tidings.delivery.ssrf import (
    BlockedTarget,
    InvalidTargetUrl,
    IPNetwork,
    ResolvedTarget,
    Resolver,
    parse_allowed_networks,
    resolve_target,
)

USER_AGENT = f"Tidings/{__version__}"
# A response body is read this far at most beyond the excerpt; a longer one has its connection
# dropped, so a huge response cannot hold the sender.
DRAIN_LIMIT_BYTES = 64 * 1024
# What an OAuth2 token endpoint's answer may hold (a token response is well under this).
TOKEN_RESPONSE_LIMIT_BYTES = 64 * 1024
# http.client's bounds on an answer's head, kept: a longer header line or more header lines make
# the answer invalid.
MAX_HEADER_LINE_BYTES = 64 * 1024
MAX_HEADER_LINES = 100
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


@dataclass(frozen=True, slots=True, eq=False)
class TlsProfile:
    """An endpoint's own TLS settings, in PEM: the CA certificates it trusts instead of the
    public roots, and the client certificate (with its chain) and key it presents. libcurl
    reuses a connection only for a request with the same TLS settings."""

    ca_pem: bytes | None = field(default=None, repr=False)
    certificate_pem: bytes | None = field(default=None, repr=False)
    key_pem: bytes | None = field(default=None, repr=False)


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


@dataclass(frozen=True, slots=True)
class Post:
    """One request to make: a delivery's POST (``content_type`` JSON, the answer kept as an
    excerpt of ``keep_bytes``), or a token request's (a form, the answer's body kept)."""

    url: str
    body: bytes = field(repr=False)
    headers: Mapping[str, str] = field(repr=False)
    timeout_s: float
    tls: TlsProfile | None = None
    content_type: str = JSON
    keep_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Sent:
    """A request's result, its answer's body as kept, and when it finished (monotonic)."""

    result: HttpResult
    body: bytes
    finished_at: float


class _Transfer:
    """One request on its way: its curl handle, and what the answer's head and body brought."""

    __slots__ = (
        "body",
        "curl",
        "final",
        "head_fault",
        "head_lines",
        "headers_at",
        "keep",
        "kept",
        "post",
        "read",
        "retry_after",
        "started",
        "status",
    )

    def __init__(self, curl: pycurl.Curl, post: Post, keep: int) -> None:
        self.curl = curl
        self.post = post
        self.keep = keep
        self.kept = bytearray()
        self.read = 0
        self.status = 0
        self.final = False
        self.head_lines = 0
        self.head_fault = False
        self.headers_at: float | None = None
        self.retry_after: list[str] = []
        self.started = time.perf_counter()

    def header(self, line: bytes) -> int | None:
        """libcurl hands every line of every head (interim ones too); a non-None answer other
        than the line's length stops the transfer."""
        if self.headers_at is not None:
            return None  # trailers: the answer already stands
        if len(line) > MAX_HEADER_LINE_BYTES:
            self.head_fault = True
            return 0
        if line.startswith(b"HTTP/"):
            # A new head: an interim answer's (1xx) is forgotten with it.
            parts = line.split(None, 2)
            self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
            self.head_lines = 0
            self.retry_after = []
            return None
        if line in (b"\r\n", b"\n"):
            if self.status >= 200 or self.status == 101:
                self.headers_at = time.perf_counter()
            return None
        self.head_lines += 1
        if self.head_lines > MAX_HEADER_LINES:
            self.head_fault = True
            return 0
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"retry-after":
            # As http.client reads headers: ISO-8859-1. Repeated ones are joined, so that the
            # retry policy sees (and refuses) a repeated Retry-After.
            self.retry_after.append(value.strip().decode("iso-8859-1"))
        return None

    def write(self, chunk: bytes) -> int | None:
        """Keep the excerpt; past it and the drain limit, stop reading (0 stops the transfer)."""
        if len(self.kept) < self.keep:
            self.kept += chunk[: self.keep - len(self.kept)]
        self.read += len(chunk)
        if self.read > self.keep + DRAIN_LIMIT_BYTES:
            return 0
        return None

    def outcome(self, errno: int | None) -> tuple[HttpResult, bytes]:
        now = time.perf_counter()
        if self.headers_at is not None and self.status:
            # The status line and the headers arrived: they decide, whatever the body did.
            excerpt = None
            if self.post.content_type == JSON and self.kept:
                # PostgreSQL text cannot hold NULs.
                excerpt = self.kept.decode("utf-8", errors="replace").replace("\x00", "\ufffd")
            result = HttpResult(
                status_code=self.status,
                error=None,
                elapsed_ms=_ms(self.headers_at - self.started),
                retry_after=", ".join(self.retry_after) if self.retry_after else None,
                excerpt=excerpt,
            )
            return result, bytes(self.kept)
        kind = AttemptError.INVALID_RESPONSE if self.head_fault else classify_curl_error(errno)
        detail = "response head past the limits" if self.head_fault else _describe(errno)
        return HttpResult(None, kind, _ms(now - self.started), detail=detail), b""


# libcurl's codes that pycurl has no name for (libcurl's own names).
CURLE_WEIRD_SERVER_REPLY = 8
CURLE_SSL_CLIENTCERT = 98
CURLE_TOO_LARGE = 100

# libcurl's errors, by what they mean for an attempt. Anything not named is OTHER.
_CURL_ERRORS: dict[int, AttemptError] = {
    pycurl.E_OPERATION_TIMEDOUT: AttemptError.TIMEOUT,
    pycurl.E_COULDNT_CONNECT: AttemptError.CONNECTION_REFUSED,
    pycurl.E_COULDNT_RESOLVE_HOST: AttemptError.DNS,
    # A connection closed or reset before a whole head arrived.
    pycurl.E_GOT_NOTHING: AttemptError.CONNECTION_RESET,
    pycurl.E_RECV_ERROR: AttemptError.CONNECTION_RESET,
    pycurl.E_SEND_ERROR: AttemptError.CONNECTION_RESET,
    pycurl.E_PARTIAL_FILE: AttemptError.CONNECTION_RESET,
    # Not HTTP: garbage for a status line, an HTTP/0.9 answer, a head past libcurl's own limits.
    CURLE_WEIRD_SERVER_REPLY: AttemptError.INVALID_RESPONSE,
    pycurl.E_UNSUPPORTED_PROTOCOL: AttemptError.INVALID_RESPONSE,
    pycurl.E_BAD_CONTENT_ENCODING: AttemptError.INVALID_RESPONSE,
    pycurl.E_FILESIZE_EXCEEDED: AttemptError.INVALID_RESPONSE,
    CURLE_TOO_LARGE: AttemptError.INVALID_RESPONSE,
    # TLS: the handshake, the peer's certificate or name, our own certificate or key.
    pycurl.E_SSL_CONNECT_ERROR: AttemptError.TLS,
    pycurl.E_PEER_FAILED_VERIFICATION: AttemptError.TLS,
    pycurl.E_SSL_CERTPROBLEM: AttemptError.TLS,
    pycurl.E_SSL_CIPHER: AttemptError.TLS,
    pycurl.E_SSL_CACERT_BADFILE: AttemptError.TLS,
    pycurl.E_SSL_ISSUER_ERROR: AttemptError.TLS,
    pycurl.E_SSL_PINNEDPUBKEYNOTMATCH: AttemptError.TLS,
    pycurl.E_SSL_INVALIDCERTSTATUS: AttemptError.TLS,
    pycurl.E_SSL_SHUTDOWN_FAILED: AttemptError.TLS,
    pycurl.E_USE_SSL_FAILED: AttemptError.TLS,
    # The server wanted a client certificate.
    CURLE_SSL_CLIENTCERT: AttemptError.TLS,
}
_CURL_ERROR_NAMES = {
    CURLE_WEIRD_SERVER_REPLY: "weird_server_reply",
    CURLE_SSL_CLIENTCERT: "ssl_clientcert",
    CURLE_TOO_LARGE: "too_large",
}
for _name in sorted(dir(pycurl)):
    # pycurl keeps libcurl's older names beside the current ones: the first name is kept.
    if _name.startswith("E_") and isinstance(getattr(pycurl, _name), int):
        _CURL_ERROR_NAMES.setdefault(getattr(pycurl, _name), _name.removeprefix("E_").lower())


def classify_curl_error(errno: int | None) -> AttemptError:
    """The kind of failure behind a libcurl error code."""
    if errno is None:
        return AttemptError.OTHER
    return _CURL_ERRORS.get(errno, AttemptError.OTHER)


def _describe(errno: int | None) -> str:
    # The error's name only: libcurl's message quotes the host, and a URL may carry a token.
    return f"curl: {_CURL_ERROR_NAMES.get(errno or 0, errno)}"


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class _Handles:
    """One thread's multi handle and its idle easy handles (libcurl's handles belong to one
    thread at a time)."""

    def __init__(self, max_connections: int) -> None:
        self.multi = pycurl.CurlMulti()
        self.multi.setopt(pycurl.M_MAXCONNECTS, max_connections)
        self.idle: list[pycurl.Curl] = []

    def take(self) -> pycurl.Curl:
        return self.idle.pop() if self.idle else pycurl.Curl()

    def give_back(self, curl: pycurl.Curl) -> None:
        curl.reset()
        self.idle.append(curl)

    def close(self) -> None:
        for curl in self.idle:
            curl.close()
        self.idle.clear()
        self.multi.close()


class HttpTransport:
    """POSTs webhook bodies; one instance per execution environment, safe to share by threads
    (each thread drives its own libcurl handles)."""

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
        # Idle connections kept per thread: a part's worth to each of a few receivers.
        self._max_connections = max(16, 4 * pool_size)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[_Handles] = []

    def post(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        timeout_s: float,
        tls: TlsProfile | None = None,
    ) -> HttpResult:
        """POST ``body`` to ``url``; never raises for anything the target or network does."""
        return self.post_all([Post(url, body, headers, timeout_s, tls)])[0].result

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
        sent = self.post_all([Post(url, form, headers, timeout_s, tls, FORM, max_bytes)])[0]
        return sent.result, sent.body

    def post_all(self, posts: Sequence[Post]) -> list[Sent]:
        """Make every request at once, on this thread; their results in the order given. Never
        raises for anything a target or the network does, nor for one request that cannot be
        made as given (a header with a line break: that one request is an ``internal_error``)."""
        handles = self._handles()
        sent: list[Sent | None] = [None] * len(posts)
        transfers: dict[int, tuple[int, _Transfer]] = {}
        try:
            for index, post in enumerate(posts):
                started = self._start(handles, post)
                if isinstance(started, HttpResult):
                    sent[index] = Sent(started, b"", time.monotonic())
                else:
                    transfers[id(started.curl)] = (index, started)
            for curl, errno, finished_at in self._run(handles.multi, len(transfers)):
                index, transfer = transfers.pop(id(curl))
                result, body = transfer.outcome(errno)
                sent[index] = Sent(result, body, finished_at)
                handles.multi.remove_handle(curl)
                handles.give_back(curl)
        finally:
            # Only when something raised: whatever is still on its way is stopped and closed.
            for _, transfer in transfers.values():
                handles.multi.remove_handle(transfer.curl)
                transfer.curl.close()
        return [item for item in sent if item is not None]

    def _start(self, handles: _Handles, post: Post) -> _Transfer | HttpResult:
        """The request on its way, or why it cannot be made."""
        target = self._checked(post)
        if isinstance(target, HttpResult):
            return target
        try:
            request_headers = _header_lines(post)
        except ValueError as exc:
            return HttpResult(None, AttemptError.INTERNAL, 0, detail=str(exc))
        curl = handles.take()
        keep = self.excerpt_bytes if post.keep_bytes is None else post.keep_bytes
        transfer = _Transfer(curl, post, keep)
        try:
            _prepare(curl, post, target, request_headers, transfer)
            handles.multi.add_handle(curl)
        except pycurl.error as exc:
            curl.close()
            code = exc.args[0] if exc.args and isinstance(exc.args[0], int) else None
            return HttpResult(None, AttemptError.INTERNAL, 0, detail=_describe(code))
        return transfer

    def _checked(self, post: Post) -> HttpResult | ResolvedTarget:
        """The checked target, or why nothing may be sent to it."""
        try:
            return resolve_target(post.url, self.allowed_networks, self._resolver)
        except InvalidTargetUrl as exc:
            return HttpResult(None, AttemptError.INVALID_URL, 0, detail=str(exc))
        except BlockedTarget as exc:
            return HttpResult(None, AttemptError.BLOCKED_ADDRESS, 0, detail=str(exc))
        except OSError as exc:
            return HttpResult(None, AttemptError.DNS, 0, detail=str(exc))

    @staticmethod
    def _run(multi: pycurl.CurlMulti, count: int) -> list[tuple[pycurl.Curl, int | None, float]]:
        """Drive the multi handle until ``count`` transfers are done; each with its error code
        (None: an answer came) and when it was found done (monotonic), in that order."""
        done: list[tuple[pycurl.Curl, int | None, float]] = []
        while len(done) < count:
            while multi.perform()[0] == pycurl.E_CALL_MULTI_PERFORM:
                pass
            while True:
                queued, ok, failed = multi.info_read()
                now = time.monotonic()
                done.extend((curl, None, now) for curl in ok)
                done.extend((curl, errno, now) for curl, errno, _ in failed)
                if not queued:
                    break
            if len(done) < count:
                wait_ms = multi.timeout()
                multi.select(1.0 if wait_ms < 0 else min(wait_ms, 1000) / 1000)
        return done

    def _handles(self) -> _Handles:
        handles: _Handles | None = getattr(self._local, "handles", None)
        if handles is None:
            handles = _Handles(self._max_connections)
            self._local.handles = handles
            with self._lock:
                self._all.append(handles)
        return handles

    def close(self) -> None:
        """Close every thread's handles and connections (the transport is not used after)."""
        with self._lock:
            everything, self._all = self._all, []
        for handles in everything:
            handles.close()
        self._local = threading.local()


def _prepare(
    curl: pycurl.Curl,
    post: Post,
    target: ResolvedTarget,
    request_headers: list[str],
    transfer: _Transfer,
) -> None:
    curl.setopt(pycurl.URL, _request_url(target.url.url))
    # The checked address, and no other: the name is kept for Host, SNI and the certificate.
    curl.setopt(pycurl.CONNECT_TO, [connect_to(target)])
    curl.setopt(pycurl.PATH_AS_IS, 1)
    curl.setopt(pycurl.PROTOCOLS, pycurl.PROTO_HTTP | pycurl.PROTO_HTTPS)
    # An empty proxy is none, whatever the environment's *_proxy variables say.
    curl.setopt(pycurl.PROXY, "")
    curl.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
    curl.setopt(pycurl.NOSIGNAL, 1)
    curl.setopt(pycurl.POSTFIELDS, post.body)
    curl.setopt(pycurl.HTTPHEADER, request_headers)
    timeout_ms = max(1, round(post.timeout_s * 1000))
    curl.setopt(pycurl.TIMEOUT_MS, timeout_ms)
    curl.setopt(pycurl.CONNECTTIMEOUT_MS, timeout_ms)
    curl.setopt(pycurl.HEADERFUNCTION, transfer.header)
    curl.setopt(pycurl.WRITEFUNCTION, transfer.write)
    if target.url.scheme == "https":
        _set_tls(curl, post.tls)


def connect_to(target: ResolvedTarget) -> str:
    """libcurl's ``CONNECT_TO`` entry that sends a request for the target's host and port to
    the checked address (an IPv6 address in brackets, as libcurl reads it)."""
    url = target.url
    address = f"[{target.ip}]" if target.ip.version == 6 else str(target.ip)
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port}:{address}:{url.port}"


def _set_tls(curl: pycurl.Curl, tls: TlsProfile | None) -> None:
    """Verify the server's certificate and name: against the endpoint's own CA certificates
    alone when it has some, else the public roots ``requests`` trusts (certifi's). Present the
    endpoint's client certificate when it has one."""
    curl.setopt(pycurl.SSL_VERIFYPEER, 1)
    curl.setopt(pycurl.SSL_VERIFYHOST, 2)
    # Nothing from a directory libcurl was built to look in: only what is given here is trusted.
    curl.unsetopt(pycurl.CAPATH)
    if tls is not None and tls.ca_pem is not None:
        curl.setopt(pycurl.CAINFO_BLOB, tls.ca_pem)
    else:
        curl.setopt(pycurl.CAINFO, DEFAULT_CA_BUNDLE_PATH)
    if tls is not None and tls.certificate_pem is not None and tls.key_pem is not None:
        curl.setopt(pycurl.SSLCERTTYPE, "PEM")
        curl.setopt(pycurl.SSLCERT_BLOB, tls.certificate_pem)
        curl.setopt(pycurl.SSLKEYTYPE, "PEM")
        curl.setopt(pycurl.SSLKEY_BLOB, tls.key_pem)


def _header_lines(post: Post) -> list[str]:
    """The request's header lines: the caller's, then Tidings' own (which win). libcurl sends
    a line as given, so a name or value that could end it is refused here."""
    fields = {name.lower(): (name, value) for name, value in post.headers.items()}
    for name, value in (
        ("User-Agent", USER_AGENT),
        ("Content-Type", post.content_type),
        ("Accept", "*/*" if post.content_type == JSON else JSON),
        # Compressed answers could inflate past any read limit.
        ("Accept-Encoding", "identity"),
    ):
        fields[name.lower()] = (name, value)
    # libcurl makes these from the URL and the body.
    fields.pop("host", None)
    fields.pop("content-length", None)
    fields.pop("expect", None)
    lines = []
    for name, value in fields.values():
        if not _is_token(name) or any(c in value for c in "\r\n\x00"):
            raise ValueError("a header name or value cannot be sent as given")
        # libcurl reads "Name:" as "do not send Name"; "Name;" sends it empty.
        lines.append(f"{name}: {value}" if value else f"{name};")
    # libcurl's own Expect: 100-continue is not sent: the body goes at once.
    lines.append("Expect:")
    return lines


@functools.lru_cache(maxsize=256)
def _is_token(name: str) -> bool:
    # RFC 9110 token characters, at least one.
    return bool(name) and all(c.isascii() and (c.isalnum() or c in "!#$%&'*+-.^_`|~") for c in name)


# Characters unsafe in a request line (non-ASCII in the path or query) escaped as requests
# escapes them; the rest of the URL was validated by ``resolve_target``. An endpoint's URL is
# the same on every attempt, hence the cache.
_request_url = functools.lru_cache(maxsize=4096)(requote_uri)


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
