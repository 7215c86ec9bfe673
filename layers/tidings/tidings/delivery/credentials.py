"""Receiver credentials on the way out: static headers, Authorization, OAuth2 tokens, mTLS.

An endpoint without credentials never reaches this module: the sender asks only when its row
came with some. An endpoint's credentials are opened once per process and kept, keyed by their
rows' ids (a changed credential is a new row, so it is opened afresh); so are the OAuth2 tokens
got with them. The sender asks for a request's headers (``authorize``) before it sends a part
of its batch, and tells after a 401 (``refused``) whether to send once more with a new token.

OAuth2 client credentials: one token per credential row and process, got when first needed
(one request at a time per credential: concurrent deliveries wait for it rather than ask
again), refreshed when ``expires_in`` is about to run out (a minute early; a quarter of the
lifetime early for tokens that live less than four minutes), and once more when the receiver
answers 401 to a delivery made with it. The token request goes through the transport, so the
same SSRF guard, address pinning, size and time limits apply. A token request that fails makes
the attempt ``auth_failed`` (the token endpoint's status, never its body, in the excerpt).

A client certificate and its key go to libcurl from memory. They are loaded once by Python's
``ssl`` when opened, to find one that cannot be used at once; ``SSLContext.load_cert_chain``
reads only from paths, so the key is handed over through an anonymous in-memory file
(``memfd_create``), which exists on no file system and goes away when closed. Where there is
none (not Linux), a file of mode 0600 in a fresh private directory is written, loaded and
removed at once.

Nothing here logs a credential, a token or a key, nor names one in an exception.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tidings.delivery.http_transport import HttpResult, HttpTransport, TlsProfile
from tidings.delivery.retry_policy import AttemptError
from tidings.secrets.envelope import DataKey, SealedCredential, UnreadableSecret, open_credential

# Tokens are refreshed this long before they expire, or a quarter of their lifetime for
# short-lived ones.
REFRESH_EARLY_S = 60.0
# A token answer without expires_in is used this long.
DEFAULT_TOKEN_LIFETIME_S = 3600.0
# The opened credentials kept per process (the oldest go first).
MAX_CACHED = 1024


class CredentialsUnusable(ValueError):
    """An endpoint's stored credentials do not open, or cannot be used as stored."""


@dataclass(frozen=True, slots=True)
class OAuth2Client:
    key: int  # the credential row's id: its tokens are cached under it
    token_url: str
    client_id: str = field(repr=False)
    client_secret: str = field(repr=False)
    scope: str | None
    audience: str | None
    client_auth: str


@dataclass(frozen=True, slots=True)
class ReceiverCredentials:
    """What one endpoint's requests carry: headers (static ones and a fixed Authorization), an
    OAuth2 client whose token goes in Authorization, and TLS settings of its own."""

    headers: Mapping[str, str] = field(repr=False)
    oauth2: OAuth2Client | None = None
    tls: TlsProfile | None = None


@dataclass(frozen=True, slots=True)
class Authorized:
    """A request's headers with its endpoint's credentials, and the OAuth2 token among them."""

    headers: dict[str, str] = field(repr=False)
    token: str | None = field(default=None, repr=False)


@dataclass(slots=True)
class _Token:
    value: str = field(repr=False)
    refresh_at: float


