"""The transport's pure parts: pinned TLS names, failure classification, refusals before I/O."""

from __future__ import annotations

import http.client
import socket
from typing import Any

import pytest
import requests
import urllib3.exceptions

from tidings.delivery.http_transport import (
    HttpTransport,
    PinnedAddressAdapter,
    classify_exception,
    host_name_of,
)
from tidings.delivery.retry_policy import AttemptError


def _resolver_to(ip: str) -> Any:
    def resolve(host: str, port: int, family: int = 0, type: int = 0) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]

    return resolve


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("hooks.example.com", "hooks.example.com"),
        ("hooks.example.com:8443", "hooks.example.com"),
        ("[2001:db8::1]:8443", "2001:db8::1"),
        ("[2001:db8::1]", "2001:db8::1"),
        (b"hooks.example.com", "hooks.example.com"),
        (None, None),
    ],
)
def test_host_name_of_a_host_header(header: str | bytes | None, name: str | None) -> None:
    assert host_name_of(header) == name


def test_a_tls_pool_to_a_pinned_address_verifies_the_host_name() -> None:
    request = requests.Request(
        "POST", "https://93.184.216.34:443/hook", headers={"Host": "hooks.example.com"}
    ).prepare()
    host_params, pool_kwargs = PinnedAddressAdapter().build_connection_pool_key_attributes(
        request, True
    )
    assert host_params["host"] == "93.184.216.34"
    assert pool_kwargs["server_hostname"] == "hooks.example.com"
    assert pool_kwargs["assert_hostname"] == "hooks.example.com"


def test_a_plain_http_pool_carries_no_tls_names() -> None:
    request = requests.Request(
        "POST", "http://93.184.216.34:80/hook", headers={"Host": "hooks.example.com"}
    ).prepare()
    _, pool_kwargs = PinnedAddressAdapter().build_connection_pool_key_attributes(request, True)
    assert "server_hostname" not in pool_kwargs


def _wrapped(reason: BaseException) -> requests.ConnectionError:
    inner = urllib3.exceptions.MaxRetryError(None, "/hook", reason)  # type: ignore[arg-type]
    return requests.ConnectionError(inner)


@pytest.mark.parametrize(
    ("exc", "kind"),
    [
        (requests.ReadTimeout("read timed out"), AttemptError.TIMEOUT),
        (requests.ConnectTimeout("connect timed out"), AttemptError.TIMEOUT),
        (requests.exceptions.SSLError("bad certificate"), AttemptError.TLS),
        (_wrapped(ConnectionRefusedError(111, "refused")), AttemptError.CONNECTION_REFUSED),
        (_wrapped(ConnectionResetError(104, "reset")), AttemptError.CONNECTION_RESET),
        (
            requests.ConnectionError(
                urllib3.exceptions.ProtocolError(
                    "aborted", http.client.RemoteDisconnected("closed")
                )
            ),
            AttemptError.CONNECTION_RESET,
        ),
        (requests.exceptions.ChunkedEncodingError("broken"), AttemptError.CONNECTION_RESET),
        (_wrapped(socket.gaierror(-2, "unknown name")), AttemptError.DNS),
        (requests.exceptions.InvalidHeader("bad"), AttemptError.OTHER),
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
