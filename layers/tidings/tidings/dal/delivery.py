"""The delivery queue's data access: claim, release, begin attempts, record outcomes.

Each function is one SQL statement (see ``queries/delivery.sql``), so each is atomic on its own
and costs one round trip; none holds a lock or a transaction across a network call.
"""

from __future__ import annotations

import enum
import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tidings.dal.arrays import array_literal
from tidings.dal.connection import Cursor, fetch_dicts
from tidings.dal.queries import sql
from tidings.dal.secrets import SealedCredential, SealedSecret


@dataclass(frozen=True, slots=True)
class Lease:
    """A row held by one worker: the row id and the token that proves the hold."""

    message_id: int
    token: uuid.UUID


@dataclass(frozen=True, slots=True)
class ClaimedMessage:
    message_id: int
    endpoint_id: int
    event_type: str
    event_id: str
    attempts: int
    lease_token: uuid.UUID
    # The payload's JSON text when it is small enough to travel in the queue message.
    payload: str | None
    # The endpoint is in the slow lane: a recent attempt was slow.
    slow: bool = False
    # No attempt of the endpoint has ever answered: its speed is not known yet.
    untried: bool = False

    @property
    def lease(self) -> Lease:
        return Lease(self.message_id, self.lease_token)


@dataclass(frozen=True, slots=True)
class AttemptRequest:
    lease: Lease
    # The attempt the queue message is for (the row's attempts so far + 1).
    attempt: int
    # False when the queue message already carries the payload.
    want_payload: bool = True


class PayloadFormat(enum.StrEnum):
    """What an endpoint receives as the body (``endpoints.payload_format``): the producer's
    payload as it is (raw), or the Standard Webhooks envelope around it,
    ``{"type": ..., "timestamp": ..., "data": <payload>}``."""

    RAW = "raw"
    ENVELOPE = "envelope"


@dataclass(frozen=True, slots=True)
class StartedAttempt:
    """A row a sender may (``permitted``) or may not send now, with what sending needs.

    A permitted row is held under ``lease_token``, new for this attempt: its outcome is recorded
    under that token, not the one its queue message carried.
    """

    message_id: int
    endpoint_id: int
    permitted: bool
    lease_token: uuid.UUID | None
    event_type: str
    event_id: str
    attempts: int
    max_attempts: int | None
    url: str
    timeout_ms: int | None
    rate_limit_per_s: float | None
    # The endpoint's own cap on its rows in flight (None: the lanes' caps only).
    max_in_flight: int | None
    # The endpoint's own retry schedule (seconds), None for the deployment's.
    retry_schedule: tuple[float, ...] | None
    # The endpoint's signing secrets, encrypted, newest first (empty for a held-back row).
    secrets: tuple[SealedSecret, ...] = field(repr=False)
    payload: str | None = field(repr=False)
    # What the body is: the payload itself, or the envelope around it (``PayloadFormat``).
    payload_format: PayloadFormat
    # When Tidings accepted the event: an envelope's timestamp, the same on every attempt.
    event_created_at: datetime
    # The endpoint's receiver credentials, encrypted (empty for most endpoints, and for a
    # held-back row).
    credentials: tuple[SealedCredential, ...] = field(default=(), repr=False)
    # Ordered delivery: the FIFO line the message is in (its ordering key, "" for events without
    # one; None: no line) and its place there; its event's ordering key.
    line_key: str | None = None
    line_seq: int | None = None
    ordering_key: str | None = None
    # A message a batch carries names its head (it has no lease of its own); the head's
    # endpoint's batch size (more than 1: the endpoint takes its line's messages in batches).
    batch_of: int | None = None
    fifo_batch_size: int = 1

    @property
    def batched(self) -> bool:
        """Whether the row's request is a batch (a JSON array), however many it carries."""
        return self.line_key is not None and self.fifo_batch_size > 1

    @property
    def lease(self) -> Lease:
        """The lease this attempt holds the row under (only for a permitted row)."""
        if self.lease_token is None:
            raise ValueError(f"message {self.message_id} was held back: it has no lease")
        return Lease(self.message_id, self.lease_token)


