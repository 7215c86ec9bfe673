from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.delivery import ssrf
from tidings.delivery.ssrf import (
    BlockedTarget,
    InvalidTargetUrl,
    IPAddress,
    ResolvedTarget,
    TargetUrl,
    is_blocked,
    parse_allowed_networks,
    resolve_target,
    validate_url,
)

ip = ipaddress.ip_address
NO_ALLOWANCE: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()

# --- validate_url -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://example.com", TargetUrl("https", "example.com", 443, "/")),
        ("http://example.com/hook", TargetUrl("http", "example.com", 80, "/hook")),
        (
            "HTTPS://Hooks.Example.COM:8443/a/b?x=1&y=2#frag",
            TargetUrl("https", "hooks.example.com", 8443, "/a/b?x=1&y=2"),
        ),
        ("https://[2001:db8::1]:9000/h", TargetUrl("https", "2001:db8::1", 9000, "/h")),
        ("https://93.184.216.34/h", TargetUrl("https", "93.184.216.34", 443, "/h")),
        ("https://bücher.example/h", TargetUrl("https", "xn--bcher-kva.example", 443, "/h")),
        ("https://example.com./h", TargetUrl("https", "example.com.", 443, "/h")),
        ("https://example.com:65535", TargetUrl("https", "example.com", 65535, "/")),
    ],
)
def test_valid_urls(url: str, expected: TargetUrl) -> None:
    assert validate_url(url) == expected


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("", "empty"),
        ("example.com/hook", "scheme must be http or https, got missing"),
        ("ftp://example.com/", "scheme must be http or https, got 'ftp'"),
        ("file:///etc/passwd", "scheme must be http or https"),
        ("gopher://example.com/", "scheme must be http or https"),
        ("https://", "no host"),
        ("https:///path", "no host"),
        ("https://user:pass@example.com/", "credentials"),
        ("https://user@example.com/", "credentials"),
        ("https://@example.com/", "credentials"),
        ("https://example.com:0/", "port"),
        ("https://example.com:65536/", "port"),
        ("https://example.com:http/", "port"),
        ("https://exa mple.com/", "whitespace"),
        ("https://example.com/\nHost: evil", "whitespace"),
        ("https://exam\tple.com/", "whitespace"),
        ("https://a..b/", "not a valid host name"),
        ("https://-bad.example/", "not a valid host name"),
        ("https://" + "a" * 64 + ".example/", "not a valid host name"),
        ("https://" + "a." * 127 + "example/", "not a valid host name"),
        ("https://ex!ample.com/", "not a valid host name"),
        ("https://2130706433/", "not a standard IP address"),
        ("https://127.1/", "not a standard IP address"),
        ("https://0x7f.0.0.1/", "not a standard IP address"),
        ("https://[v1.fe]/", "not an IPv6 address"),
        ("https://[fe80::1%25eth0]/", "zone"),
        ("https://[::1/", "cannot be parsed"),
    ],
)
def test_invalid_urls_name_the_problem(url: str, problem: str) -> None:
    with pytest.raises(InvalidTargetUrl, match=problem):
        validate_url(url)


def test_invalid_target_url_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        validate_url("ftp://x")


def test_non_str_url_is_refused() -> None:
    with pytest.raises(InvalidTargetUrl, match="must be a str"):
        validate_url(b"https://example.com")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("url", "host_header", "normalized"),
    [
        ("https://example.com/x", "example.com", "https://example.com/x"),
        ("https://example.com:443/x", "example.com", "https://example.com/x"),
        ("http://example.com:8080", "example.com:8080", "http://example.com:8080/"),
        ("https://[2001:db8::1]:9000/h?q", "[2001:db8::1]:9000", "https://[2001:db8::1]:9000/h?q"),
    ],
)
def test_host_header_and_url(url: str, host_header: str, normalized: str) -> None:
    target = validate_url(url)
    assert target.host_header == host_header
    assert target.url == normalized
    assert validate_url(target.url) == target


