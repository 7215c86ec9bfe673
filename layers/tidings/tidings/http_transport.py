"""The HTTP side of a delivery attempt: SSRF-checked, address-pinned, measured, bounded.

The target's host is resolved once by ``ssrf.resolve_target``; the request then goes to that very
address while the ``Host`` header, TLS SNI and certificate check keep the host name, so a DNS
answer that changes after the check (rebinding) cannot steer the connection elsewhere. One pooled
``requests.Session`` serves every attempt of an execution environment, across invocations.
"""

from __future__ import annotations

import functools
import http.client
import http.cookiejar
import ipaddress
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests
import urllib3.exceptions
from requests.adapters import HTTPAdapter

from tidings import __version__
from tidings.config import Settings
from tidings.retry_policy import AttemptError
from tidings.ssrf import (
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
_CHUNK_BYTES = 8192


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


class PinnedAddressAdapter(HTTPAdapter):
    """Connects to the address in the request URL and verifies TLS for the ``Host`` header's name.

    Requests reach this adapter with the resolved IP address as their URL host; the pool for a
    TLS connection is keyed on the real host name too, so connections to two names behind one
    address are never mixed up.
    """

    def build_connection_pool_key_attributes(
        self, request: requests.PreparedRequest, verify: Any, cert: Any = None
    ) -> Any:
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(
            request, verify, cert
        )
        tls_kwargs: dict[str, Any] = dict(pool_kwargs)
        if host_params.get("scheme") == "https":
            name = host_name_of(request.headers.get("Host"))
            if name is not None:
                tls_kwargs["server_hostname"] = name
                tls_kwargs["assert_hostname"] = name
        return host_params, tls_kwargs


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
        self.session = requests.Session()
        # Proxies from the environment would connect somewhere other than the checked address.
        self.session.trust_env = False
        # Cookies are keyed on the connected address, which endpoints may share: keep none.
        self.session.cookies.set_policy(http.cookiejar.DefaultCookiePolicy(allowed_domains=[]))
        adapter = PinnedAddressAdapter(
            pool_connections=max(pool_size, 16), pool_maxsize=pool_size, max_retries=0
        )
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> HttpResult:
        """POST ``body`` to ``url``; never raises for anything the target or network does."""
        try:
            target = resolve_target(url, self.allowed_networks, self._resolver)
        except InvalidTargetUrl as exc:
            return HttpResult(None, AttemptError.INVALID_URL, 0, detail=str(exc))
        except BlockedTarget as exc:
            return HttpResult(None, AttemptError.BLOCKED_ADDRESS, 0, detail=str(exc))
        except OSError as exc:
            return HttpResult(None, AttemptError.DNS, 0, detail=str(exc))
        address = target.ip
        host = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        pinned_url = f"{target.url.scheme}://{host}:{target.url.port}{target.url.path_and_query}"
        request_headers = {
            **headers,
            "Host": target.url.host_header,
            "User-Agent": USER_AGENT,
            "Content-Type": "application/json",
            # Compressed answers could inflate past any read limit.
            "Accept-Encoding": "identity",
        }
        started = time.perf_counter()
        try:
            response = self.session.post(
                pinned_url,
                data=body,
                headers=request_headers,
                timeout=(timeout_s, timeout_s),
                stream=True,
                # A redirect would lead to an address nobody checked.
                allow_redirects=False,
            )
        except requests.RequestException as exc:
            elapsed_ms = _ms_since(started)
            return HttpResult(None, classify_exception(exc), elapsed_ms, detail=_describe(exc))
        elapsed_ms = _ms_since(started)
        try:
            excerpt = self._read_excerpt(response)
        finally:
            response.close()
        return HttpResult(
            status_code=response.status_code,
            error=None,
            elapsed_ms=elapsed_ms,
            retry_after=response.headers.get("Retry-After"),
            excerpt=excerpt,
        )

    def _read_excerpt(self, response: requests.Response) -> str | None:
        kept = bytearray()
        read = 0
        try:
            for chunk in response.raw.stream(_CHUNK_BYTES, decode_content=False):
                if len(kept) < self.excerpt_bytes:
                    kept.extend(chunk[: self.excerpt_bytes - len(kept)])
                read += len(chunk)
                if read > self.excerpt_bytes + DRAIN_LIMIT_BYTES:
                    break
        except (urllib3.exceptions.HTTPError, OSError, http.client.HTTPException):
            # The status line already arrived and decides the outcome; the body is only context.
            pass
        if not kept:
            return None
        # PostgreSQL text cannot hold NUL characters.
        return kept.decode("utf-8", errors="replace").replace("\x00", "\ufffd")

    def close(self) -> None:
        self.session.close()


# Checked in order against a failure and everything it wraps; the first match names it.
_FAILURE_KINDS: tuple[tuple[tuple[type[BaseException], ...], AttemptError], ...] = (
    ((requests.Timeout,), AttemptError.TIMEOUT),
    ((requests.exceptions.SSLError,), AttemptError.TLS),
    ((ConnectionRefusedError,), AttemptError.CONNECTION_REFUSED),
    ((socket.timeout, urllib3.exceptions.TimeoutError), AttemptError.TIMEOUT),
    (
        (
            ConnectionResetError,
            ConnectionAbortedError,
            BrokenPipeError,
            http.client.RemoteDisconnected,
            urllib3.exceptions.ProtocolError,
            requests.exceptions.ChunkedEncodingError,
        ),
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


@functools.cache
def shared_transport(settings: Settings) -> HttpTransport:
    """The execution environment's transport for these settings, built on first use."""
    return HttpTransport(
        allowed_networks=parse_allowed_networks(settings.allowed_networks),
        pool_size=settings.sender_concurrency,
        excerpt_bytes=settings.response_excerpt_bytes,
    )
