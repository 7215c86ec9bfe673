"""Webhook receivers on loopback that behave like real endpoints, good and bad.

One HTTP server answers at ``/<kind>`` for every kind of behaviour. Each receiver checks the
Standard Webhooks signature with the endpoint's secret (once registered) and counts what it saw:
requests, the ``webhook-id`` of every message it accepted (so duplicates show), bad signatures.
A "dead" endpoint is a loopback port where nothing listens.
"""

from __future__ import annotations

import enum
import hmac
import random
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tidings.delivery import signing

# The slow receiver's latency is exponential with this mean: its p95 is 3 times the mean.
SLOW_MEAN_S = 1.0
SLOW_MAX_S = 8.0
FLAKY_FAILURE_RATE = 0.3
RATE_LIMIT_PER_S = 20.0
RETRY_AFTER_S = 1
# A chaos receiver fails 30 % of requests: 5xx answers, resets, and hangs past any timeout.
CHAOS_5XX_RATE = 0.2
CHAOS_RESET_RATE = 0.07
CHAOS_HANG_RATE = 0.03
CHAOS_HANG_S = 30.0
# Webhook timestamps older or newer than this are refused, as Standard Webhooks advises.
TIMESTAMP_TOLERANCE_S = 300


class Kind(enum.StrEnum):
    HEALTHY = "healthy"
    SLOW = "slow"
    FLAKY = "flaky"
    RATE_LIMITED = "rate-limited"
    GONE = "gone"
    DEAD = "dead"
    # Fails at random with 5xx, hangs past the sender's timeout, or resets the connection.
    CHAOS = "chaos"


# Verifies one delivery: (secret, body, headers) -> signature valid.
Verifier = Callable[[str, bytes, Mapping[str, str]], bool]