# --- is_blocked ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("169.254.169.254", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "cgnat"),
        ("100.127.255.255", "cgnat"),
        ("169.254.1.1", "link_local"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("198.18.0.1", "reserved"),
        ("198.19.255.255", "reserved"),
        ("192.0.2.10", "reserved"),
        ("203.0.113.5", "reserved"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "broadcast"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("::", "unspecified"),
        ("::1", "loopback"),
        ("fe80::1", "link_local"),
        ("febf:ffff::1", "link_local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("ff02::1", "multicast"),
        ("ff0e::1", "multicast"),
        ("2001:db8::1", "reserved"),
        ("2001::1", "reserved"),
        ("100::1", "reserved"),
        ("::127.0.0.1", "reserved"),
        ("4000::1", "reserved"),
        ("64:ff9b:1::1", "private"),
    ],
)
def test_blocked_addresses(address: str, reason: str) -> None:
    assert is_blocked(ip(address), NO_ALLOWANCE) == reason


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "172.32.0.1",
        "100.128.0.1",
        "198.20.0.1",
        "2001:4860:4860::8888",
        "2606:4700:4700::1111",
        "223.255.255.255",
    ],
)
def test_public_addresses_are_allowed(address: str) -> None:
    assert is_blocked(ip(address), NO_ALLOWANCE) is None


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("2002:7f00:1::", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", "metadata"),  # 6to4 of 169.254.169.254
        ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
        ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64 of 169.254.169.254
    ],
)
def test_embedded_ipv4_is_judged_by_the_ipv4_address(address: str, reason: str) -> None:
    assert is_blocked(ip(address), NO_ALLOWANCE) == reason


@pytest.mark.parametrize("address", ["::ffff:8.8.8.8", "2002:808:808::1", "64:ff9b::808:808"])
def test_embedded_public_ipv4_is_allowed(address: str) -> None:
    assert is_blocked(ip(address), NO_ALLOWANCE) is None


def test_scoped_link_local_is_blocked() -> None:
    assert is_blocked(ip("fe80::1%eth0"), NO_ALLOWANCE) == "link_local"


def test_allowed_networks_permit_exactly_their_addresses() -> None:
    allowed = parse_allowed_networks(["127.0.0.0/8", "10.20.0.0/16", "::1/128"])
    assert is_blocked(ip("127.0.0.1"), allowed) is None
    assert is_blocked(ip("10.20.5.5"), allowed) is None
    assert is_blocked(ip("::1"), allowed) is None
    assert is_blocked(ip("10.21.0.1"), allowed) == "private"
    assert is_blocked(ip("169.254.169.254"), allowed) == "metadata"


def test_verdicts_kept_between_calls_follow_their_arguments() -> None:
    """Verdicts are kept per address and allowed networks (a list or a tuple alike): the same
    address is refused without its network and allowed with it, call after call, and a refused
    URL stays refused."""
    for _ in range(3):
        assert is_blocked(ip("10.20.5.5"), []) == "private"
        assert is_blocked(ip("10.20.5.5"), [ipaddress.ip_network("10.20.0.0/16")]) is None
        assert is_blocked(ip("10.20.5.5"), (ipaddress.ip_network("10.20.0.0/16"),)) is None
        with pytest.raises(InvalidTargetUrl):
            validate_url("https://user:pw@example.com/")
        with pytest.raises(InvalidTargetUrl, match="must be a str"):
            validate_url(["https://example.com/"])  # type: ignore[arg-type]
    assert validate_url("https://example.com/a") is validate_url("https://example.com/a")


def test_allowed_ipv4_network_covers_its_mapped_form() -> None:
    allowed = parse_allowed_networks(["127.0.0.0/8"])
    assert is_blocked(ip("::ffff:127.0.0.1"), allowed) is None
    assert is_blocked(ip("::ffff:10.0.0.1"), allowed) == "private"


