"""Credentials a receiver can demand, per endpoint: checked, sealed and shown redacted.

Four kinds, each optional and stored apart (``tidings.endpoint_credentials``, one row a kind):

- ``headers``: up to 20 static headers sent with every request;
- ``auth``: an ``Authorization`` scheme, ``basic``, ``bearer`` or ``oauth2_client_credentials``
  (the sender gets a token from the token URL, which passes the same SSRF rules as a target);
- ``tls_client_certificate``: a certificate and its private key presented in the TLS handshake;
- ``tls_server_ca`` (``tls_server_ca_pem`` in requests): the CA bundle the receiver's server
  certificate must chain to, instead of the public roots.

What is sealed is each kind's JSON as given (a private key re-encoded as unencrypted PKCS#8);
what readers get is ``shown``: header names and user names in clear, every secret value
redacted to its last four characters at most, a certificate's subject, issuer and expiry. A
private key is never read back. Nothing here logs a value or names one in an error.
"""

from __future__ import annotations

import json
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dh

from tidings.logic.errors import InvalidInput

KINDS = ("headers", "auth", "tls_client_certificate", "tls_server_ca")
# The request field of each kind.
FIELD_OF_KIND = {
    "headers": "headers",
    "auth": "auth",
    "tls_client_certificate": "tls_client_certificate",
    "tls_server_ca": "tls_server_ca_pem",
}
KIND_OF_FIELD = {name: kind for kind, name in FIELD_OF_KIND.items()}
CREDENTIAL_FIELDS = tuple(FIELD_OF_KIND.values())

MAX_HEADERS = 20
MAX_HEADER_NAME = 100
MAX_HEADER_VALUE = 4096
MAX_SECRET = 4096
MAX_NAME = 1000
MAX_PEM_BYTES = 64 * 1024
MAX_CA_CERTIFICATES = 100
# A redacted value shows its last characters only when it is long enough for them to say
# little about the rest.
REDACTED = "••••"
SHOW_TAIL_FROM = 16

