"""Webhook receivers on loopback that behave like real endpoints, good, bad and hostile.

One HTTP server answers at ``/<kind>`` for every kind of behaviour. Each receiver checks the
Standard Webhooks signature with the endpoint's secret (once registered) and counts what it saw:
requests, the ``webhook-id`` of every message it accepted (so duplicates show), bad signatures.
A request whose body ends before its ``Content-Length`` (a sender killed, or timed out, between
sending the headers and the body) is counted as incomplete: it is neither verified nor answered,
so a cut-short request is never mistaken for a bad signature.
A "dead" endpoint is a loopback port where nothing listens.

The zoo: kinds that misbehave the way real endpoints (and the proxies in front of them) do, each
of which must affect its own messages alone. Unusable ``Retry-After`` headers in every form, a
redirect to a private address, refusals (401, 400, 413), a body of 50 MB, a body dripped a byte a
second, 1 MB of response headers, a connection reset after the status line, a server that accepts
and never answers, garbage instead of HTTP, TLS with a self-signed certificate (a second server,
its certificate made at start), and a host name that does not resolve (``.invalid``).
"""

from __future__ import annotations

import enum
import hmac
import itertools
import random
import socket
import ssl
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
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
# The zoo's numbers, as issue 11 describes its hostile receivers.
HUGE_BODY_BYTES = 50 * 1024 * 1024
HUGE_HEADERS_BYTES = 1024 * 1024
DRIP_INTERVAL_S = 1.0
DRIP_BODY_BYTES = 3600
# How long the silent receiver holds a connection it never answers (or until it stops).
SILENT_HOLD_S = 600.0
# A name that cannot resolve anywhere: .invalid is reserved for exactly that (RFC 6761).
UNRESOLVABLE_HOST = "receiver.tidings-zoo.invalid"
# Where the redirecting receiver points: a loopback (private) address on its own server, where
# any request is counted as a stray. A sender that followed redirects would be caught there.
PRIVATE_TARGET_PATH = "/private-target"
GARBAGE = b"\x00\xff\xfe\x16\x03\x01 this is not HTTP at all\r\n\r\n"
# Retry-After in every unusable form: (status, header lines). Each answer takes the next one.
UNUSABLE_RETRY_AFTERS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (503, ("Mon, 01 Jan 2024 99999999999999999999:00:00 GMT",)),  # overflowing hour
    (429, ("99999999999999999999",)),  # overflowing number
    (429, ("-5",)),  # negative
    (503, ("1.5",)),  # fractional
    (429, ("\u0663",)),  # a non-ASCII digit (ARABIC-INDIC THREE), sent as UTF-8
    (503, ("5", "7")),  # repeated
    (429, ("5, 7",)),  # comma-joined
    (503, ("Sun, 06 Nov 1994 08:49:37 GMT",)),  # a date in the past
    (429, ("",)),  # empty
    (503, ("Sun, 06 Nov 2094 08:49:37 +99999999999999999999",)),  # overflowing zone
)


class Kind(enum.StrEnum):
    HEALTHY = "healthy"
    SLOW = "slow"
    FLAKY = "flaky"
    RATE_LIMITED = "rate-limited"
    GONE = "gone"
    DEAD = "dead"
    # Fails at random with 5xx, hangs past the sender's timeout, or resets the connection.
    CHAOS = "chaos"
    # The zoo (see the module's docstring).
    UNUSABLE_RETRY_AFTER = "unusable-retry-after"
    REDIRECT_PRIVATE = "redirect-private"
    UNAUTHORIZED = "unauthorized"
    BAD_REQUEST = "bad-request"
    TOO_LARGE = "too-large"
    HUGE_BODY = "huge-body"
    DRIP = "drip"
    HUGE_HEADERS = "huge-headers"
    RESET_AFTER_STATUS = "reset-after-status"
    SILENT = "silent"
    GARBAGE = "garbage"
    SELF_SIGNED_TLS = "self-signed-tls"
    UNRESOLVABLE = "unresolvable"