class Credentials:
    """The process's opened credentials and OAuth2 tokens; safe to share by threads."""

    def __init__(self, transport: HttpTransport) -> None:
        self.transport = transport
        self._lock = threading.Lock()
        self._opened: dict[tuple[int, ...], ReceiverCredentials] = {}
        self._tokens: dict[int, _Token] = {}
        self._token_locks: dict[int, threading.Lock] = {}

    def of(
        self, endpoint_id: int, sealed: Sequence[SealedCredential], keys: Mapping[int, DataKey]
    ) -> ReceiverCredentials:
        """The endpoint's credentials, opened (once per process and set of rows)."""
        ids = tuple(item.id for item in sealed)
        with self._lock:
            cached = self._opened.get(ids)
        if cached is not None:
            return cached
        opened = _open_all(endpoint_id, sealed, keys)
        with self._lock:
            if len(self._opened) >= MAX_CACHED:
                self._opened.pop(next(iter(self._opened)))
            self._opened[ids] = opened
        return opened

    def authorize(
        self, credentials: ReceiverCredentials, headers: Mapping[str, str], ends: float
    ) -> Authorized | HttpResult:
        """The request's headers with the endpoint's credentials in them (an OAuth2 token got
        first when none is kept, within the attempt's deadline ``ends``, monotonic), or the
        failed attempt when no token could be had."""
        sent = {**credentials.headers, **headers}
        client = credentials.oauth2
        if client is None:
            return Authorized(sent)
        token, failure = self._token(client, ends)
        if failure is not None:
            return failure
        sent["Authorization"] = f"Bearer {token}"
        return Authorized(sent, token)

    def refused(self, credentials: ReceiverCredentials, authorized: Authorized) -> bool:
        """After a 401: whether the request is worth making once more with a new token (it was
        made with an OAuth2 token, which is forgotten now: the receiver no longer takes it,
        revoked or expired early; a concurrent delivery may have got the next one already)."""
        client = credentials.oauth2
        if client is None or authorized.token is None:
            return False
        self._forget(client.key, authorized.token)
        return True

    def _token(self, client: OAuth2Client, ends: float) -> tuple[str, HttpResult | None]:
        """A valid token (and None), or the failed attempt."""
        with self._lock:
            lock = self._token_locks.setdefault(client.key, threading.Lock())
        with lock:
            now = time.monotonic()
            with self._lock:
                cached = self._tokens.get(client.key)
            if cached is not None and cached.refresh_at > now:
                return cached.value, None
            got = self._request_token(client, ends)
            if isinstance(got, HttpResult):
                return "", got
            with self._lock:
                self._tokens[client.key] = got
            return got.value, None

    def _forget(self, key: int, token: str) -> None:
        with self._lock:
            cached = self._tokens.get(key)
            if cached is not None and cached.value == token:
                del self._tokens[key]

    def _request_token(self, client: OAuth2Client, ends: float) -> _Token | HttpResult:
        form: dict[str, str] = {"grant_type": "client_credentials"}
        if client.scope:
            form["scope"] = client.scope
        if client.audience:
            form["audience"] = client.audience
        headers: dict[str, str] = {}
        if client.client_auth == "post":
            form["client_id"] = client.client_id
            form["client_secret"] = client.client_secret
        else:
            pair = f"{_form_quote(client.client_id)}:{_form_quote(client.client_secret)}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode()).decode()
        started = time.monotonic()
        result, body = self.transport.exchange(
            client.token_url, urllib.parse.urlencode(form).encode(), headers, _left(ends)
        )
        if result.status_code is None:
            kind = result.error.value if result.error else "error"
            return _auth_failed(result.elapsed_ms, f"the token request failed: {kind}")
        if not 200 <= result.status_code <= 299:
            return _auth_failed(
                result.elapsed_ms,
                f"the token endpoint answered HTTP {result.status_code}",
            )
        token = _token_of(body, started)
        if token is None:
            return _auth_failed(
                result.elapsed_ms,
                f"the token endpoint answered HTTP {result.status_code} without a usable "
                "bearer token",
            )
        return token


def tls_profile(
    client_certificate: Mapping[str, str] | None, server_ca_pem: str | None
) -> TlsProfile:
    """The TLS settings of an endpoint: trusting only ``server_ca_pem`` when given (else the
    public roots), presenting the client certificate when given. Both are loaded once here, as
    OpenSSL will load them, so that one that cannot be used is found when the credentials are
    opened, not at every attempt."""
    context = ssl.create_default_context(cadata=server_ca_pem) if server_ca_pem else None
    if client_certificate is not None:
        _load_cert_chain(
            context or ssl.create_default_context(),
            client_certificate["certificate_pem"] + client_certificate["private_key_pem"],
        )
    return TlsProfile(
        ca_pem=server_ca_pem.encode() if server_ca_pem else None,
        certificate_pem=(
            client_certificate["certificate_pem"].encode() if client_certificate else None
        ),
        key_pem=client_certificate["private_key_pem"].encode() if client_certificate else None,
    )


