"""SSRF rules: which URLs may be targets and which resolved addresses may be connected to.

The sender connects to the address returned by ``resolve_target``, never resolving the host a
second time, so a DNS answer that changes between the check and the connection (DNS rebinding)
cannot reach a refused address.
"""

from __future__ import annotations

import functools
import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from urllib.parse import urlsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED_SCHEMES = ("http", "https")
_DEFAULT_PORTS = {"http": 80, "https": 443}
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")
_MAX_HOSTNAME_LENGTH = 253


class InvalidTargetUrl(ValueError):
    """The URL can never be a webhook target; the message names the problem."""


# How a refused address is described to people: the kind of address, never the address itself
# (an API caller must not learn what an internal name resolves to).
_KINDS_OF_ADDRESS = {
    "metadata": "a cloud metadata address",
    "unspecified": "an unspecified address",
    "private": "a private address",
    "cgnat": "a shared (carrier-grade NAT) address",
    "loopback": "a loopback address",
    "link_local": "a link-local address",
    "reserved": "a reserved address",
    "multicast": "a multicast address",
    "broadcast": "a broadcast address",
}


class BlockedTarget(ValueError):
    """The target resolves to an address the SSRF rules refuse.

    The message says why in general terms ("it resolves to a private address") and never
    names the address: it reaches the attempt log and logs. ``ip`` is for the code alone. (The
    API and the CLI say no more than ``tidings.logic.endpoints.NOT_PUBLIC_HOST`` of a host name,
    which is also what they say of one that does not resolve.)
    """

    def __init__(self, host: str, ip: IPAddress, reason: str) -> None:
        kind = _KINDS_OF_ADDRESS.get(reason, "a refused address")
        verb = "is" if host == str(ip) else "resolves to"
        super().__init__(f"{host} is not allowed as a target: it {verb} {kind}")
        self.host = host
        self.ip = ip
        self.reason = reason