# Kinds with no HTTP server of ours behind their URL.
_SERVERLESS = frozenset({Kind.DEAD, Kind.UNRESOLVABLE})
ZOO: tuple[Kind, ...] = (
    Kind.UNUSABLE_RETRY_AFTER,
    Kind.REDIRECT_PRIVATE,
    Kind.UNAUTHORIZED,
    Kind.BAD_REQUEST,
    Kind.TOO_LARGE,
    Kind.HUGE_BODY,
    Kind.DRIP,
    Kind.HUGE_HEADERS,
    Kind.RESET_AFTER_STATUS,
    Kind.SILENT,
    Kind.GARBAGE,
    Kind.SELF_SIGNED_TLS,
    Kind.UNRESOLVABLE,
)


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
    # Requests whose body ended (the connection closed) before its Content-Length: never
    # verified, answered or accepted. Counted in ``requests``, not in ``seen``.
    incomplete: int = 0
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
    """What a receiver does with a request: answer (status, headers, a body), hang, or reset;
    or misbehave in one of the zoo's ways."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0
    reset: bool = False
    hang: bool = False
    # A body of this many bytes instead of the short JSON one, streamed, one byte per
    # ``drip_s`` seconds when that is set.
    body_bytes: int | None = None
    drip_s: float = 0.0
    # This many bytes of extra header lines.
    header_bytes: int = 0
    # The status line, then a reset instead of the rest.
    reset_after_status: bool = False
    # These bytes instead of an HTTP answer, then the connection closes.
    raw: bytes | None = None

    @property
    def answered(self) -> bool:
        """Whether the receiver sends a whole HTTP answer (so its status counts)."""
        return not (self.hang or self.reset or self.reset_after_status or self.raw is not None)


class Behaviour:
    """Decides each reply of one kind of receiver; random choices come from ``rng``."""

    def __init__(
        self, kind: Kind, rng: random.Random | None = None, *, private_target: str = ""
    ) -> None:
        self.kind = kind
        self._rng = rng or random.Random()  # noqa: S311 - simulated failures, not security
        self._bucket = TokenBucket(RATE_LIMIT_PER_S)
        self._lock = threading.Lock()
        self._retry_afters = itertools.cycle(UNUSABLE_RETRY_AFTERS)
        self._fixed = _fixed_replies(private_target)

    def reply(self) -> Reply:
        fixed = self._fixed.get(self.kind)
        if fixed is not None:
            return fixed
        with self._lock:
            roll = self._rng.random()
            slow_s = min(SLOW_MAX_S, self._rng.expovariate(1 / SLOW_MEAN_S))
            failure = self._rng.choice((500, 502, 503))
            status, retry_after = next(self._retry_afters)
        if self.kind is Kind.UNUSABLE_RETRY_AFTER:
            return Reply(status=status, headers=tuple(("Retry-After", v) for v in retry_after))
        if self.kind is Kind.SLOW:
            return Reply(delay_s=slow_s)
        if self.kind is Kind.RATE_LIMITED:
            return self._rate_limited()
        if self.kind is Kind.CHAOS:
            return _chaos_reply(roll, failure)
        flaky = self.kind is Kind.FLAKY and roll < FLAKY_FAILURE_RATE
        return Reply(status=failure) if flaky else Reply()

    def _rate_limited(self) -> Reply:
        if self._bucket.take():
            return Reply()
        return Reply(status=429, headers=(("Retry-After", str(RETRY_AFTER_S)),))


def _fixed_replies(private_target: str) -> dict[Kind, Reply]:
    """The kinds that answer every request the same way."""
    return {
        Kind.GONE: Reply(status=410),
        Kind.REDIRECT_PRIVATE: Reply(status=307, headers=(("Location", private_target),)),
        Kind.UNAUTHORIZED: Reply(status=401),
        Kind.BAD_REQUEST: Reply(status=400),
        Kind.TOO_LARGE: Reply(status=413),
        Kind.HUGE_BODY: Reply(body_bytes=HUGE_BODY_BYTES),
        Kind.DRIP: Reply(body_bytes=DRIP_BODY_BYTES, drip_s=DRIP_INTERVAL_S),
        Kind.HUGE_HEADERS: Reply(header_bytes=HUGE_HEADERS_BYTES),
        Kind.RESET_AFTER_STATUS: Reply(reset_after_status=True),
        Kind.SILENT: Reply(hang=True, delay_s=SILENT_HOLD_S),
        Kind.GARBAGE: Reply(raw=GARBAGE),
    }


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
        self.kinds = kinds
        self.tallies: dict[Kind, Tally] = {kind: Tally() for kind in kinds}
        self.secrets: dict[Kind, list[str]] = {}
        # Requests to paths that are no receiver's: PRIVATE_TARGET_PATH among them.
        self.strays: Counter[str] = Counter()
        # The bytes of each long body (huge, dripped) that left before the sender stopped
        # reading: with socket buffers, a bounded reader lets only a few MB of 50 leave.
        self.bodies_sent: dict[Kind, list[int]] = {}
        self.verifier = verifier
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = _Server((host, port), _handler_class(self))
        self._servers = [self._server]
        self._tls_server: _Server | None = None
        if Kind.SELF_SIGNED_TLS in kinds:
            self._tls_server = _tls_server(host, _handler_class(self))
            self._servers.append(self._tls_server)
        self._threads: list[threading.Thread] = []
        self._dead_port = _unused_port(host)
        rng = random.Random(seed)  # noqa: S311 - simulated failures, not security
        private_target = self._origin(self._server) + PRIVATE_TARGET_PATH
        self.behaviours: dict[Kind, Behaviour] = {
            kind: Behaviour(
                kind,
                random.Random(rng.random()),  # noqa: S311
                private_target=private_target,
            )
            for kind in kinds
            if kind not in _SERVERLESS
        }

    def url(self, kind: Kind) -> str:
        if kind is Kind.DEAD:
            host = self._server.server_address[0]
            return f"http://{host!s}:{self._dead_port}/{kind.value}"
        if kind is Kind.UNRESOLVABLE:
            return f"http://{UNRESOLVABLE_HOST}/{kind.value}"
        if kind is Kind.SELF_SIGNED_TLS and self._tls_server is not None:
            return f"{self._origin(self._tls_server, 'https')}/{kind.value}"
        return f"{self._origin(self._server)}/{kind.value}"

    @staticmethod
    def _origin(server: ThreadingHTTPServer, scheme: str = "http") -> str:
        host, port = server.server_address[:2]
        return f"{scheme}://{host!s}:{port}"

    def register_secret(self, kind: Kind, secret: str) -> None:
        """Deliveries to ``kind`` are checked against ``secret`` (and any registered before)."""
        with self._lock:
            self.secrets.setdefault(kind, []).append(secret)

    def start(self) -> Receivers:
        for server in self._servers:
            thread = threading.Thread(target=server.serve_forever, name="receivers", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        self._closing.set()
        for server in self._servers:
            server.shutdown()
            server.server_close()
        for thread in self._threads:
            thread.join()

    def snapshot(self) -> dict[Kind, Tally]:
        with self._lock:
            return {
                kind: Tally(
                    requests=t.requests,
                    seen=Counter(t.seen),
                    accepted=Counter(t.accepted),
                    bad_signatures=t.bad_signatures,
                    unsigned=t.unsigned,
                    incomplete=t.incomplete,
                    statuses=Counter(t.statuses),
                )
                for kind, t in self.tallies.items()
            }

    def _body_sent(self, kind: Kind, size: int) -> None:
        with self._lock:
            self.bodies_sent.setdefault(kind, []).append(size)

    def _stray(self, path: str) -> None:
        with self._lock:
            self.strays[path] += 1

    def _incomplete(self, kind: Kind) -> None:
        with self._lock:
            tally = self.tallies[kind]
            tally.requests += 1
            tally.incomplete += 1

    def _handle(self, kind: Kind, body: bytes, headers: Mapping[str, str]) -> Reply:
        reply = self.behaviours[kind].reply()
        with self._lock:
            secrets = list(self.secrets.get(kind, ()))
        verified = any(self.verifier(secret, body, headers) for secret in secrets)
        accepted = 200 <= reply.status < 300 and reply.answered
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
            if reply.answered:
                tally.statuses[reply.status] += 1
        return reply


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A sender that gives up (its timeout, a certificate it refuses) resets or drops the
        # connection mid-request: that is what these receivers are for, not an error to print.
        if isinstance(sys.exc_info()[1], OSError):
            return
        super().handle_error(request, client_address)


def _unused_port(host: str) -> int:
    """A loopback port with nothing listening: bound once by us, then released."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
    return port


