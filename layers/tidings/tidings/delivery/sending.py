"""A part of a batch on the wire: each job's request built, signed and given its receiver's
credentials, all of them sent at once, and a 401 to an OAuth2 token tried once more.

Preparing a request never sends it: a secret that does not sign, credentials that do not open
and a token that cannot be had each settle their own job's attempt, and nothing else. What is
left goes to the transport together (``HttpTransport.post_all``: one thread, every request at
once); a stand-in transport with ``post`` alone has them sent one after the other.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol, runtime_checkable

from tidings.delivery import fifo, signing
from tidings.delivery.attempt import Attempt, Job, webhook_id
from tidings.delivery.credentials import (
    Authorized,
    Credentials,
    CredentialsUnusable,
    ReceiverCredentials,
)
from tidings.delivery.http_transport import HttpResult, Post, Sent
from tidings.delivery.request_body import EVENT_TYPE_HEADER, event_type_header, request_body
from tidings.delivery.retry_policy import AttemptError
from tidings.observability import logger
from tidings.secrets.envelope import DataKey
from tidings.secrets.keyring import open_secrets

# The result of an attempt the sender failed on before an answer came (nothing was sent, or
# what was sent is unknown): decided as an ``internal_error`` failure.
NOT_SENT = HttpResult(None, AttemptError.INTERNAL, 0, detail="internal error in the sender")


class Transport(Protocol):
    """What sending needs of a transport: one POST (``HttpTransport`` and stand-ins)."""

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> HttpResult: ...


@runtime_checkable
class BatchTransport(Protocol):
    """A transport that makes many requests at once (``HttpTransport``)."""

    def post_all(self, posts: Sequence[Post]) -> list[Sent]: ...


@dataclass(frozen=True, slots=True)
class _Prepared:
    """A job ready to go (``post``) or already settled (``result``: nothing is sent)."""

    job: Job
    attempted_at: datetime
    ends: float
    post: Post | None = None
    result: HttpResult | None = None
    receiver: ReceiverCredentials | None = None
    authorized: Authorized | None = None


class PartSender:
    """Sends the jobs of one part; one per sender, sharing its transport and credentials."""

    def __init__(
        self, transport: Transport, credentials: Credentials, default_timeout_s: float
    ) -> None:
        self.transport = transport
        self.credentials = credentials
        self.default_timeout_s = default_timeout_s

    def send(
        self, jobs: Sequence[Job], budget_s: float | None, keys: Mapping[int, DataKey]
    ) -> list[Attempt]:
        """Send every job at once; the attempts in the order they finished. ``budget_s`` caps
        every request's time; ``keys`` open the jobs' secrets and credentials."""
        prepared = [self._prepared(job, budget_s, keys) for job in jobs]
        finished = [(time.monotonic(), p, p.result) for p in prepared if p.result is not None]
        ready = [p for p in prepared if p.post is not None]
        for p, sent in zip(ready, self._post_all(ready), strict=True):
            finished.append((sent.finished_at, p, sent.result))
        again = [
            p
            for _, p, result in finished
            if result is not None and result.status_code == 401 and self._refused(p)
        ]
        if again:
            renewed = {id(p) for p in again}
            finished = [item for item in finished if id(item[1]) not in renewed]
            for p, sent in self._renewed(again):
                finished.append((sent.finished_at, p, sent.result))
        finished.sort(key=lambda item: item[0])
        return [Attempt(p.job, p.attempted_at, result or NOT_SENT) for _, p, result in finished]

    def _prepared(self, job: Job, budget_s: float | None, keys: Mapping[int, DataKey]) -> _Prepared:
        attempted_at = datetime.now(UTC)
        row = job.row
        timeout_s = row.timeout_ms / 1000 if row.timeout_ms else self.default_timeout_s
        if budget_s is not None:
            timeout_s = min(timeout_s, budget_s)
        ends = time.monotonic() + timeout_s
        try:
            return self._prepare(job, attempted_at, ends, keys)
        except Exception as exc:
            # Building and signing a request never depends on a receiver: reaching here is a
            # defect of the sender's own, and it stays with this one record.
            log_internal_error(
                "preparing the request failed inside the sender: a failed attempt (internal_error)",
                job,
                exc,
            )
            return _Prepared(job, attempted_at, ends, result=NOT_SENT)

    def _prepare(
        self, job: Job, attempted_at: datetime, ends: float, keys: Mapping[int, DataKey]
    ) -> _Prepared:
        row = job.row
        # Built once, before signing: the signature covers exactly the bytes sent.
        body, message_webhook_id, event_type = request_of(job)
        try:
            secrets = open_secrets(keys, row.endpoint_id, row.secrets)
            headers = signing.webhook_headers(message_webhook_id, int(time.time()), body, secrets)
            if event_type is not None:
                headers[EVENT_TYPE_HEADER] = event_type_header(event_type)
        except ValueError:
            # A stored secret that cannot sign (or does not open) must not take the rest of the
            # batch down.
            logger.exception(
                "cannot sign the delivery",
                extra={"message_id": row.message_id, "endpoint_id": row.endpoint_id},
            )
            failed = HttpResult(None, AttemptError.SIGNING_FAILED, 0, detail="signing failed")
            return _Prepared(job, attempted_at, ends, result=failed)
        if not row.credentials:
            post = Post(row.url, body, headers, _left(ends))
            return _Prepared(job, attempted_at, ends, post=post)
        try:
            receiver = self.credentials.of(row.endpoint_id, row.credentials, keys)
        except CredentialsUnusable:
            logger.error(
                "the endpoint's receiver credentials cannot be used; nothing is sent",
                extra={"message_id": row.message_id, "endpoint_id": row.endpoint_id},
            )
            failed = HttpResult(
                None, AttemptError.CREDENTIALS_FAILED, 0, detail="credentials unusable"
            )
            return _Prepared(job, attempted_at, ends, result=failed)
        authorized = self.credentials.authorize(receiver, headers, ends)
        if isinstance(authorized, HttpResult):
            return _Prepared(job, attempted_at, ends, result=authorized)
        post = Post(row.url, body, authorized.headers, _left(ends), receiver.tls)
        return _Prepared(job, attempted_at, ends, post, None, receiver, authorized)

    def _refused(self, p: _Prepared) -> bool:
        """Whether a 401 is worth one more request with a new OAuth2 token."""
        if p.receiver is None or p.authorized is None:
            return False
        return self.credentials.refused(p.receiver, p.authorized)

    def _renewed(self, refused: Sequence[_Prepared]) -> list[tuple[_Prepared, Sent]]:
        """The requests a receiver refused with 401, made once more with a new token within
        what is left of their attempts' time."""
        again: list[_Prepared] = []
        settled: list[tuple[_Prepared, Sent]] = []
        for p in refused:
            assert p.receiver is not None and p.post is not None
            base = {k: v for k, v in p.post.headers.items() if k != "Authorization"}
            authorized = self.credentials.authorize(p.receiver, base, p.ends)
            if isinstance(authorized, HttpResult):
                settled.append((p, Sent(authorized, b"", time.monotonic())))
                continue
            post = Post(p.post.url, p.post.body, authorized.headers, _left(p.ends), p.post.tls)
            again.append(_Prepared(p.job, p.attempted_at, p.ends, post, None, p.receiver))
        return settled + list(zip(again, self._post_all(again), strict=True))

    def _post_all(self, ready: Sequence[_Prepared]) -> list[Sent]:
        posts = [p.post for p in ready if p.post is not None]
        if not posts:
            return []
        try:
            if isinstance(self.transport, BatchTransport):
                return self.transport.post_all(posts)
            return [self._post_one(post) for post in posts]
        except Exception as exc:
            # The transport answers for everything receivers and the network do; reaching here
            # is a defect of the sender's own. What was sent is unknown: each is a failed
            # attempt (internal_error), retried on its schedule.
            for p in ready:
                log_internal_error(
                    "sending failed inside the sender: a failed attempt (internal_error)",
                    p.job,
                    exc,
                )
            now = time.monotonic()
            return [Sent(NOT_SENT, b"", now) for _ in posts]

    def _post_one(self, post: Post) -> Sent:
        # A stand-in transport's post takes the TLS settings only when there are some.
        if post.tls is None:
            result = self.transport.post(post.url, post.body, post.headers, post.timeout_s)
        else:
            result = self.transport.post(  # type: ignore[call-arg]
                post.url, post.body, post.headers, post.timeout_s, post.tls
            )
        return Sent(result, b"", time.monotonic())