@dataclass(frozen=True, slots=True)
class TargetUrl:
    scheme: str
    host: str
    port: int
    path_and_query: str

    @property
    def host_header(self) -> str:
        """The ``Host`` header value: the port appears only when it is not the scheme's default."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if _DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.scheme}://{self.host_header}{self.path_and_query}"


@dataclass(frozen=True, slots=True)
class ResolvedTarget:
    url: TargetUrl
    ip: IPAddress


class Resolver(Protocol):
    """The shape of ``socket.getaddrinfo``, so tests can resolve without DNS."""

    def __call__(
        self, host: str, port: int, family: int = ..., type: int = ...
    ) -> Sequence[tuple[int, int, int, str, tuple[Any, ...]]]: ...


def validate_url(url: str) -> TargetUrl:
    """Check that ``url`` can be a webhook target and split it into its parts."""
    if not isinstance(url, str):
        raise InvalidTargetUrl(f"the URL must be a str, got {type(url).__name__}")
    return _validated(url)


# A sender checks its endpoints' few URLs again on every request: the answer depends on the
# string alone, so it is kept (a refused URL raises, which is not kept).
@functools.lru_cache(maxsize=4096)
def _validated(url: str) -> TargetUrl:
    if not url:
        raise InvalidTargetUrl("the URL is empty")
    # urlsplit silently drops tabs and newlines; refuse them instead of guessing.
    if any(ch.isspace() or not ch.isprintable() for ch in url):
        raise InvalidTargetUrl("the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise InvalidTargetUrl(f"the URL cannot be parsed: {exc}") from exc
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        shown = repr(parts.scheme) if parts.scheme else "missing"
        raise InvalidTargetUrl(f"the URL scheme must be http or https, got {shown}")
    if "@" in parts.netloc:
        raise InvalidTargetUrl("the URL must not carry credentials (user:password@)")
    if not parts.hostname:
        raise InvalidTargetUrl("the URL has no host")
    try:
        explicit_port = parts.port
    except ValueError:
        raise InvalidTargetUrl("the URL port is not a number within 1..65535") from None
    if explicit_port == 0:
        raise InvalidTargetUrl("the URL port is not a number within 1..65535")
    host = _normalize_host(parts.hostname, bracketed=parts.netloc.startswith("["))
    path = parts.path or "/"
    path_and_query = f"{path}?{parts.query}" if parts.query else path
    port = _DEFAULT_PORTS[scheme] if explicit_port is None else explicit_port
    return TargetUrl(scheme=scheme, host=host, port=port, path_and_query=path_and_query)


def _normalize_host(hostname: str, *, bracketed: bool) -> str:
    try:
        literal = ipaddress.ip_address(hostname)
    except ValueError:
        if bracketed:
            raise InvalidTargetUrl(f"the URL host [{hostname}] is not an IPv6 address") from None
    else:
        if isinstance(literal, ipaddress.IPv6Address) and literal.scope_id is not None:
            raise InvalidTargetUrl("the URL host must not carry an IPv6 zone (%...)")
        return str(literal)
    try:
        ascii_host = hostname.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise InvalidTargetUrl(f"the URL host {hostname!r} is not a valid host name") from None
    name = ascii_host.removesuffix(".")
    labels = name.split(".")
    if len(name) > _MAX_HOSTNAME_LENGTH or not all(_LABEL.match(label) for label in labels):
        raise InvalidTargetUrl(f"the URL host {hostname!r} is not a valid host name")
    if labels[-1].isdigit() or labels[-1].startswith("0x"):
        # Forms like 2130706433 or 127.1 are IPv4 addresses to resolvers, not names.
        raise InvalidTargetUrl(f"the URL host {hostname!r} is not a standard IP address or name")
    return ascii_host


def _table(*entries: tuple[str, str]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(net), reason) for net, reason in entries)


# Order matters: the first matching network names the reason.
_BLOCKED_V4 = _table(
    ("169.254.169.254/32", "metadata"),
    ("168.63.129.16/32", "metadata"),
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "cgnat"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link_local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "reserved"),
    ("192.0.2.0/24", "reserved"),
    ("192.88.99.0/24", "reserved"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "reserved"),
    ("198.51.100.0/24", "reserved"),
    ("203.0.113.0/24", "reserved"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved"),
)
_BLOCKED_V6 = _table(
    ("fd00:ec2::254/128", "metadata"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "private"),
    ("fc00::/7", "private"),
    ("fec0::/10", "private"),
    ("fe80::/10", "link_local"),
    ("ff00::/8", "multicast"),
    ("2001::/23", "reserved"),
    ("2001:db8::/32", "reserved"),
    ("3fff::/20", "reserved"),
    ("5f00::/16", "reserved"),
)
# Everything outside global unicast is reserved or unassigned.
_GLOBAL_UNICAST_V6 = ipaddress.IPv6Network("2000::/3")
_NAT64_V6 = ipaddress.IPv6Network("64:ff9b::/96")


def is_blocked(ip: IPAddress, allowed: Sequence[IPNetwork]) -> str | None:
    """Why connecting to ``ip`` is refused, or None when it is allowed.

    An address inside one of the ``allowed`` networks is always permitted. IPv6 addresses that
    embed an IPv4 address (mapped, 6to4, NAT64) are judged by the IPv4 address they lead to.
    """
    return _blocked_reason(ip, tuple(allowed))


# The verdict depends on the address and the allowed networks alone, and a sender's receivers
# resolve to few addresses: it is kept rather than worked out against every table per request.
@functools.lru_cache(maxsize=4096)
def _blocked_reason(ip: IPAddress, allowed: tuple[IPNetwork, ...]) -> str | None:
    if any(ip.version == net.version and ip in net for net in allowed):
        return None
    if isinstance(ip, ipaddress.IPv4Address):
        return _first_reason(ip, _BLOCKED_V4)
    embedded = _embedded_v4(ip)
    if embedded is not None:
        return _blocked_reason(embedded, allowed)
    reason = _first_reason(ip, _BLOCKED_V6)
    if reason is None and ip not in _GLOBAL_UNICAST_V6:
        return "reserved"
    return reason


def _first_reason(ip: IPAddress, table: Sequence[tuple[IPNetwork, str]]) -> str | None:
    return next((reason for net, reason in table if ip in net), None)


def _embedded_v4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip in _NAT64_V6:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def resolve_target(
    url: str, allowed: Sequence[IPNetwork], resolver: Resolver | None = None
) -> ResolvedTarget:
    """Validate ``url``, resolve its host and pick the address to connect to.

    Refused if any resolved address is blocked: a name that points partly inside the network is
    not a target, whichever address a connection would happen to use. DNS failures propagate as
    ``socket.gaierror``. ``resolver`` defaults to ``socket.getaddrinfo``, looked up at call time.
    """
    target = validate_url(url)
    addresses = _resolve(target, resolver or socket.getaddrinfo)
    for ip in addresses:
        reason = is_blocked(ip, allowed)
        if reason is not None:
            raise BlockedTarget(target.host, ip, reason)
    return ResolvedTarget(url=target, ip=addresses[0])


def _resolve(target: TargetUrl, resolver: Resolver) -> list[IPAddress]:
    try:
        return [ipaddress.ip_address(target.host)]
    except ValueError:
        pass
    addresses: list[IPAddress] = []
    for family, _type, _proto, _canonname, sockaddr in resolver(
        target.host, target.port, type=socket.SOCK_STREAM
    ):
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        ip = ipaddress.ip_address(sockaddr[0])
        if ip not in addresses:
            addresses.append(ip)
    if not addresses:
        raise socket.gaierror(socket.EAI_NONAME, f"{target.host} resolved to no IP address")
    return addresses


def parse_allowed_networks(items: Sequence[str]) -> tuple[IPNetwork, ...]:
    """Networks that are allowed although the SSRF rules would refuse them (e.g. 127.0.0.0/8)."""
    if isinstance(items, str):
        raise TypeError("items must be a sequence of networks, not a single str")
    networks: list[IPNetwork] = []
    for item in items:
        try:
            networks.append(ipaddress.ip_network(item.strip()))
        except ValueError as exc:
            raise ValueError(f"allowed network {item!r} is not a valid network: {exc}") from exc
    return tuple(networks)


def display_origin(url: str) -> str:
    """Scheme, host and port of a target, for alerts and reports that leave the system: a path
    or query may carry a receiver's token and is never shown."""
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:
        port = None
    host = parts.hostname or "?"
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}" + (f":{port}" if port else "")
