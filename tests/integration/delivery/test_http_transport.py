"""What the transport puts on the wire, against a real HTTP server on loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.receivers import Receiver, running_receiver
from tidings.delivery.http_transport import USER_AGENT, HttpTransport
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