class MessageStatus(enum.StrEnum):
    """A message's place in the queue: the ``tidings.message_status`` type."""

    PENDING = "pending"
    # Behind the head of its line on a FIFO endpoint: attempted once the messages before it are
    # delivered or dead-lettered.
    WAITING = "waiting"
    IN_FLIGHT = "in_flight"
    DELIVERED = "delivered"
    # An attempt failed and the message waits for its retry.
    FAILED = "failed"
    DEAD_LETTER = "dead_letter"


# The statuses an attempt's outcome can leave a message in.
OUTCOME_STATUSES = frozenset(
    {MessageStatus.DELIVERED, MessageStatus.FAILED, MessageStatus.DEAD_LETTER}
)


@dataclass(frozen=True, slots=True)
class AttemptOutcome:
    """What one HTTP attempt did, and what happens to its row next."""

    lease: Lease
    endpoint_id: int
    # The status the message takes: delivered, failed (a retry follows) or dead_letter.
    status: MessageStatus
    attempt_number: int
    attempted_at: datetime
    status_code: int | None = None
    response_ms: int | None = None
    error_class: str | None = None
    response_excerpt: str | None = None
    # For FAILED: when the row is due again; with keep_lease the retry travels through the queue
    # and retry_at is when the claimer may take the row back if that message never arrives.
    retry_at: datetime | None = None
    keep_lease: bool = False
    # The messages the attempt's batch carried besides its head (FIFO endpoints that take
    # batches): they share its outcome.
    members: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class CircuitSummary:
    """One endpoint's attempts in a batch, reduced to what its circuit breaker needs
    (``circuit_breaker.BatchSummary``, with the times of the last success and failure)."""

    endpoint_id: int
    has_success: bool
    trailing_failures: int
    last_success_at: datetime | None
    last_failure_at: datetime | None


@dataclass(frozen=True, slots=True)
class CircuitTransition:
    endpoint_id: int
    from_state: str
    to_state: str
    cooldown_s: float


@dataclass(frozen=True, slots=True)
class RecordResult:
    written_ids: frozenset[int]
    transitions: tuple[CircuitTransition, ...]
    disabled_endpoint_ids: frozenset[int]


def claim_due(
    cur: Cursor,
    *,
    batch_size: int,
    lease_s: float,
    probe_lease_s: float | None = None,
    inline_payload_bytes: int = 0,
    max_in_flight: int = 1_000_000,
    slow_max_in_flight: int | None = None,
    untried_max_in_flight: int | None = None,
) -> list[ClaimedMessage]:
    """Lease up to ``batch_size`` due rows for ``lease_s`` seconds, fewer when that would put
    more than ``max_in_flight`` rows in flight, more than ``slow_max_in_flight`` of a slow
    endpoint's, or more than ``untried_max_in_flight`` of one that never answered (None: no
    limit). A half-open circuit's probe counts as gone stale once it has
    run ``probe_lease_s`` (default ``lease_s``) without an outcome."""
    cur.execute(
        sql("claim_due"),
        {
            "batch_size": batch_size,
            "max_in_flight": max_in_flight,
            "slow_max_in_flight": slow_max_in_flight,
            "untried_max_in_flight": untried_max_in_flight,
            "lease_s": lease_s,
            "probe_lease_s": lease_s if probe_lease_s is None else probe_lease_s,
            "inline_payload_bytes": inline_payload_bytes,
        },
    )
    return [
        ClaimedMessage(
            message_id=row["message_id"],
            endpoint_id=row["endpoint_id"],
            event_type=row["event_type"],
            event_id=row["event_id"],
            attempts=row["attempts"],
            lease_token=row["lease_token"],
            payload=row["payload"],
            slow=row["slow"],
            untried=row["untried"],
        )
        for row in fetch_dicts(cur)
    ]


def mark_slow(cur: Cursor, endpoint_ids: Sequence[int], *, hold_s: float) -> int:
    """Put endpoints in the slow lane for ``hold_s`` from now (those already there for more than
    half of it are left alone); returns how many were marked."""
    if not endpoint_ids:
        return 0
    cur.execute(
        sql("mark_slow"), {"ids": array_literal(sorted(set(endpoint_ids))), "hold_s": hold_s}
    )
    row = cur.fetchone()
    return int(row[0]) if row else 0