@st.composite
def private_v4(draw: st.DrawFn) -> ipaddress.IPv4Address:
    net = ipaddress.IPv4Network(
        draw(st.sampled_from(["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"]))
    )
    return net[draw(st.integers(0, net.num_addresses - 1))]


any_v4 = st.integers(0, 2**32 - 1).map(ipaddress.IPv4Address)
any_v6 = st.integers(0, 2**128 - 1).map(ipaddress.IPv6Address)


@given(private_v4())
def test_every_rfc1918_address_is_private(address: ipaddress.IPv4Address) -> None:
    assert is_blocked(address, NO_ALLOWANCE) == "private"


@given(any_v4)
def test_mapped_form_gets_the_same_verdict_as_the_ipv4_address(
    address: ipaddress.IPv4Address,
) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    nat64 = ipaddress.IPv6Address((0x64FF9B << 96) | int(address))
    sixtofour = ipaddress.IPv6Address((0x2002 << 112) | (int(address) << 80) | 1)
    expected = is_blocked(address, NO_ALLOWANCE)
    assert is_blocked(mapped, NO_ALLOWANCE) == expected
    assert is_blocked(nat64, NO_ALLOWANCE) == expected
    assert is_blocked(sixtofour, NO_ALLOWANCE) == expected


@given(any_v4)
def test_python_private_or_special_v4_is_never_allowed(address: ipaddress.IPv4Address) -> None:
    special = (
        address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )
    if special:
        assert is_blocked(address, NO_ALLOWANCE) is not None


@given(any_v6)
def test_non_global_v6_is_never_allowed(address: ipaddress.IPv6Address) -> None:
    leads_to_v4 = (
        address.ipv4_mapped or address.sixtofour or address in ipaddress.ip_network("64:ff9b::/96")
    )
    if not leads_to_v4 and not address.is_global:
        assert is_blocked(address, NO_ALLOWANCE) is not None


@given(st.one_of(any_v4, any_v6))
def test_an_allowed_network_always_wins(address: IPAddress) -> None:
    prefix = 32 if address.version == 4 else 128
    assert is_blocked(address, [ipaddress.ip_network(f"{address}/{prefix}")]) is None


# --- resolve_target -----------------------------------------------------------------------------


def fake_resolver(*addresses: str, record: list[tuple[str, int]] | None = None) -> Any:
    def resolve(host: str, port: int, family: int = 0, type: int = 0) -> Sequence[tuple[Any, ...]]:
        if record is not None:
            record.append((host, port))
        results: list[tuple[Any, ...]] = []
        for address in addresses:
            if ":" in address:
                results.append((socket.AF_INET6, socket.SOCK_STREAM, 6, "", (address, port, 0, 0)))
            else:
                results.append((socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port)))
        return results

    return resolve


def test_resolves_and_pins_the_first_address() -> None:
    calls: list[tuple[str, int]] = []
    resolved = resolve_target(
        "https://hooks.example.com/in",
        NO_ALLOWANCE,
        resolver=fake_resolver("93.184.216.34", "93.184.216.35", record=calls),
    )
    assert resolved == ResolvedTarget(
        url=TargetUrl("https", "hooks.example.com", 443, "/in"), ip=ip("93.184.216.34")
    )
    assert calls == [("hooks.example.com", 443)]


def test_duplicate_answers_are_collapsed_in_order() -> None:
    resolved = resolve_target(
        "http://example.com:8080/",
        NO_ALLOWANCE,
        resolver=fake_resolver("2606:4700::1", "93.184.216.34", "2606:4700::1"),
    )
    assert resolved.ip == ip("2606:4700::1")