# RFC 9110 token characters.
_TOKEN = re.compile(r"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
# Visible ASCII, space and tab, not starting or ending with white space.
_HEADER_VALUE = re.compile(r"^[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?$")
# Names Tidings sets itself, or that change how the request is framed or routed.
RESERVED_HEADERS = frozenset(
    {
        "host",
        "transfer-encoding",
        "connection",
        "user-agent",
        "accept-encoding",
        "keep-alive",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "proxy-authorization",
        "proxy-connection",
    }
)
RESERVED_PREFIXES = ("webhook-", "content-")
AUTH_TYPES = ("basic", "bearer", "oauth2_client_credentials")
CLIENT_AUTH = ("basic", "post")


@dataclass(frozen=True, slots=True)
class CheckedCredential:
    """One kind's credential ready to seal: its content (JSON bytes), what readers are shown and,
    for a client certificate, when it expires."""

    kind: str
    content: bytes = field(repr=False)
    shown: dict[str, Any]
    not_after: datetime | None = None

    def shown_json(self) -> str:
        return json.dumps(self.shown, separators=(",", ":"), ensure_ascii=False)


def redact(value: str) -> str:
    """A secret value as readers see it: its last four characters when it is long."""
    return REDACTED + value[-4:] if len(value) >= SHOW_TAIL_FROM else REDACTED


def check_headers(value: Any, *, with_auth: bool) -> CheckedCredential:
    """Static headers: HTTP token names, none Tidings sets or that change framing (nor
    ``authorization`` when ``with_auth``), plain visible values."""
    name = "headers"
    if not isinstance(value, Mapping):
        raise InvalidInput("invalid_type", "headers must be an object of names to values", name)
    if not value:
        raise InvalidInput("invalid_value", "headers must hold at least one header", name)
    if len(value) > MAX_HEADERS:
        raise InvalidInput("invalid_value", f"headers holds more than {MAX_HEADERS}", name)
    seen: set[str] = set()
    for header, text in value.items():
        where = f"headers.{header}" if isinstance(header, str) and len(header) < 200 else name
        if not isinstance(header, str) or not _TOKEN.match(header):
            raise InvalidInput("invalid_header_name", "a header name must be an HTTP token", where)
        if len(header) > MAX_HEADER_NAME:
            raise InvalidInput("invalid_header_name", "a header name is too long", where)
        lower = header.lower()
        if lower in seen:
            raise InvalidInput("invalid_header_name", f"{header} is given twice", where)
        seen.add(lower)
        if lower in RESERVED_HEADERS or lower.startswith(RESERVED_PREFIXES):
            raise InvalidInput(
                "reserved_header", f"{header} is set by Tidings or changes framing", where
            )
        if lower == "authorization" and with_auth:
            raise InvalidInput(
                "reserved_header",
                "authorization cannot be a static header of an endpoint with auth",
                where,
            )
        if not isinstance(text, str) or len(text) > MAX_HEADER_VALUE:
            raise InvalidInput(
                "invalid_header_value",
                f"a header value must be a string of at most {MAX_HEADER_VALUE} characters",
                where,
            )
        if not _HEADER_VALUE.match(text):
            raise InvalidInput(
                "invalid_header_value",
                "a header value must be visible ASCII (spaces inside only)",
                where,
            )
    headers = {str(k): str(v) for k, v in value.items()}
    return CheckedCredential(
        "headers",
        json.dumps(headers).encode(),
        {k: redact(v) for k, v in headers.items()},
    )


def check_auth(value: Any, *, check_url: Any) -> CheckedCredential:
    """An Authorization scheme; ``check_url(url, field)`` checks an OAuth2 token URL as a
    target (SSRF rules, ports) and returns it."""
    if not isinstance(value, Mapping):
        raise InvalidInput("invalid_type", "auth must be an object", "auth")
    kind = value.get("type")
    if kind == "basic":
        username = _text(value, "username", "auth.username", MAX_NAME)
        if ":" in username:
            raise InvalidInput(
                "invalid_value", "a Basic user name cannot hold a colon", "auth.username"
            )
        password = _text(value, "password", "auth.password", MAX_SECRET)
        _only(value, {"type", "username", "password"})
        content = {"type": kind, "username": username, "password": password}
        shown = {"type": kind, "username": username, "password": redact(password)}
    elif kind == "bearer":
        token = _text(value, "token", "auth.token", MAX_SECRET)
        if not _HEADER_VALUE.match(token):
            raise InvalidInput(
                "invalid_value", "a bearer token must be visible ASCII", "auth.token"
            )
        _only(value, {"type", "token"})
        content = {"type": kind, "token": token}
        shown = {"type": kind, "token": redact(token)}
    elif kind == "oauth2_client_credentials":
        url = check_url(_text(value, "token_url", "auth.token_url", 2048), "auth.token_url")
        if not str(url).startswith("https://") and not str(url).startswith("http://"):
            raise InvalidInput("invalid_url", "the token URL must be http(s)", "auth.token_url")
        client_id = _text(value, "client_id", "auth.client_id", MAX_NAME)
        client_secret = _text(value, "client_secret", "auth.client_secret", MAX_SECRET)
        scope = _optional_text(value, "scope", "auth.scope")
        audience = _optional_text(value, "audience", "auth.audience")
        client_auth = value.get("client_auth") or "basic"
        if client_auth not in CLIENT_AUTH:
            raise InvalidInput(
                "invalid_value", "auth.client_auth must be basic or post", "auth.client_auth"
            )
        _only(
            value,
            {
                "type",
                "token_url",
                "client_id",
                "client_secret",
                "scope",
                "audience",
                "client_auth",
            },
        )
        content = {
            "type": kind,
            "token_url": url,
            "client_id": client_id,
            "client_secret": client_secret,
            "scope": scope,
            "audience": audience,
            "client_auth": client_auth,
        }
        shown = {**content, "client_secret": redact(client_secret)}
    else:
        raise InvalidInput(
            "invalid_value", f"auth.type must be one of {', '.join(AUTH_TYPES)}", "auth.type"
        )
    return CheckedCredential("auth", json.dumps(content).encode(), shown)


def check_client_certificate(value: Any, *, now: datetime | None = None) -> CheckedCredential:
    """A client certificate (PEM, the leaf first, then any intermediates) with its unencrypted
    private key: both parse, the key is the certificate's, the certificate has not expired."""
    base = "tls_client_certificate"
    if not isinstance(value, Mapping):
        raise InvalidInput(
            "invalid_type", f"{base} must hold certificate_pem and private_key_pem", base
        )
    _only(value, {"certificate_pem", "private_key_pem"}, base)
    cert_pem = _pem(value, "certificate_pem", base)
    key_pem = _pem(value, "private_key_pem", base)
    try:
        chain = x509.load_pem_x509_certificates(cert_pem.encode())
    except ValueError:
        raise InvalidInput(
            "invalid_certificate",
            "certificate_pem is not a PEM certificate",
            f"{base}.certificate_pem",
        ) from None
    try:
        key = serialization.load_pem_private_key(key_pem.encode(), password=None)
    except TypeError:
        raise InvalidInput(
            "invalid_private_key",
            "private_key_pem is encrypted: give it without a passphrase",
            f"{base}.private_key_pem",
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise InvalidInput(
            "invalid_private_key",
            "private_key_pem is not a PEM private key",
            f"{base}.private_key_pem",
        ) from None
    if isinstance(key, dh.DHPrivateKey):
        raise InvalidInput("invalid_private_key", "a DH key cannot sign", f"{base}.private_key_pem")
    leaf = chain[0]
    spki = serialization.PublicFormat.SubjectPublicKeyInfo
    der = serialization.Encoding.DER
    if leaf.public_key().public_bytes(der, spki) != key.public_key().public_bytes(der, spki):
        raise InvalidInput(
            "key_mismatch",
            "private_key_pem is not the key of the certificate",
            f"{base}.private_key_pem",
        )
    moment = now or datetime.now(UTC)
    not_after = leaf.not_valid_after_utc
    if not_after <= moment:
        raise InvalidInput(
            "certificate_expired",
            f"the certificate expired at {not_after.isoformat()}",
            f"{base}.certificate_pem",
        )
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()
    chain_pem = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in chain)
    content = {"certificate_pem": chain_pem, "private_key_pem": pkcs8}
    shown = {
        "subject": leaf.subject.rfc4514_string(),
        "issuer": leaf.issuer.rfc4514_string(),
        "not_after": not_after.isoformat(),
        "sha256_fingerprint": leaf.fingerprint(hashes.SHA256()).hex(),
    }
    return CheckedCredential(base, json.dumps(content).encode(), shown, not_after)


def check_server_ca(value: Any) -> CheckedCredential:
    """A CA bundle (PEM certificates) the receiver's server certificate must chain to."""
    name = "tls_server_ca_pem"
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput("invalid_type", f"{name} must be PEM text", name)
    if len(value.encode()) > MAX_PEM_BYTES:
        raise InvalidInput("invalid_value", f"{name} is larger than 64 KiB", name)
    try:
        certificates = x509.load_pem_x509_certificates(value.encode())
    except ValueError:
        raise InvalidInput("invalid_certificate", f"{name} is not PEM certificates", name) from None
    if len(certificates) > MAX_CA_CERTIFICATES:
        raise InvalidInput(
            "invalid_value", f"{name} holds more than {MAX_CA_CERTIFICATES} certificates", name
        )
    bundle = "".join(c.public_bytes(serialization.Encoding.PEM).decode() for c in certificates)
    try:
        ssl.create_default_context(cadata=bundle)
    except (ssl.SSLError, ValueError):
        raise InvalidInput(
            "invalid_certificate", f"{name} cannot be used as trust anchors", name
        ) from None
    shown = {
        "certificates": len(certificates),
        "subjects": [c.subject.rfc4514_string() for c in certificates[:10]],
        "not_after": min(c.not_valid_after_utc for c in certificates).isoformat(),
    }
    return CheckedCredential("tls_server_ca", json.dumps({"ca_pem": bundle}).encode(), shown)


def check_credentials(
    changes: Mapping[str, Any], *, check_url: Any, with_auth: bool = False
) -> dict[str, CheckedCredential | None]:
    """The credential fields of a request (``CREDENTIAL_FIELDS``) checked, by kind; None for a
    kind to remove. ``with_auth``: the endpoint keeps an auth this request does not change."""
    checked: dict[str, CheckedCredential | None] = {}
    auth_after = changes["auth"] is not None if "auth" in changes else with_auth
    for name, value in changes.items():
        kind = KIND_OF_FIELD.get(name)
        if kind is None:
            continue
        if value is None:
            checked[kind] = None
        elif kind == "headers":
            checked[kind] = check_headers(value, with_auth=auth_after)
        elif kind == "auth":
            checked[kind] = check_auth(value, check_url=check_url)
        elif kind == "tls_client_certificate":
            checked[kind] = check_client_certificate(value)
        else:
            checked[kind] = check_server_ca(value)
    return checked


def shown_fields(credentials: Mapping[str, Any] | None) -> dict[str, Any]:
    """The endpoint fields that show its credentials (redacted), from ``shown`` by kind."""
    shown = credentials or {}
    return {
        "headers": shown.get("headers"),
        "auth": shown.get("auth"),
        "tls_client_certificate": shown.get("tls_client_certificate"),
        "tls_server_ca": shown.get("tls_server_ca"),
    }


def has_authorization_header(shown_headers: Mapping[str, Any] | None) -> bool:
    return any(name.lower() == "authorization" for name in shown_headers or {})


def _text(value: Mapping[str, Any], key: str, where: str, max_length: int) -> str:
    text = value.get(key)
    if not isinstance(text, str) or not text:
        raise InvalidInput("invalid_value", f"{where} must be a non-empty string", where)
    if len(text) > max_length or "\x00" in text or "\r" in text or "\n" in text:
        raise InvalidInput(
            "invalid_value",
            f"{where} must be one line of at most {max_length} characters",
            where,
        )
    return text


def _optional_text(value: Mapping[str, Any], key: str, where: str) -> str | None:
    if value.get(key) is None:
        return None
    return _text(value, key, where, MAX_NAME)


def _pem(value: Mapping[str, Any], key: str, base: str) -> str:
    text = value.get(key)
    where = f"{base}.{key}"
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput("invalid_value", f"{key} must be PEM text", where)
    if len(text.encode()) > MAX_PEM_BYTES:
        raise InvalidInput("invalid_value", f"{key} is larger than 64 KiB", where)
    return text


def _only(value: Mapping[str, Any], allowed: set[str], base: str = "auth") -> None:
    extra = sorted(str(k) for k in set(value) - allowed)
    if extra:
        raise InvalidInput("unknown_field", f"{extra[0]} is not a field here", f"{base}.{extra[0]}")