def mark_quick(
    cur: Cursor,
    endpoint_ids: Sequence[int],
    *,
    sent_at: datetime,
    release_after: int,
    hold_s: float,
) -> int:
    """Count a quick answer in the slow lane, to a request sent at ``sent_at``, for each
    endpoint still marked slow (a slow mark, or a failed attempt sent since the count began,
    starts it again; an answer to a request sent before it began is not counted); the one that
    makes ``release_after`` takes the endpoint out of the slow lane, unless it left early within
    the last ``hold_s`` already (then it stays for its whole mark). Returns how many left it."""
    if not endpoint_ids:
        return 0
    cur.execute(
        sql("mark_quick"),
        {
            "ids": array_literal(sorted(set(endpoint_ids))),
            "sent_at": sent_at,
            "release_after": release_after,
            "hold_s": hold_s,
        },
    )
    row = cur.fetchone()
    return int(row[0]) if row else 0


def release_leases(cur: Cursor, leases: Sequence[Lease], *, delay_s: float = 0) -> list[int]:
    """Give rows back without an attempt, due after ``delay_s``; returns the ids released."""
    if not leases:
        return []
    cur.execute(
        sql("release_leases"),
        {
            "ids": array_literal(lease.message_id for lease in leases),
            "tokens": array_literal(lease.token for lease in leases),
            "delay_s": delay_s,
        },
    )
    return [row[0] for row in cur.fetchall()]


def begin_attempts(
    cur: Cursor, requests: Sequence[AttemptRequest], *, lease_s: float, hold_back_s: float = 1.0
) -> list[StartedAttempt]:
    """Renew the leases of the rows still held and let the circuit breakers decide on each.

    Rows whose lease was lost, and requests for an attempt already made (a stale copy of a queue
    message), are absent from the result.
    """
    if not requests:
        return []
    cur.execute(
        sql("begin_attempts"),
        {
            "ids": array_literal(r.lease.message_id for r in requests),
            "tokens": array_literal(r.lease.token for r in requests),
            "attempts": array_literal(r.attempt for r in requests),
            "want_payload": array_literal(r.want_payload for r in requests),
            "lease_s": lease_s,
            "hold_back_s": hold_back_s,
        },
    )
    return [
        StartedAttempt(
            message_id=row["message_id"],
            endpoint_id=row["endpoint_id"],
            permitted=row["permitted"],
            lease_token=row["lease_token"],
            event_type=row["event_type"],
            event_id=row["event_id"],
            attempts=row["attempts"],
            max_attempts=row["max_attempts"],
            url=row["url"],
            timeout_ms=row["timeout_ms"],
            rate_limit_per_s=row["rate_limit_per_s"],
            max_in_flight=row["max_in_flight"],
            retry_schedule=(
                None
                if row["retry_schedule"] is None
                else tuple(float(delay) for delay in row["retry_schedule"])
            ),
            secrets=tuple(
                SealedSecret(int(key_id), bytes(ciphertext))
                for key_id, ciphertext in zip(
                    row["secret_data_keys"] or (), row["secrets"] or (), strict=True
                )
            ),
            payload=row["payload"],
            payload_format=PayloadFormat(row["payload_format"]),
            event_created_at=row["event_created_at"],
            credentials=_credentials(row),
            line_key=row["line_key"],
            line_seq=row["line_seq"],
            ordering_key=row["ordering_key"],
            batch_of=row["batch_of"],
            fifo_batch_size=row["fifo_batch_size"],
        )
        for row in fetch_dicts(cur)
    ]


@dataclass(frozen=True, slots=True)
class Line:
    """A FIFO line: an endpoint and an ordering key ("" for events without one)."""

    endpoint_id: int
    ordering_key: str


@dataclass(frozen=True, slots=True)
class LeasedHead:
    """The new head of a line, leased by the advance for its caller to queue."""

    message_id: int
    endpoint_id: int
    attempts: int
    lease_token: uuid.UUID

    @property
    def lease(self) -> Lease:
        return Lease(self.message_id, self.lease_token)


