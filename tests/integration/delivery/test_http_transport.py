"""What the transport puts on the wire and how it connects, against real HTTP and HTTPS servers
on loopback."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.receivers import Receiver, running_receiver
from tests.support.tls import TestCa
from tidings.delivery.http_transport import USER_AGENT, HttpTransport, Post, TlsProfile
from tidings.delivery.retry_policy import AttemptError
from tidings.delivery.ssrf import parse_allowed_networks

BODY = b'{"type":"order.paid","data":{"id":"ord_1"}}'


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as running:
        yield running


@pytest.fixture
def transport() -> Iterator[HttpTransport]:
    pinned = HttpTransport(allowed_networks=parse_allowed_networks(("127.0.0.0/8",)))
    yield pinned
    pinned.close()


def test_a_post_carries_the_body_the_signature_headers_and_the_original_host(
    receiver: Receiver, transport: HttpTransport
) -> None:
    url = f"http://localhost:{receiver.port}/ok/hook?tenant=7"
    result = transport.post(url, BODY, {"webhook-id": "msg_1"}, timeout_s=5)

    assert result.status_code == 200
    assert result.excerpt == "thanks"
    [request] = receiver.requests
    assert request.path == "/ok/hook?tenant=7"
    assert request.body == BODY
    assert request.headers["host"] == f"localhost:{receiver.port}"
    assert request.headers["content-length"] == str(len(BODY))
    assert request.headers["content-type"] == "application/json"
    assert request.headers["user-agent"] == USER_AGENT
    assert request.headers["accept-encoding"] == "identity"
    assert request.headers["webhook-id"] == "msg_1"


def test_characters_unsafe_in_a_request_line_are_percent_encoded(
    receiver: Receiver, transport: HttpTransport
) -> None:
    result = transport.post(receiver.url("ok/café?q=ü"), BODY, {}, timeout_s=5)

    assert result.status_code == 200
    [request] = receiver.requests
    assert request.path == "/ok/caf%C3%A9?q=%C3%BC"


def test_a_redirect_is_an_answer_and_is_not_followed(
    receiver: Receiver, transport: HttpTransport
) -> None:
    result = transport.post(receiver.url("status/307"), BODY, {}, timeout_s=5)

    assert result.status_code == 307
    assert len(receiver.requests) == 1


def test_connections_are_reused_across_posts(receiver: Receiver, transport: HttpTransport) -> None:
    for _ in range(5):
        assert transport.post(receiver.url("ok"), BODY, {}, timeout_s=5).status_code == 200

    assert len(receiver.requests) == 5
    assert receiver.connections == 1


def _resolver_to(ip: str) -> Any:
    def resolve(host: str, port: int, family: int = 0, type: int = 0) -> list[Any]:
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (ip, port))]

    return resolve


def test_a_name_goes_to_the_address_it_was_checked_at_and_keeps_its_host_header(
    receiver: Receiver,
) -> None:
    # Whatever the name would resolve to later, the connection goes where it was checked.
    pinned = HttpTransport(
        allowed_networks=parse_allowed_networks(("127.0.0.0/8",)),
        resolver=_resolver_to("127.0.0.1"),
    )
    try:
        result = pinned.post(f"http://hooks.example:{receiver.port}/ok", BODY, {}, timeout_s=5)
    finally:
        pinned.close()
    assert result.status_code == 200
    [request] = receiver.requests
    assert request.headers["host"] == f"hooks.example:{receiver.port}"


def test_proxies_named_by_the_environment_are_not_used(
    receiver: Receiver, transport: HttpTransport, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)

    assert transport.post(receiver.url("ok"), BODY, {}, timeout_s=5).status_code == 200
    assert len(receiver.requests) == 1


def test_a_parts_requests_are_answered_side_by_side(
    receiver: Receiver, transport: HttpTransport
) -> None:
    posts = [Post(receiver.url("slow/500"), BODY, {"webhook-id": f"msg_{i}"}, 5) for i in range(8)]
    started = time.monotonic()
    sent = transport.post_all(posts)
    elapsed = time.monotonic() - started

    assert [s.result.status_code for s in sent] == [200] * 8
    # One after another they would take four seconds; side by side, about half a second (a
    # busy machine's scheduling allowed for).
    assert elapsed < 2.0, elapsed
    # In the order given, each with its own answer.
    assert sorted(r.headers["webhook-id"] for r in receiver.requests) == sorted(
        f"msg_{i}" for i in range(8)
    )


def test_one_slow_answer_in_a_part_keeps_its_own_time_only(
    receiver: Receiver, transport: HttpTransport
) -> None:
    posts = [
        Post(receiver.url("hang"), BODY, {}, 0.5),
        Post(receiver.url("ok"), BODY, {}, 5),
    ]
    hung, ok = transport.post_all(posts)
    assert (hung.result.error, ok.result.status_code) == (AttemptError.TIMEOUT, 200)
    # The quick one finished first, long before the other's deadline.
    assert ok.finished_at < hung.finished_at - 0.3


@pytest.fixture(scope="module")
def ca() -> TestCa:
    return TestCa()


def _server_context(ca: TestCa, tmp_path: Path, *, client_certificates: bool) -> ssl.SSLContext:
    issued = ca.issue("localhost", server=True)
    path = tmp_path / "server.pem"
    path.write_text(issued.certificate_pem + issued.private_key_pem)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(path))
    if client_certificates:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cadata=ca.pem)
    return context


def test_a_certificate_the_public_roots_do_not_sign_is_refused(
    ca: TestCa, tmp_path: Path, transport: HttpTransport
) -> None:
    with running_receiver(_server_context(ca, tmp_path, client_certificates=False)) as tls:
        result = transport.post(tls.url("ok", "localhost"), BODY, {}, timeout_s=5)
        assert (result.status_code, result.error) == (None, AttemptError.TLS)
        assert tls.requests == []


def test_an_endpoints_own_ca_is_trusted_and_the_name_is_still_checked(
    ca: TestCa, tmp_path: Path
) -> None:
    profile = TlsProfile(ca_pem=ca.pem.encode())
    # "elsewhere.example" resolves to the receiver's address, but its certificate names
    # localhost and 127.0.0.1 only.
    transport = HttpTransport(
        allowed_networks=parse_allowed_networks(("127.0.0.0/8",)),
        resolver=_resolver_to("127.0.0.1"),
    )
    try:
        with running_receiver(_server_context(ca, tmp_path, client_certificates=False)) as tls:
            good = transport.post(tls.url("ok", "localhost"), BODY, {}, 5, profile)
            wrong_name = transport.post(tls.url("ok", "elsewhere.example"), BODY, {}, 5, profile)
            assert good.status_code == 200
            assert (wrong_name.status_code, wrong_name.error) == (None, AttemptError.TLS)
            assert len(tls.requests) == 1
    finally:
        transport.close()


def test_a_client_certificate_is_presented_and_its_connection_is_not_lent_to_others(
    ca: TestCa, tmp_path: Path
) -> None:
    issued = ca.issue("tidings-sender")
    with_certificate = TlsProfile(
        ca_pem=ca.pem.encode(),
        certificate_pem=issued.certificate_pem.encode(),
        key_pem=issued.private_key_pem.encode(),
    )
    without = TlsProfile(ca_pem=ca.pem.encode())
    transport = HttpTransport(
        allowed_networks=parse_allowed_networks(("127.0.0.0/8",)),
        resolver=_resolver_to("127.0.0.1"),
    )
    try:
        with running_receiver(_server_context(ca, tmp_path, client_certificates=True)) as mtls:
            url = mtls.url("ok", "localhost")
            assert transport.post(url, BODY, {}, 5, with_certificate).status_code == 200
            # The same server, without the certificate: the connection made with it is never
            # reused for this request, so the server refuses it.
            refused = transport.post(url, BODY, {}, 5, without)
            assert refused.status_code is None
            assert refused.error in (AttemptError.TLS, AttemptError.CONNECTION_RESET)
            assert transport.post(url, BODY, {}, 5, with_certificate).status_code == 200
            assert len(mtls.requests) == 2
    finally:
        transport.close()
