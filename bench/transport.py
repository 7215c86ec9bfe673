"""A POST's CPU: the sender's transport against a ``requests.Session``, on one receiver.

Both POST the same signed body with the same headers to a receiver in its own process
(``bench/sender.py``'s), over kept-alive connections: the baseline through a plain
``requests.Session`` (what a sender written the obvious way does, with none of the transport's
guards), then ``HttpTransport`` (SSRF check, pinned address, deadline, bounded read). Each side
runs twice: ``--posts`` requests one after another with the receiver answering at once (the
cost of the code itself, caches warm), then ``--concurrent-posts`` ``--concurrency`` at a time
with the receiver answering after ``--latency-ms``, each side as it would send a sender's part:
the session from that many threads (every request sleeps on its socket and wakes its thread
again), the transport with ``post_all`` (every request of the part on one thread at once).

CPU is this process's (user and system) per request. The last line is JSON:
``transport_cpu_ms``, ``session_cpu_ms`` and ``ratio`` (session over transport) for each of the
two runs. Run: ``python bench/transport.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import requests
from sender import SECRET, receiver
from support import ROOT

sys.path.insert(0, str(ROOT))

from tidings.delivery import signing
from tidings.delivery.http_transport import HttpTransport, Post
from tidings.delivery.ssrf import parse_allowed_networks

BODY = json.dumps(
    {"type": "order.paid", "data": {"id": "ord_1", "amount": 4200, "currency": "EUR"}}
).encode()
TIMEOUT_S = 15.0


def cpu_ms_per_post(post: Callable[[], int], count: int, concurrency: int) -> float:
    """This process's CPU per call of ``post``, ``count`` calls from ``concurrency`` threads."""
    with ThreadPoolExecutor(concurrency) as pool:
        # The first calls open the connections; they are not what is measured.
        list(pool.map(lambda _: post(), range(concurrency)))
        started = time.process_time()
        statuses = list(pool.map(lambda _: post(), range(count)))
        spent = time.process_time() - started
    return _checked(statuses, spent, count)


def cpu_ms_per_part(post_part: Callable[[], list[int]], count: int, concurrency: int) -> float:
    """This process's CPU per request of ``post_part`` (``concurrency`` requests at once on
    this thread), over ``count`` requests."""
    # The first part opens the connections; it is not what is measured.
    post_part()
    started = time.process_time()
    statuses = [status for _ in range(count // concurrency) for status in post_part()]
    spent = time.process_time() - started
    return _checked(statuses, spent, len(statuses))


def _checked(statuses: list[int], spent_s: float, count: int) -> float:
    if set(statuses) != {200}:
        raise SystemExit(f"the receiver answered {sorted(set(statuses))}")
    return spent_s * 1000 / count


def measure(url: str, count: int, concurrency: int) -> dict[str, float]:
    headers = signing.webhook_headers("msg_bench", int(time.time()), BODY, [SECRET])
    transport = HttpTransport(allowed_networks=parse_allowed_networks(["127.0.0.0/8"]))
    session = requests.Session()
    session_headers = {**headers, "Content-Type": "application/json"}

    def by_session() -> int:
        return session.post(url, data=BODY, headers=session_headers, timeout=TIMEOUT_S).status_code

    def by_transport() -> int:
        return transport.post(url, BODY, headers, TIMEOUT_S).status_code or 0

    part = [Post(url, BODY, headers, TIMEOUT_S)] * concurrency

    def part_by_transport() -> list[int]:
        return [sent.result.status_code or 0 for sent in transport.post_all(part)]

    try:
        session_ms = cpu_ms_per_post(by_session, count, concurrency)
        if concurrency == 1:
            transport_ms = cpu_ms_per_post(by_transport, count, 1)
        else:
            transport_ms = cpu_ms_per_part(part_by_transport, count, concurrency)
    finally:
        session.close()
        transport.close()
    return {
        "transport_cpu_ms": round(transport_ms, 3),
        "session_cpu_ms": round(session_ms, 3),
        "ratio": round(session_ms / transport_ms, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--posts", type=int, default=3000)
    parser.add_argument("--concurrent-posts", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--latency-ms", type=int, default=100)
    args = parser.parse_args()

    with receiver(0) as url:
        at_once = measure(url, args.posts, 1)
    with receiver(args.latency_ms) as url:
        waiting = measure(url, args.concurrent_posts, args.concurrency)
    print(
        f"one after another, answered at once: transport {at_once['transport_cpu_ms']} ms, "
        f"session {at_once['session_cpu_ms']} ms of CPU per POST; {args.concurrency} at once, "
        f"answered after {args.latency_ms} ms: transport {waiting['transport_cpu_ms']} ms, "
        f"session {waiting['session_cpu_ms']} ms"
    )
    print(json.dumps({"at_once": at_once, "waiting": waiting}))


if __name__ == "__main__":
    main()
