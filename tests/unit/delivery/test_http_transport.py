"""The transport's pure parts: where a request connects, its header lines, how an answer's head
and body are read, failure classification, refusals before any transfer."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pycurl
import pytest

from tidings.delivery.http_transport import (
    DRAIN_LIMIT_BYTES,
    FORM,
    JSON,
    MAX_HEADER_LINES,
    USER_AGENT,
    HttpTransport,
    Post,
    _header_lines,
    _Transfer,
    classify_curl_error,
    connect_to,
)
from tidings.delivery.retry_policy import AttemptError
from tidings.delivery.ssrf import ResolvedTarget, validate_url


def _resolver_to(ip: str) -> Any:
    def resolve(host: str, port: int, family: int = 0, type: int = 0) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]

    return resolve


def _target(url: str, ip: str) -> ResolvedTarget:
    return ResolvedTarget(validate_url(url), ipaddress.ip_address(ip))


@pytest.fixture(autouse=True)
def _no_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    """libcurl's sockets are not Python's: the unit tests' network guard cannot see them, so
    no test here may start a transfer at all."""

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("a unit test started a transfer")

    monkeypatch.setattr("tidings.delivery.http_transport._prepare", refuse)


def test_a_request_connects_to_the_checked_address_under_its_own_name() -> None:
    target = _target("https://hooks.example.com/hook", "93.184.216.34")
    assert connect_to(target) == "hooks.example.com:443:93.184.216.34:443"


def test_ipv6_addresses_are_bracketed_on_both_sides() -> None:
    assert (
        connect_to(_target("https://[2001:db8::1]:8443/hook", "2001:db8::1"))
        == "[2001:db8::1]:8443:[2001:db8::1]:8443"
    )
    assert (
        connect_to(_target("http://hooks.example.com:8080/", "2001:db8::7"))
        == "hooks.example.com:8080:[2001:db8::7]:8080"
    )


def test_tidings_own_headers_win_and_libcurl_makes_host_and_length() -> None:
    post = Post(
        "https://hooks.example.com/",
        b"{}",
        {
            "webhook-id": "msg_1",
            "user-agent": "spoofed",
            "Host": "evil",
            "Content-Length": "9",
            "Expect": "100-continue",
            "X-Empty": "",
        },
        5,
    )
    lines = _header_lines(post)
    assert "webhook-id: msg_1" in lines
    assert f"User-Agent: {USER_AGENT}" in lines
    assert "user-agent: spoofed" not in lines
    assert f"Content-Type: {JSON}" in lines
    assert "Accept-Encoding: identity" in lines
    # "Expect:" keeps libcurl from sending its own: the body goes at once, unasked.
    assert [line for line in lines if line.lower().startswith("expect")] == ["Expect:"]
    assert not any(line.lower().startswith(("host:", "content-length:")) for line in lines)
    # An empty value is sent empty (libcurl's "Name;"), not dropped ("Name:").
    assert "X-Empty;" in lines


def test_a_token_request_is_a_form_that_accepts_json() -> None:
    lines = _header_lines(Post("https://auth.example.com/token", b"a=b", {}, 5, None, FORM))
    assert f"Content-Type: {FORM}" in lines
    assert f"Accept: {JSON}" in lines


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Api-Key": "a\r\nX-Injected: 1"},
        {"X-Api-Key": "a\nb"},
        {"X-Api-Key": "a\x00b"},
        {"Bad Name": "1"},
        {"X:Colon": "1"},
        {"": "1"},
    ],
)
def test_a_header_that_could_end_its_line_is_refused(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="cannot be sent as given"):
        _header_lines(Post("https://hooks.example.com/", b"{}", headers, 5))


def test_such_a_header_fails_its_own_request_and_no_other() -> None:
    addresses = {"good.example": "93.184.216.34", "inside.example": "10.0.0.1"}

    def resolve(host: str, port: int, family: int = 0, type: int = 0) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (addresses[host], port))]

    transport = HttpTransport(resolver=resolve)
    bad = Post("https://good.example/a", b"{}", {"X-Api-Key": "a\r\nb"}, 5)
    blocked = Post("https://inside.example/b", b"{}", {}, 5)
    first, second = transport.post_all([bad, blocked])
    assert (first.result.error, first.result.detail) == (
        AttemptError.INTERNAL,
        "a header name or value cannot be sent as given",
    )
    assert second.result.error is AttemptError.BLOCKED_ADDRESS


def _transfer(keep: int = 16, content_type: str = JSON) -> _Transfer:
    return _Transfer(None, Post("https://x.example/", b"", {}, 5, None, content_type), keep)  # type: ignore[arg-type]


def _head(transfer: _Transfer, *lines: bytes) -> list[int | None]:
    return [transfer.header(line) for line in lines]


def test_an_answer_stands_once_its_head_is_complete_whatever_the_body_does() -> None:
    transfer = _transfer()
    _head(transfer, b"HTTP/1.1 200 OK\r\n", b"Content-Length: 99\r\n", b"\r\n")
    transfer.write(b"thanks")
    # The body then broke off (or ran past the deadline): the answer is the 200.
    result, kept = transfer.outcome(pycurl.E_OPERATION_TIMEDOUT)
    assert (result.status_code, result.error, result.excerpt) == (200, None, "thanks")
    assert kept == b"thanks"


def test_an_interim_answer_is_forgotten_with_its_headers() -> None:
    transfer = _transfer()
    _head(transfer, b"HTTP/1.1 103 Early Hints\r\n", b"Retry-After: 5\r\n", b"\r\n")
    _head(transfer, b"HTTP/1.1 503 Unavailable\r\n", b"Retry-After: 120\r\n", b"\r\n")
    result, _ = transfer.outcome(None)
    assert (result.status_code, result.retry_after) == (503, "120")


def test_repeated_retry_afters_are_joined_so_the_policy_sees_them_all() -> None:
    transfer = _transfer()
    _head(
        transfer,
        b"HTTP/1.1 429 Too Many\r\n",
        b"retry-after: 1\r\n",
        b"Retry-After:  \xa92\r\n",
        b"\r\n",
    )
    assert transfer.outcome(None)[0].retry_after == "1, \u00a92"


def test_a_head_cut_off_before_its_end_is_the_network_failure() -> None:
    transfer = _transfer()
    _head(transfer, b"HTTP/1.1 200 OK\r\n", b"X-Partial: 1\r\n")
    result, _ = transfer.outcome(pycurl.E_RECV_ERROR)
    assert (result.status_code, result.error) == (None, AttemptError.CONNECTION_RESET)
    assert result.detail == "curl: recv_error"


def test_more_header_lines_than_http_client_takes_make_an_invalid_answer() -> None:
    transfer = _transfer()
    answers = _head(
        transfer,
        b"HTTP/1.1 200 OK\r\n",
        *(b"X-Filler: 1\r\n" for _ in range(MAX_HEADER_LINES + 1)),
    )
    # The line past the limit stops the transfer (an answer other than None or its length).
    assert answers[-1] == 0 and answers[:-1] == [None] * (MAX_HEADER_LINES + 1)
    result, _ = transfer.outcome(pycurl.E_WRITE_ERROR)
    assert (result.status_code, result.error) == (None, AttemptError.INVALID_RESPONSE)


def test_a_header_line_over_64_kib_makes_an_invalid_answer() -> None:
    transfer = _transfer()
    _head(transfer, b"HTTP/1.1 200 OK\r\n")
    assert transfer.header(b"X-Huge: " + b"a" * 65536 + b"\r\n") == 0
    assert transfer.outcome(pycurl.E_WRITE_ERROR)[0].error is AttemptError.INVALID_RESPONSE


def test_the_body_is_kept_to_the_excerpt_and_read_to_the_drain_limit() -> None:
    transfer = _transfer(keep=4)
    _head(transfer, b"HTTP/1.1 200 OK\r\n", b"\r\n")
    assert transfer.write(b"abcdefgh") is None
    assert transfer.write(b"x" * (DRAIN_LIMIT_BYTES - 8)) is None
    # Past the excerpt and the drain limit, reading stops (0 stops the transfer).
    assert transfer.write(b"y" * 8) == 0
    result, kept = transfer.outcome(pycurl.E_WRITE_ERROR)
    assert (result.status_code, result.excerpt, kept) == (200, "abcd", b"abcd")


def test_an_excerpt_holds_no_nul_and_survives_broken_utf8() -> None:
    transfer = _transfer()
    _head(transfer, b"HTTP/1.1 500 Oops\r\n", b"\r\n")
    transfer.write(b"a\x00\xffb")
    assert transfer.outcome(None)[0].excerpt == "a\ufffd\ufffdb"


def test_a_token_answer_keeps_its_body_and_makes_no_excerpt() -> None:
    transfer = _transfer(keep=64, content_type=FORM)
    _head(transfer, b"HTTP/1.1 200 OK\r\n", b"\r\n")
    transfer.write(b'{"access_token": "t"}')
    result, kept = transfer.outcome(None)
    assert result.excerpt is None and kept == b'{"access_token": "t"}'


@pytest.mark.parametrize(
    ("errno", "kind"),
    [
        (pycurl.E_OPERATION_TIMEDOUT, AttemptError.TIMEOUT),
        (pycurl.E_COULDNT_CONNECT, AttemptError.CONNECTION_REFUSED),
        (pycurl.E_GOT_NOTHING, AttemptError.CONNECTION_RESET),
        (pycurl.E_SEND_ERROR, AttemptError.CONNECTION_RESET),
        (8, AttemptError.INVALID_RESPONSE),  # CURLE_WEIRD_SERVER_REPLY: not HTTP
        (pycurl.E_UNSUPPORTED_PROTOCOL, AttemptError.INVALID_RESPONSE),  # HTTP/0.9
        (100, AttemptError.INVALID_RESPONSE),  # CURLE_TOO_LARGE
        (pycurl.E_PEER_FAILED_VERIFICATION, AttemptError.TLS),
        (pycurl.E_SSL_CONNECT_ERROR, AttemptError.TLS),
        (98, AttemptError.TLS),  # CURLE_SSL_CLIENTCERT
        (pycurl.E_OUT_OF_MEMORY, AttemptError.OTHER),
        (None, AttemptError.OTHER),
    ],
)
def test_curl_failures_are_classified(errno: int | None, kind: AttemptError) -> None:
    assert classify_curl_error(errno) is kind


def test_a_blocked_address_is_refused_before_any_transfer() -> None:
    transport = HttpTransport(resolver=_resolver_to("10.1.2.3"))
    result = transport.post("https://hooks.example.com/x", b"{}", {}, 1.0)
    assert (result.status_code, result.error) == (None, AttemptError.BLOCKED_ADDRESS)
    # The detail is logged: it says why in general terms and never names the address.
    assert (
        result.detail
        == "hooks.example.com is not allowed as a target: it resolves to a private address"
    )


def test_an_invalid_url_is_refused_before_any_transfer() -> None:
    result = HttpTransport().post("ftp://hooks.example.com/x", b"{}", {}, 1.0)
    assert result.error is AttemptError.INVALID_URL


def test_a_name_that_does_not_resolve_is_a_dns_failure() -> None:
    def no_answer(host: str, port: int, family: int = 0, type: int = 0) -> list[Any]:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    result = HttpTransport(resolver=no_answer).post("https://nowhere.example/x", b"{}", {}, 1.0)
    assert result.error is AttemptError.DNS