def test_any_blocked_answer_refuses_the_target() -> None:
    with pytest.raises(BlockedTarget) as caught:
        resolve_target(
            "https://rebind.example/",
            NO_ALLOWANCE,
            resolver=fake_resolver("93.184.216.34", "169.254.169.254"),
        )
    assert caught.value.reason == "metadata"
    assert caught.value.ip == ip("169.254.169.254")
    assert "rebind.example" in str(caught.value) and "metadata" in str(caught.value)
    # The message reaches API callers and logs: it names the kind of address, never the address.
    assert "169.254.169.254" not in str(caught.value)
    assert str(caught.value) == (
        "rebind.example is not allowed as a target: it resolves to a cloud metadata address"
    )
    assert isinstance(caught.value, ValueError)


def test_ip_literal_needs_no_resolver() -> None:
    def must_not_resolve(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an IP literal must not be resolved")

    resolved = resolve_target("https://93.184.216.34/h", NO_ALLOWANCE, resolver=must_not_resolve)
    assert resolved.ip == ip("93.184.216.34")
    with pytest.raises(BlockedTarget, match="loopback"):
        resolve_target("http://[::1]/", NO_ALLOWANCE, resolver=must_not_resolve)


def test_allowed_network_lets_local_development_through() -> None:
    allowed = parse_allowed_networks(["127.0.0.0/8", "::1/128"])
    resolved = resolve_target("http://localhost:9000/", allowed, fake_resolver("::1", "127.0.0.1"))
    assert resolved.ip == ip("::1")


def test_no_addresses_is_a_resolution_error() -> None:
    with pytest.raises(socket.gaierror, match="no IP address"):
        resolve_target("https://empty.example/", NO_ALLOWANCE, fake_resolver())


def test_resolver_errors_propagate() -> None:
    def failing(*args: Any, **kwargs: Any) -> Any:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    with pytest.raises(socket.gaierror, match="not known"):
        resolve_target("https://nowhere.example/", NO_ALLOWANCE, failing)


def test_invalid_url_is_refused_before_resolving() -> None:
    with pytest.raises(InvalidTargetUrl, match="scheme"):
        resolve_target("ftp://example.com/", NO_ALLOWANCE, fake_resolver("93.184.216.34"))


def test_ip_literal_with_the_default_resolver_stays_offline() -> None:
    # conftest.py makes socket.getaddrinfo raise, so this passes only if nothing is resolved.
    assert resolve_target("https://8.8.8.8/", NO_ALLOWANCE).ip == ip("8.8.8.8")


def test_default_resolver_is_getaddrinfo() -> None:
    with pytest.raises(RuntimeError, match="must not touch the network"):
        resolve_target("https://example.com/", NO_ALLOWANCE)


# --- parse_allowed_networks ---------------------------------------------------------------------


def test_parse_allowed_networks() -> None:
    assert parse_allowed_networks(["127.0.0.0/8", " ::1 ", "10.0.0.5"]) == (
        ipaddress.ip_network("127.0.0.0/8"),
        ipaddress.ip_network("::1/128"),
        ipaddress.ip_network("10.0.0.5/32"),
    )
    assert parse_allowed_networks([]) == ()


@pytest.mark.parametrize("bad", ["localhost", "127.0.0.1/8", "10.0.0.0/33", ""])
def test_bad_allowed_network_is_named(bad: str) -> None:
    with pytest.raises(ValueError, match=f"allowed network {bad!r}"):
        parse_allowed_networks(["127.0.0.0/8", bad])


def test_a_single_str_is_not_a_list_of_networks() -> None:
    with pytest.raises(TypeError, match="not a single str"):
        parse_allowed_networks("127.0.0.0/8")


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://hooks.example.com/in?token=s3cret", "https://hooks.example.com"),
        ("http://user:pw@10.0.0.1:8080/a/b", "http://10.0.0.1:8080"),
        ("https://[2001:db8::1]:8443/x", "https://[2001:db8::1]:8443"),
    ],
)
def test_display_origin_keeps_paths_queries_and_credentials_out(url: str, shown: str) -> None:
    assert ssrf.display_origin(url) == shown