def advance_lines(cur: Cursor, lines: Sequence[Line], *, lease_s: float | None) -> list[LeasedHead]:
    """Move the lines on whose heads were settled (``tidings.advance_lines_v1``): each makes its
    next waiting message its head. With ``lease_s``, heads whose endpoint takes deliveries
    without the claim are leased for that long and returned, for the caller to queue; the others
    are due for the claim. Lines another advancer holds are left to the claimer."""
    if not lines:
        return []
    # (The function takes the lines' locks in its own order, whatever the order given.)
    cur.execute(
        sql("advance_lines"),
        {
            "endpoint_ids": [line.endpoint_id for line in lines],
            "keys": [line.ordering_key for line in lines],
            "lease_s": lease_s,
        },
    )
    return [
        LeasedHead(
            message_id=row["message_id"],
            endpoint_id=row["endpoint_id"],
            attempts=row["attempts"],
            lease_token=row["lease_token"],
        )
        for row in fetch_dicts(cur)
    ]


def advance_noted_lines(cur: Cursor, *, limit: int) -> int:
    """The claimer's part: move on the lines of up to ``limit`` notes (new waiting messages of
    producers, heads settled whose line no sender moved on); returns the lines looked at."""
    cur.execute(sql("advance_noted_lines"), {"limit": limit})
    row = cur.fetchone()
    return int(row[0]) if row else 0


def record_outcomes(
    cur: Cursor,
    outcomes: Sequence[AttemptOutcome],
    health: Sequence[CircuitSummary] = (),
    disable: Sequence[tuple[int, str]] = (),
    *,
    base_cooldown_s: float,
    max_cooldown_s: float,
) -> RecordResult:
    """Write a batch's outcomes, attempts, circuit updates and disabled endpoints atomically."""
    for outcome in outcomes:
        if outcome.status not in OUTCOME_STATUSES:
            raise ValueError(
                f"message {outcome.lease.message_id}: an outcome cannot leave it {outcome.status}"
            )
        if outcome.status is MessageStatus.FAILED and outcome.retry_at is None:
            raise ValueError(
                f"retry outcome for message {outcome.lease.message_id} has no retry_at"
            )
    params: dict[str, Any] = {
        "outcomes": json.dumps(
            [
                {
                    "id": o.lease.message_id,
                    "token": str(o.lease.token),
                    "endpoint_id": o.endpoint_id,
                    "status": o.status.value,
                    "retry_at": o.retry_at.isoformat() if o.retry_at else None,
                    "keep_lease": o.keep_lease,
                    "attempt_number": o.attempt_number,
                    "attempted_at": o.attempted_at.isoformat(),
                    "status_code": o.status_code,
                    "response_ms": o.response_ms,
                    "error_class": o.error_class,
                    "excerpt": o.response_excerpt,
                    "members": list(o.members) if o.members else None,
                }
                for o in outcomes
            ]
        ),
        "health_endpoint_ids": array_literal(h.endpoint_id for h in health),
        "has_success": array_literal(h.has_success for h in health),
        "trailing_failures": array_literal(h.trailing_failures for h in health),
        "last_success_at": [h.last_success_at for h in health],
        "last_failure_at": [h.last_failure_at for h in health],
        "disable_ids": array_literal(endpoint_id for endpoint_id, _ in disable),
        "disable_reasons": [reason for _, reason in disable],
        "base_cooldown_s": base_cooldown_s,
        "max_cooldown_s": max_cooldown_s,
    }
    cur.execute(sql("record_outcomes"), params)
    row = cur.fetchone()
    assert row is not None  # the statement always returns exactly one row
    written_ids, transitions, disabled_ids = row
    return RecordResult(
        written_ids=frozenset(written_ids),
        transitions=tuple(
            CircuitTransition(t["endpoint_id"], t["from"], t["to"], float(t["cooldown_s"]))
            for t in transitions
        ),
        disabled_endpoint_ids=frozenset(disabled_ids),
    )


def _credentials(row: dict[str, Any]) -> tuple[SealedCredential, ...]:
    ids = row.get("credential_ids")
    if not ids:
        return ()
    return tuple(
        SealedCredential(int(i), str(kind), int(key_id), bytes(ciphertext))
        for i, kind, key_id, ciphertext in zip(
            ids,
            row["credential_kinds"],
            row["credential_data_keys"],
            row["credentials"],
            strict=True,
        )
    )