def _tls_server(host: str, handler: type[BaseHTTPRequestHandler]) -> _Server:
    """An HTTPS server whose certificate is valid in every way but one: nobody signed it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with tempfile.TemporaryDirectory(prefix="tidings-zoo-tls-") as folder:
        cert, key = self_signed_certificate(Path(folder), host)
        context.load_cert_chain(cert, key)
    server = _Server((host, 0), handler)
    # The handshake happens on the first read, in the request's own thread, so a client that
    # never completes one cannot hold the accepting thread.
    server.socket = context.wrap_socket(
        server.socket, server_side=True, do_handshake_on_connect=False
    )
    return server


def self_signed_certificate(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A fresh self-signed certificate for ``localhost`` and ``host`` (its PEM file and its
    key's), made with the ``cryptography`` package when it is installed, else with openssl."""
    cert, key = folder / "cert.pem", folder / "key.pem"
    try:
        _certificate_with_cryptography(cert, key, host)
    except ImportError:
        subprocess.run(  # noqa: S603 - fixed arguments, no shell
            [  # noqa: S607 - openssl from PATH, as a developer's machine has it
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                "/CN=localhost",
                "-addext",
                f"subjectAltName=DNS:localhost,IP:{host}",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
        )
    return cert, key


def _certificate_with_cryptography(cert: Path, key: Path, host: str) -> None:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    private_key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(host))]
            ),
            critical=False,
        )
        .sign(private_key, hashes.SHA256())
    )
    cert.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(
        private_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )


