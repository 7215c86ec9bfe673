"""The receiver zoo: each hostile kind misbehaves exactly as it says, on the wire."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import requests
import urllib3

from tidings.local.receivers import (
    DRIP_BODY_BYTES,
    GARBAGE,
    HUGE_BODY_BYTES,
    HUGE_HEADERS_BYTES,
    PRIVATE_TARGET_PATH,
    UNRESOLVABLE_HOST,
    UNUSABLE_RETRY_AFTERS,
    ZOO,
    Kind,
    Receivers,
)


@pytest.fixture(scope="module")
def zoo() -> Iterator[Receivers]:
    running = Receivers((*ZOO, Kind.HEALTHY), seed=3).start()
    yield running
    running.stop()


def _raw_post(url: str, *, read_bytes: int = 1 << 20, timeout_s: float = 5) -> bytes:
    """POST over a plain socket and return what came back (up to ``read_bytes``)."""
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout_s) as sock:
        sock.sendall(
            f"POST {parts.path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            "Content-Length: 2\r\n\r\n{}".encode()
        )
        received = b""
        try:
            while len(received) < read_bytes:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                received += chunk
        except ConnectionResetError:
            received += b"<RST>"
        return received


def _head(raw: bytes) -> list[bytes]:
    return raw.split(b"\r\n\r\n", 1)[0].split(b"\r\n")


def test_unusable_retry_afters_come_in_every_form(zoo: Receivers) -> None:
    seen = []
    for _ in UNUSABLE_RETRY_AFTERS:
        lines = _head(_raw_post(zoo.url(Kind.UNUSABLE_RETRY_AFTER)))
        status = int(lines[0].split()[1])
        values = tuple(
            line.split(b":", 1)[1].strip().decode("utf-8")
            for line in lines
            if line.lower().startswith(b"retry-after:")
        )
        seen.append((status, values))
    assert seen == list(UNUSABLE_RETRY_AFTERS)
    assert (503, ("5", "7")) in seen, "one answer repeats the header"
    assert (429, ("\u0663",)) in seen, "one sends a non-ASCII digit as UTF-8"


def test_the_redirect_points_at_a_private_address_that_counts_its_visitors(
    zoo: Receivers,
) -> None:
    reply = requests.post(zoo.url(Kind.REDIRECT_PRIVATE), json={}, allow_redirects=False, timeout=5)
    assert reply.status_code == 307
    target = urlsplit(reply.headers["Location"])
    assert (target.hostname, target.path) == ("127.0.0.1", PRIVATE_TARGET_PATH)
    assert zoo.strays == {}
    requests.post(reply.headers["Location"], json={}, timeout=5)
    assert zoo.strays == {PRIVATE_TARGET_PATH: 1}
    zoo.strays.clear()


@pytest.mark.parametrize(
    ("kind", "status"), [(Kind.UNAUTHORIZED, 401), (Kind.BAD_REQUEST, 400), (Kind.TOO_LARGE, 413)]
)
def test_refusals(zoo: Receivers, kind: Kind, status: int) -> None:
    assert requests.post(zoo.url(kind), json={}, timeout=5).status_code == status


def test_a_body_of_50_mb_is_offered_whole(zoo: Receivers) -> None:
    raw = _raw_post(zoo.url(Kind.HUGE_BODY), read_bytes=4 << 20)
    assert f"Content-Length: {HUGE_BODY_BYTES}".encode() in _head(raw)
    assert len(raw) >= 4 << 20, "it keeps sending for as long as it is read"


def test_a_dripped_body_comes_a_byte_a_second(zoo: Receivers) -> None:
    parts = urlsplit(zoo.url(Kind.DRIP))
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
        sock.sendall(f"POST {parts.path} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += sock.recv(4096)
        assert f"Content-Length: {DRIP_BODY_BYTES}".encode() in head
        started = time.monotonic()
        body = head.split(b"\r\n\r\n", 1)[1]
        while len(body) < 3:
            body += sock.recv(1)
        assert time.monotonic() - started >= 1.5


def test_response_headers_of_1_mb(zoo: Receivers) -> None:
    raw = _raw_post(zoo.url(Kind.HUGE_HEADERS), read_bytes=2 << 20)
    head = raw.split(b"\r\n\r\n", 1)[0]
    assert head.startswith(b"HTTP/1.1 200")
    assert len(head) >= HUGE_HEADERS_BYTES * 0.99


def test_a_reset_after_the_status_line(zoo: Receivers) -> None:
    assert _raw_post(zoo.url(Kind.RESET_AFTER_STATUS)) == b"HTTP/1.1 200 OK\r\n<RST>"


def test_garbage_instead_of_http(zoo: Receivers) -> None:
    assert _raw_post(zoo.url(Kind.GARBAGE)) == GARBAGE


def test_a_silent_server_accepts_and_never_answers(zoo: Receivers) -> None:
    with pytest.raises(requests.ReadTimeout):
        requests.post(zoo.url(Kind.SILENT), json={}, timeout=(2, 0.5))


def test_tls_with_a_certificate_nobody_signed(zoo: Receivers) -> None:
    url = zoo.url(Kind.SELF_SIGNED_TLS)
    assert url.startswith("https://127.0.0.1:")
    with pytest.raises(requests.exceptions.SSLError):
        requests.post(url, json={}, timeout=5)
    # Everything but its signature is in order: unverified, it answers like a healthy receiver.
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    assert requests.post(url, json={}, timeout=5, verify=False).status_code == 200


def test_a_name_that_does_not_resolve(zoo: Receivers) -> None:
    url = zoo.url(Kind.UNRESOLVABLE)
    assert urlsplit(url).hostname == UNRESOLVABLE_HOST
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo(UNRESOLVABLE_HOST, 80)
