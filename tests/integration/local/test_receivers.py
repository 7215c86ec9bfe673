"""The demo receivers: each kind behaves as described and counts what it accepted."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import requests
from standardwebhooks import Webhook

from tests.support.seed import TEST_SECRET
from tests.support.webhooks import standard_verifier
from tidings.delivery import signing
from tidings.local.receivers import Kind, Receivers, verify_signature


@pytest.fixture
def receivers() -> Iterator[Receivers]:
    found = Receivers(verifier=standard_verifier, seed=7).start()
    for kind in Kind:
        found.register_secret(kind, TEST_SECRET)
    yield found
    found.stop()


def _post(
    receivers: Receivers, kind: Kind, msg_id: str, secret: str = TEST_SECRET, timeout_s: float = 20
) -> int:
    body = b'{"n": 1}'
    headers = signing.webhook_headers(msg_id, int(time.time()), body, [secret])
    reply = requests.post(receivers.url(kind), data=body, headers=headers, timeout=timeout_s)
    return reply.status_code


def test_healthy_accepts_and_counts_duplicates(receivers: Receivers) -> None:
    assert _post(receivers, Kind.HEALTHY, "msg_1") == 200
    assert _post(receivers, Kind.HEALTHY, "msg_1") == 200
    assert _post(receivers, Kind.HEALTHY, "msg_2") == 200
    tally = receivers.snapshot()[Kind.HEALTHY]
    assert tally.requests == 3
    assert tally.seen == {"msg_1": 2, "msg_2": 1}
    assert tally.accepted == {"msg_1": 2, "msg_2": 1}
    assert tally.duplicates == 1
    assert tally.bad_signatures == 0


def test_a_wrong_signature_is_counted(receivers: Receivers) -> None:
    other = signing.generate_secret()
    assert _post(receivers, Kind.HEALTHY, "msg_x", secret=other) == 200
    assert receivers.snapshot()[Kind.HEALTHY].bad_signatures == 1


def _send_cut_short(receivers: Receivers, kind: Kind, body: bytes, sent: int) -> bytes:
    """A correctly signed request for ``body`` of which only the headers and the first ``sent``
    bytes of the body leave before the sender's side of the connection closes (as when a sender
    dies between its writes); what came back before the receiver closed."""
    headers = signing.webhook_headers("msg_cut", int(time.time()), body, [TEST_SECRET])
    host, port = receivers._server.server_address[:2]
    head = [f"POST /{kind.value} HTTP/1.1", f"Host: {host}:{port}"]
    head += [f"{name}: {value}" for name, value in headers.items()]
    head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
    with socket.create_connection((str(host), port), timeout=10) as conn:
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body[:sent])
        conn.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    return answer


@pytest.mark.parametrize("sent", [0, 10], ids=["headers-only", "part-of-the-body"])
def test_a_request_cut_short_is_incomplete_not_a_bad_signature(
    receivers: Receivers, sent: int
) -> None:
    answer = _send_cut_short(receivers, Kind.HEALTHY, b'{"type": "cut", "data": {"n": 1}}', sent)
    tally = receivers.snapshot()[Kind.HEALTHY]
    assert tally.bad_signatures == 0
    assert tally.incomplete == 1
    assert tally.requests == 1
    assert answer == b"", "nobody is left to answer a request cut short"
    assert not tally.seen and not tally.accepted and not tally.statuses
    # The whole body, sent the same way, verifies: the signature was never at fault.
    assert _send_cut_short(receivers, Kind.HEALTHY, b'{"type": "cut"}', 15).startswith(
        b"HTTP/1.1 200"
    )
    tally = receivers.snapshot()[Kind.HEALTHY]
    assert (tally.incomplete, tally.bad_signatures, tally.accepted) == (1, 0, {"msg_cut": 1})


# The real sender's transport, killed once its headers and part of its body have left: SIGKILL
# in the middle of a request, without depending on timing. The body is large, so libcurl sends
# it in many writes, and its progress callback (set here, after the transport's own options)
# ends the process once some of it, and not all, is on its way.
_KILLED_BETWEEN_HEADERS_AND_BODY = """
import os, signal, sys, time
import pycurl
from tidings.delivery import http_transport, signing
from tidings.delivery.ssrf import parse_allowed_networks

url, secret = sys.argv[1:3]
body = b'{"type": "killed", "data": "' + b"x" * (32 << 20) + b'"}'
prepare = http_transport._prepare

def die_mid_body(download_total, downloaded, upload_total, uploaded):
    if 0 < uploaded < upload_total:
        os.kill(os.getpid(), signal.SIGKILL)