def _handler_class(receivers: Receivers) -> type[BaseHTTPRequestHandler]:
    class _Receiver(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body leave in separate writes; without this, Nagle's algorithm and the
        # client's delayed ACK hold every answer back by tens of milliseconds.
        disable_nagle_algorithm = True

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length > 0 else b""
            path = self.path.split("?", 1)[0]
            try:
                kind = Kind(path.strip("/"))
            except ValueError:
                kind = None
            if kind is None or kind not in receivers.behaviours:
                receivers._stray(path)
                self._answer(404, ())
                return
            if len(body) < length:
                # The connection closed mid-body: the sender is gone (killed, or its deadline
                # shut the socket) and what arrived is not what it signed. Nobody is left to
                # answer, and a short body is no evidence against the signature.
                receivers._incomplete(kind)
                self.close_connection = True
                return
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = receivers._handle(kind, body, headers)
            if reply.delay_s or receivers.latency_s:
                receivers._closing.wait(reply.delay_s + receivers.latency_s)
            try:
                self._reply(kind, reply)
            except OSError:
                # The sender gave up (its timeout, or it read all it wanted), as senders do.
                self.close_connection = True

        def _reply(self, kind: Kind, reply: Reply) -> None:
            if reply.reset or reply.hang:
                self._reset()
            elif reply.raw is not None:
                self.wfile.write(reply.raw)
                self.close_connection = True
            elif reply.reset_after_status:
                self.wfile.write(f"HTTP/1.1 {reply.status} OK\r\n".encode())
                self.wfile.flush()
                receivers._closing.wait(0.05)
                self._reset()
            elif reply.body_bytes is not None:
                sent: list[int] = []
                try:
                    self._answer_long(reply, sent)
                finally:
                    receivers._body_sent(kind, sum(sent))
            else:
                self._answer(reply.status, reply.headers, reply.header_bytes)

        def _answer(
            self, status: int, headers: tuple[tuple[str, str], ...], header_bytes: int = 0
        ) -> None:
            payload = b'{"ok":true}' if 200 <= status < 300 else b'{"error":"refused"}'
            self._head(status, (*headers, ("Content-Length", str(len(payload)))), header_bytes)
            self.wfile.write(payload)

        def _answer_long(self, reply: Reply, sent: list[int]) -> None:
            """A body of ``reply.body_bytes``, in chunks or (dripping) a byte at a time, until
            it is all sent or the sender stops reading; ``sent`` gets what left."""
            size = reply.body_bytes or 0
            self._head(reply.status, (("Content-Length", str(size)),))
            self.close_connection = True
            if reply.drip_s:
                for _ in range(size):
                    self.wfile.write(b".")
                    sent.append(1)
                    if receivers._closing.wait(reply.drip_s):
                        return
                return
            chunk = b"x" * 65536
            for start in range(0, size, len(chunk)):
                piece = chunk[: size - start]
                self.wfile.write(piece)
                sent.append(len(piece))

        def _head(
            self, status: int, headers: tuple[tuple[str, str], ...], header_bytes: int = 0
        ) -> None:
            """The status line and headers, written as bytes: header values go out as UTF-8
            (http.server would refuse any that is not Latin-1)."""
            lines = [f"HTTP/1.1 {status} {self.responses.get(status, ('Whatever',))[0]}"]
            lines += [f"{name}: {value}" for name, value in headers]
            lines.append("Content-Type: application/json")
            head = "\r\n".join(lines).encode("utf-8") + b"\r\n"
            self.wfile.write(head + _padding_headers(header_bytes) + b"\r\n")

        def _reset(self) -> None:
            # SO_LINGER with a zero timeout makes close() send RST instead of FIN.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self.connection.close()

        def log_message(self, format: str, *args: Any) -> None:
            return None

    return _Receiver


def _padding_headers(total: int) -> bytes:
    """About ``total`` bytes of header lines of 1 KiB each."""
    line = b"X-Padding-%06d: " + b"p" * 1000 + b"\r\n"
    return b"".join(line % n for n in range(total // len(line % 0)))
