"""The transport's pure parts: pinned TLS names, failure classification, refusals before I/O."""

from __future__ import annotations

import http.client
import socket
import ssl
from typing import Any

import pytest
import urllib3.exceptions

from tidings.delivery.http_transport import (
    HttpTransport,
    TlsProfile,
    classify_exception,
    pool_key,
)
from tidings.delivery.retry_policy import AttemptError
from tidings.delivery.ssrf import validate_url


def _resolver_to(ip: str) -> Any:
    def resolve(host: str, port: int, family: int = 0, type: int = 0) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]

    return resolve


def test_a_tls_pool_to_a_pinned_address_verifies_the_host_name() -> None:
    target = validate_url("https://hooks.example.com/hook")
    key = pool_key(target, "93.184.216.34", None)
    assert (key["scheme"], key["host"], key["port"]) == ("https", "93.184.216.34", 443)
    assert key["pool_kwargs"]["server_hostname"] == "hooks.example.com"
    assert key["pool_kwargs"]["assert_hostname"] == "hooks.example.com"
    assert key["pool_kwargs"]["cert_reqs"] == "CERT_REQUIRED"
    assert key["pool_kwargs"]["ca_certs"]


def test_an_endpoints_tls_profile_alone_decides_what_its_pool_trusts() -> None:
    profile = TlsProfile(ssl.create_default_context())
    key = pool_key(validate_url("https://[2001:db8::1]:8443/hook"), "2001:db8::1", profile)
    assert key["port"] == 8443
    assert key["pool_kwargs"]["ssl_context"] is profile.context
    assert "ca_certs" not in key["pool_kwargs"]
    # The IPv6 literal is the name checked, without its brackets.
    assert key["pool_kwargs"]["server_hostname"] == "2001:db8::1"


def test_a_plain_http_pool_carries_no_tls_names() -> None:
    key = pool_key(validate_url("http://hooks.example.com/hook"), "93.184.216.34", None)
    assert key == {"scheme": "http", "host": "93.184.216.34", "port": 80}


def _unconnected(reason: OSError) -> urllib3.exceptions.NewConnectionError:
    """What urlopen raises for a connection that could not be made, chained to its reason."""
    try:
        raise urllib3.exceptions.NewConnectionError(None, "could not connect") from reason  # type: ignore[arg-type]
    except urllib3.exceptions.NewConnectionError as exc:
        return exc


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (
            urllib3.exceptions.ReadTimeoutError(None, "/hook", "read timed out"),  # type: ignore[arg-type]
            AttemptError.TIMEOUT,
        ),
        (urllib3.exceptions.ConnectTimeoutError(None, "connect timed out"), AttemptError.TIMEOUT),
        (urllib3.exceptions.SSLError(ssl.SSLError(1, "bad certificate")), AttemptError.TLS),
        (_unconnected(ConnectionRefusedError(111, "refused")), AttemptError.CONNECTION_REFUSED),
        (
            urllib3.exceptions.ProtocolError("aborted", ConnectionResetError(104, "reset")),
            AttemptError.CONNECTION_RESET,
        ),
        # A connection that could not be made for another reason (no route) waited it out.
        (_unconnected(OSError(113, "no route to host")), AttemptError.TIMEOUT),
        (
            urllib3.exceptions.ProtocolError("aborted", http.client.RemoteDisconnected("closed")),
            AttemptError.CONNECTION_RESET,
        ),
        (socket.gaierror(-2, "unknown name"), AttemptError.DNS),
        (urllib3.exceptions.LocationValueError("bad"), AttemptError.OTHER),
    ],
)
def test_network_failures_are_classified(exc: BaseException, kind: AttemptError) -> None:
    assert classify_exception(exc) is kind


def test_a_blocked_address_is_refused_before_any_connection() -> None:
    # The unit-test network guard would fail this test on any connection attempt.
    transport = HttpTransport(resolver=_resolver_to("10.1.2.3"))
    result = transport.post("https://hooks.example.com/x", b"{}", {}, 1.0)
    assert (result.status_code, result.error) == (None, AttemptError.BLOCKED_ADDRESS)
    # The detail is logged: it says why in general terms and never names the address.
    assert (
        result.detail
        == "hooks.example.com is not allowed as a target: it resolves to a private address"
    )


def test_an_invalid_url_is_refused_before_any_connection() -> None:
    result = HttpTransport().post("ftp://hooks.example.com/x", b"{}", {}, 1.0)
    assert result.error is AttemptError.INVALID_URL


def test_a_name_that_does_not_resolve_is_a_dns_failure() -> None:
    def no_answer(host: str, port: int, family: int = 0, type: int = 0) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    result = HttpTransport(resolver=no_answer).post("https://nowhere.example/x", b"{}", {}, 1.0)
    assert result.error is AttemptError.DNS