def prepare_to_die_mid_body(curl, *args):
    prepare(curl, *args)
    curl.setopt(pycurl.NOPROGRESS, 0)
    curl.setopt(pycurl.XFERINFOFUNCTION, die_mid_body)

http_transport._prepare = prepare_to_die_mid_body
transport = http_transport.HttpTransport(allowed_networks=parse_allowed_networks(["127.0.0.0/8"]))
headers = signing.webhook_headers("msg_killed", int(time.time()), body, [secret])
transport.post(url, body, headers, 30)
"""


def test_a_sender_killed_mid_request_leaves_an_incomplete_request(receivers: Receivers) -> None:
    layers = Path(__file__).resolve().parents[3] / "layers" / "tidings"
    url = receivers.url(Kind.HEALTHY)
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_BETWEEN_HEADERS_AND_BODY, url, TEST_SECRET],
        env={**os.environ, "PYTHONPATH": str(layers)},
        timeout=60,
        check=False,
    )
    assert killed.returncode == -9
    deadline = time.monotonic() + 10
    while receivers.snapshot()[Kind.HEALTHY].requests == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    tally = receivers.snapshot()[Kind.HEALTHY]
    assert tally.bad_signatures == 0
    assert (tally.requests, tally.incomplete) == (1, 1)
    assert not tally.accepted


def test_gone_answers_410_and_flaky_fails_about_a_third(receivers: Receivers) -> None:
    assert _post(receivers, Kind.GONE, "g") == 410
    codes = [_post(receivers, Kind.FLAKY, f"f{i}") for i in range(200)]
    failures = sum(code >= 500 for code in codes)
    assert 30 <= failures <= 90
    assert set(codes) <= {200, 500, 502, 503}


def test_rate_limited_says_when_to_come_back(receivers: Receivers) -> None:
    body = b"{}"
    replies = []
    for i in range(60):
        headers = signing.webhook_headers(f"r{i}", int(time.time()), body, [TEST_SECRET])
        replies.append(
            requests.post(receivers.url(Kind.RATE_LIMITED), data=body, headers=headers, timeout=5)
        )
    limited = [r for r in replies if r.status_code == 429]
    assert limited, "a burst beyond the rate must be refused"
    assert all(r.headers["Retry-After"] == "1" for r in limited)
    assert sum(r.status_code == 200 for r in replies) >= 15


def test_dead_refuses_connections(receivers: Receivers) -> None:
    with pytest.raises(requests.ConnectionError):
        requests.post(receivers.url(Kind.DEAD), data=b"{}", timeout=5)


def test_chaos_resets_some_connections() -> None:
    chaos = Receivers((Kind.CHAOS,), seed=3).start()
    try:
        outcomes: set[str] = set()
        for i in range(200):
            try:
                outcomes.add(str(_post(chaos, Kind.CHAOS, f"c{i}", timeout_s=0.5)))
            except requests.Timeout:
                outcomes.add("timeout")
            except requests.ConnectionError:
                outcomes.add("reset")
            if {"200", "reset", "timeout"} <= outcomes and outcomes & {"500", "502", "503"}:
                break
        assert {"200", "reset", "timeout"} <= outcomes
        assert outcomes & {"500", "502", "503"}
        tally = chaos.snapshot()[Kind.CHAOS]
        assert tally.accepted, "only 2xx answers count as accepted"
        assert sum(tally.seen.values()) > sum(tally.accepted.values())
    finally:
        chaos.stop()


def test_own_verifier_agrees_with_the_reference_library() -> None:
    body = b'{"hello": "world"}'
    now = datetime.now(UTC)
    reference = Webhook(TEST_SECRET).sign("msg_42", now, body.decode())
    headers = {
        "webhook-id": "msg_42",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": f"v1,Ym9ndXM= {reference}",
    }
    assert verify_signature(TEST_SECRET, body, headers)
    assert standard_verifier(TEST_SECRET, body, headers)
    assert not verify_signature(TEST_SECRET, body + b" ", headers)
    stale = dict(headers, **{"webhook-timestamp": str(int(now.timestamp()) - 3600)})
    assert not verify_signature(TEST_SECRET, body, stale)


def test_latency_is_added_to_every_answer() -> None:
    delayed = Receivers((Kind.HEALTHY,), latency_s=0.2).start()
    try:
        started = time.monotonic()
        assert _post(delayed, Kind.HEALTHY, "late") == 200
        assert time.monotonic() - started >= 0.2
    finally:
        delayed.stop()
    with pytest.raises(ValueError, match="latency_s"):
        Receivers((Kind.HEALTHY,), latency_s=-1)
