"""The demo receivers: each kind behaves as described and counts what it accepted."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

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