def verify_signature(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    """True when one of the ``webhook-signature`` entries is ``secret``'s, with a fresh stamp."""
    msg_id = headers.get("webhook-id", "")
    stamp = headers.get("webhook-timestamp", "")
    if not msg_id or not stamp.isdigit():
        return False
    if abs(time.time() - int(stamp)) > TIMESTAMP_TOLERANCE_S:
        return False
    expected = signing.sign(secret, msg_id, int(stamp), body)
    offered = headers.get("webhook-signature", "").split()
    return any(hmac.compare_digest(expected, entry) for entry in offered)


@dataclass
class Tally:
    """What one receiver saw."""

    requests: int = 0
    # Every webhook-id that arrived, and those answered with a 2xx.
    seen: Counter[str] = field(default_factory=Counter)
    accepted: Counter[str] = field(default_factory=Counter)
    bad_signatures: int = 0
    unsigned: int = 0
    statuses: Counter[int] = field(default_factory=Counter)

    @property
    def duplicates(self) -> int:
        """Acceptances beyond the first of the same ``webhook-id``."""
        return sum(count - 1 for count in self.accepted.values() if count > 1)


class TokenBucket:
    def __init__(self, rate_per_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate_per_s
        self._clock = clock
        self._tokens = rate_per_s
        self._at = clock()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            now = self._clock()
            self._tokens = min(self.rate, self._tokens + (now - self._at) * self.rate)
            self._at = now
            if self._tokens >= 1:
                self._tokens -= 1
                return True
            return False


@dataclass(frozen=True, slots=True)
class Reply:
    """What a receiver does with a request: answer (status, headers), hang, or reset."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    reset: bool = False
    hang: bool = False


class Behaviour:
    """Decides each reply of one kind of receiver; random choices come from ``rng``."""

    def __init__(self, kind: Kind, rng: random.Random | None = None) -> None:
        self.kind = kind
        self._rng = rng or random.Random()  # noqa: S311 - simulated failures, not security
        self._bucket = TokenBucket(RATE_LIMIT_PER_S)
        self._lock = threading.Lock()

    def reply(self) -> Reply:
        with self._lock:
            roll = self._rng.random()
            slow_s = min(SLOW_MAX_S, self._rng.expovariate(1 / SLOW_MEAN_S))
            failure = self._rng.choice((500, 502, 503))
        if self.kind is Kind.SLOW:
            return Reply(delay_s=slow_s)
        if self.kind is Kind.FLAKY:
            return Reply(status=failure) if roll < FLAKY_FAILURE_RATE else Reply()
        if self.kind is Kind.RATE_LIMITED:
            if self._bucket.take():
                return Reply()
            return Reply(status=429, headers=(("Retry-After", str(RETRY_AFTER_S)),))
        if self.kind is Kind.CHAOS:
            return _chaos_reply(roll, failure)
        return Reply(status=410) if self.kind is Kind.GONE else Reply()


def _chaos_reply(roll: float, failure: int) -> Reply:
    if roll < CHAOS_5XX_RATE:
        return Reply(status=failure)
    if roll < CHAOS_5XX_RATE + CHAOS_RESET_RATE:
        return Reply(reset=True)
    if roll < CHAOS_5XX_RATE + CHAOS_RESET_RATE + CHAOS_HANG_RATE:
        return Reply(hang=True, delay_s=CHAOS_HANG_S)
    return Reply()


class Receivers:
    """The receivers' HTTP server on loopback; ``url(kind)`` is where each one listens."""

    def __init__(
        self,
        kinds: tuple[Kind, ...] = tuple(Kind),
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        verifier: Verifier = verify_signature,
        seed: int | None = None,
        latency_s: float = 0.0,
    ) -> None:
        """``latency_s`` is added to every answer, as a network between sender and receiver
        would add it."""
        if latency_s < 0:
            raise ValueError(f"latency_s must not be negative, got {latency_s}")
        self.latency_s = latency_s
        rng = random.Random(seed)  # noqa: S311 - simulated failures, not security
        self.behaviours: dict[Kind, Behaviour] = {
            kind: Behaviour(kind, random.Random(rng.random()))  # noqa: S311
            for kind in kinds
            if kind is not Kind.DEAD
        }
        self.tallies: dict[Kind, Tally] = {kind: Tally() for kind in kinds}
        self.secrets: dict[Kind, list[str]] = {}
        self.verifier = verifier
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer((host, port), _handler_class(self))
        self._server.daemon_threads = True
        self._server.request_queue_size = 128
        self._thread: threading.Thread | None = None
        self._dead_port = _unused_port(host)

    def url(self, kind: Kind) -> str:
        host, port = self._server.server_address[:2]
        if kind is Kind.DEAD:
            return f"http://{host!s}:{self._dead_port}/{kind.value}"
        return f"http://{host!s}:{port}/{kind.value}"

    def register_secret(self, kind: Kind, secret: str) -> None:
        """Deliveries to ``kind`` are checked against ``secret`` (and any registered before)."""
        with self._lock:
            self.secrets.setdefault(kind, []).append(secret)

    def start(self) -> Receivers:
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="receivers", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join()

    def snapshot(self) -> dict[Kind, Tally]:
        with self._lock:
            return {
                kind: Tally(
                    requests=t.requests,
                    seen=Counter(t.seen),
                    accepted=Counter(t.accepted),
                    bad_signatures=t.bad_signatures,
                    unsigned=t.unsigned,
                    statuses=Counter(t.statuses),
                )
                for kind, t in self.tallies.items()
            }

    def _handle(self, kind: Kind, body: bytes, headers: Mapping[str, str]) -> Reply:
        reply = self.behaviours[kind].reply()
        with self._lock:
            secrets = list(self.secrets.get(kind, ()))
        verified = any(self.verifier(secret, body, headers) for secret in secrets)
        accepted = 200 <= reply.status < 300 and not (reply.hang or reply.reset)
        with self._lock:
            tally = self.tallies[kind]
            tally.requests += 1
            tally.seen[headers.get("webhook-id", "")] += 1
            if not secrets:
                tally.unsigned += 1
            elif not verified:
                tally.bad_signatures += 1
            if accepted:
                tally.accepted[headers.get("webhook-id", "")] += 1
            if not (reply.hang or reply.reset):
                tally.statuses[reply.status] += 1
        return reply


def _unused_port(host: str) -> int:
    """A loopback port with nothing listening: bound once by us, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
    return port


def _handler_class(receivers: Receivers) -> type[BaseHTTPRequestHandler]:
    class _Receiver(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in separate writes; without this, Nagle's algorithm and the
        # client's delayed ACK hold every answer back by tens of milliseconds.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            try:
                kind = Kind(self.path.split("?", 1)[0].strip("/"))
            except ValueError:
                kind = None
            if kind is None or kind not in receivers.behaviours:
                self._answer(404, ())
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = receivers._handle(kind, body, headers)
            if reply.delay_s or receivers.latency_s:
                receivers._closing.wait(reply.delay_s + receivers.latency_s)
            try:
                if reply.reset or reply.hang:
                    self._reset()
                else:
                    self._answer(reply.status, reply.headers)
            except (BrokenPipeError, ConnectionResetError):
                # The sender gave up waiting (its timeout), as real senders do.
                self.close_connection = True

        def _answer(self, status: int, headers: tuple[tuple[str, str], ...]) -> None:
            payload = b'{"ok":true}' if 200 <= status < 300 else b'{"error":"refused"}'
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _reset(self) -> None:
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return _Receiver