def _load_cert_chain(context: ssl.SSLContext, pem: str) -> None:
    """Load a certificate chain and its key from memory (see the module's note)."""
    data = pem.encode()
    memfd = getattr(os, "memfd_create", None)
    if memfd is not None:
        fd = memfd("tidings-client-certificate", os.MFD_CLOEXEC)
        try:
            _write_all(fd, data)
            context.load_cert_chain(f"/proc/self/fd/{fd}")
        finally:
            os.close(fd)
        return
    with tempfile.TemporaryDirectory(prefix="tidings-") as directory:
        path = os.path.join(directory, "client.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        try:
            context.load_cert_chain(path)
        finally:
            os.unlink(path)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open_all(
    endpoint_id: int, sealed: Sequence[SealedCredential], keys: Mapping[int, DataKey]
) -> ReceiverCredentials:
    content: dict[str, tuple[int, Any]] = {}
    try:
        for item in sealed:
            key = keys.get(item.data_key_id)
            if key is None:
                raise UnreadableSecret("a credential names a data key that was not opened")
            content[item.kind] = (item.id, json.loads(open_credential(key, endpoint_id, item)))
    except (ValueError, UnicodeDecodeError):
        raise CredentialsUnusable("the endpoint's credentials do not open") from None
    headers: dict[str, str] = dict(content.get("headers", (0, {}))[1])
    oauth2 = None
    if "auth" in content:
        auth_id, auth = content["auth"]
        kind = auth.get("type")
        if kind == "basic":
            pair = f"{auth['username']}:{auth['password']}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        elif kind == "bearer":
            headers["Authorization"] = f"Bearer {auth['token']}"
        elif kind == "oauth2_client_credentials":
            oauth2 = OAuth2Client(
                auth_id,
                auth["token_url"],
                auth["client_id"],
                auth["client_secret"],
                auth.get("scope"),
                auth.get("audience"),
                auth.get("client_auth") or "basic",
            )
        else:
            raise CredentialsUnusable("the endpoint's auth is of an unknown type")
    tls = None
    if "tls_client_certificate" in content or "tls_server_ca" in content:
        ca = content.get("tls_server_ca")
        try:
            tls = tls_profile(
                content.get("tls_client_certificate", (0, None))[1],
                ca[1]["ca_pem"] if ca is not None else None,
            )
        except (ssl.SSLError, ValueError, KeyError, OSError):
            raise CredentialsUnusable("the endpoint's TLS credentials cannot be loaded") from None
    return ReceiverCredentials(headers, oauth2, tls)


def _token_of(body: bytes, started: float) -> _Token | None:
    try:
        answer = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(answer, dict):
        return None
    token = answer.get("access_token")
    kind = answer.get("token_type", "bearer")
    if not isinstance(token, str) or not token or not isinstance(kind, str):
        return None
    if kind.lower() != "bearer" or any(c in token for c in "\r\n\x00"):
        return None
    lifetime = answer.get("expires_in", DEFAULT_TOKEN_LIFETIME_S)
    try:
        lifetime_s = float(lifetime)
    except (TypeError, ValueError):
        lifetime_s = DEFAULT_TOKEN_LIFETIME_S
    lifetime_s = max(lifetime_s, 0.0)
    early = min(REFRESH_EARLY_S, lifetime_s / 4)
    return _Token(token, started + lifetime_s - early)


def _auth_failed(elapsed_ms: int, excerpt: str) -> HttpResult:
    return HttpResult(None, AttemptError.AUTH_FAILED, elapsed_ms, excerpt=excerpt, detail=excerpt)


def _form_quote(text: str) -> str:
    # RFC 6749 §2.3.1: the client id and secret are form-encoded before Basic.
    return urllib.parse.quote_plus(text)


def _left(ends: float) -> float:
    return max(ends - time.monotonic(), 0.001)