def request_of(job: Job) -> tuple[bytes, str, str | None]:
    """A job's body, its ``webhook-id`` and the event type its ``webhook-event-type`` names: one
    message's, or, for an endpoint that takes its line in batches, the batch's (``fifo``)."""
    row = job.row
    if not row.batched:
        body = request_body(row.payload_format, row.event_type, row.event_created_at, job.payload)
        return body, webhook_id(row.message_id), row.event_type
    carried = [(row, job.payload), *((m, m.payload or "") for m in job.members)]
    elements = [
        fifo.BatchElement(m.message_id, m.event_type, m.event_created_at, m.ordering_key, payload)
        for m, payload in carried
    ]
    return (
        fifo.batch_body(elements),
        fifo.batch_webhook_id([e.message_id for e in elements]),
        fifo.batch_event_type(e.event_type for e in elements),
    )


def log_internal_error(what: str, job: Job, exc: BaseException) -> None:
    """Log a defect met on one record: its ids, the error's type and where it was raised.

    Never the error's text nor its traceback's messages: they could quote the payload, a header
    the receiver sent, or the endpoint's URL.
    """
    frames = traceback.extract_tb(exc.__traceback__)
    last = frames[-1] if frames else None
    logger.error(
        what,
        extra={
            "message_id": job.row.message_id,
            "endpoint_id": job.row.endpoint_id,
            "error_type": type(exc).__name__,
            "sqlstate": getattr(exc, "pgcode", None),
            "raised_at": f"{Path(last.filename).name}:{last.lineno} in {last.name}"
            if last
            else None,
        },
    )


def _left(ends: float) -> float:
    return max(ends - time.monotonic(), 0.001)
