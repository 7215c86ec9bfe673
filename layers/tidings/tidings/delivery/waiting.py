"""Why a message is not delivered yet, and until when: every delay explained.

Pure: it reads the facts of one message and of its endpoint, as the database held them at one
moment (``now`` is the database's clock), and names what the message waits for.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tidings.delivery.lanes import in_flight_cap


class WaitReason(enum.StrEnum):
    DELIVERED = "delivered"
    DEAD_LETTER = "dead_letter"
    ENDPOINT_DELETED = "endpoint_deleted"
    ENDPOINT_DISABLED = "endpoint_disabled"
    BEING_DELIVERED = "being_delivered"
    LEASE_EXPIRED = "lease_expired"
    RETRY_QUEUED = "retry_queued"
    CIRCUIT_OPEN = "circuit_open"
    CIRCUIT_PROBING = "circuit_probing"
    BACKOFF = "backoff"
    SCHEDULED = "scheduled"
    IN_FLIGHT_LIMIT = "in_flight_limit"
    DUE = "due"
    # Ordered delivery: behind the head of its FIFO line, or in a line paused at a dead letter.
    IN_LINE = "in_line"
    LINE_PAUSED = "line_paused"


@dataclass(frozen=True, slots=True)
class LineFacts:
    """A message's FIFO line: its ordering key (None: the line of events without one), the
    message at its head (None: none yet) and that message's status, and since when the line is
    paused at a dead letter."""

    ordering_key: str | None
    head_id: int | None
    head_status: str | None
    paused_at: datetime | None


@dataclass(frozen=True, slots=True)
class WaitFacts:
    status: str
    attempts: int
    next_attempt_at: datetime
    # The row carries a lease token: a claimer or a sender holds it.
    leased: bool
    last_error: str | None
    endpoint_enabled: bool
    endpoint_deleted: bool
    disabled_reason: str | None
    circuit_state: str
    circuit_opened_at: datetime | None
    circuit_cooldown_s: float
    rate_limit_per_s: float | None
    now: datetime
    # The endpoint's speed lane (lanes.py): slow while an attempt of the last hold was slow
    # (until slow_until, or enough quick answers in a row there). Untried: it has never
    # answered (one row at a time until it does).
    slow_lane: bool = False
    slow_until: datetime | None = None
    untried: bool = False
    # The endpoint's own cap on its rows in flight, and its rows in flight under a live lease
    # (counted up to the cap at least).
    max_in_flight: int | None = None
    in_flight: int = 0
    # The deployment's slow lane: its cap on an endpoint's rows in flight, what makes an
    # attempt slow, and the quick answers in a row that take an endpoint out.
    slow_lane_max_in_flight: int = 10
    slow_lane_threshold_ms: int = 1000
    slow_lane_release_answers: int = 50
    untried_max_in_flight: int = 1
    # The FIFO line the message is in, on an endpoint whose ordering is fifo (None: none).
    line: LineFacts | None = None
    # The message's own id, to tell whether it heads its line.
    message_id: int | None = None

    @property
    def in_flight_cap(self) -> int | None:
        """The cap the claim puts on the endpoint's rows in flight (``lanes.in_flight_cap``)."""
        return in_flight_cap(
            self.max_in_flight,
            slow=self.slow_lane,
            untried=self.untried,
            slow_cap=self.slow_lane_max_in_flight,
            untried_cap=self.untried_max_in_flight,
        )


@dataclass(frozen=True, slots=True)
class Wait:
    reason: WaitReason
    # When the wait ends at the latest, as far as the database can tell (a queued retry may come
    # sooner); None when it depends on something else (a probe, a replay, the claimer's pace).
    until: datetime | None
    explanation: str


def explain(facts: WaitFacts) -> Wait:
    """What the message waits for, checked in the order the delivery pipeline decides it."""
    for rule in (_finished, _endpoint_closed, _in_line, _leased, _circuit):
        wait = rule(facts)
        if wait is not None:
            return wait
    return _schedule(facts)


def _finished(f: WaitFacts) -> Wait | None:
    if f.status == "delivered":
        return Wait(WaitReason.DELIVERED, None, "delivered: it waits for nothing")
    if f.status == "dead_letter":
        paused = ""
        if f.line and f.line.paused_at and f.line.head_id == f.message_id:
            paused = (
                f"; it paused its FIFO line ({_key(f.line)}) at {_at(f.line.paused_at)}: the "
                "messages behind it wait until the line is resumed or it is replayed"
            )
        return Wait(
            WaitReason.DEAD_LETTER,
            None,
            f"a dead letter ({f.last_error or 'no error recorded'}): it waits for a replay"
            + paused,
        )
    return None


def _endpoint_closed(f: WaitFacts) -> Wait | None:
    if f.endpoint_deleted:
        return Wait(
            WaitReason.ENDPOINT_DELETED,
            None,
            "its endpoint was deleted: nothing is sent, and the health monitor makes it a dead "
            "letter",
        )
    if not f.endpoint_enabled:
        return Wait(
            WaitReason.ENDPOINT_DISABLED,
            None,
            f"its endpoint is disabled ({f.disabled_reason or 'no reason given'}): nothing is "
            "sent, and the health monitor makes it a dead letter, to replay once the endpoint "
            "is enabled again",
        )
    return None


def _in_line(f: WaitFacts) -> Wait | None:
    """Waiting behind the head of its FIFO line: it is attempted once the messages before it are
    delivered or dead-lettered (or the line is resumed, when it is paused at a dead letter)."""
    if f.status != "waiting" or f.line is None:
        return None
    line = f.line
    head = (
        f"message {line.head_id} ({line.head_status})"
        if line.head_id is not None
        else "no message yet (the claimer makes the first one its head)"
    )
    if line.paused_at is not None:
        return Wait(
            WaitReason.LINE_PAUSED,
            None,
            f"its FIFO line ({_key(line)}) is paused since {_at(line.paused_at)} at a dead "
            f"letter, {head}: nothing of the line is sent until a person resumes it or "
            "replays that message",
        )
    return Wait(
        WaitReason.IN_LINE,
        None,
        f"waiting in its FIFO line ({_key(line)}) behind {head}: the endpoint takes a line one "
        "message at a time, in the order the events were accepted, and this one goes once the "
        "messages before it are delivered or dead-lettered",
    )


def _key(line: LineFacts) -> str:
    return (
        "events without an ordering key"
        if line.ordering_key is None
        else f"ordering key {line.ordering_key!r}"
    )


def _leased(f: WaitFacts) -> Wait | None:
    if f.status == "in_flight" and f.next_attempt_at > f.now:
        return Wait(
            WaitReason.BEING_DELIVERED,
            f.next_attempt_at,
            "leased for delivery: in the delivery queue or being sent; should no outcome be "
            "recorded, the claimer takes it back when the lease ends",
        )
    if f.status == "in_flight":
        return Wait(
            WaitReason.LEASE_EXPIRED,
            None,
            "its lease ended without an outcome (a sender stopped or gave up): the claimer takes "
            "it back on its next round",
        )
    if f.status == "failed" and f.leased:
        return Wait(
            WaitReason.RETRY_QUEUED,
            f.next_attempt_at,
            f"attempt {f.attempts} failed ({f.last_error or 'no error recorded'}); the retry "
            "waits out its backoff in the delivery queue, and at the latest, should that message "
            "be lost, the claimer takes the row back when the lease ends",
        )
    return None


def _circuit(f: WaitFacts) -> Wait | None:
    if f.circuit_state == "open":
        opened_at = f.circuit_opened_at or f.now
        probe_at = max(opened_at + timedelta(seconds=f.circuit_cooldown_s), f.next_attempt_at)
        return Wait(
            WaitReason.CIRCUIT_OPEN,
            probe_at,
            f"its endpoint's circuit is open (since {_at(opened_at)}, after consecutive "
            "failures): nothing is sent to it until one probe succeeds; the next probe may go "
            "when the cooldown ends",
        )
    if f.circuit_state == "half_open":
        return Wait(
            WaitReason.CIRCUIT_PROBING,
            None,
            "its endpoint's circuit is half open: one probe is on its way, and the endpoint's "
            "other messages wait for its outcome",
        )
    return None


def _schedule(f: WaitFacts) -> Wait:
    if f.next_attempt_at > f.now and f.attempts:
        return Wait(
            WaitReason.BACKOFF,
            f.next_attempt_at,
            f"attempt {f.attempts} failed ({f.last_error or 'no error recorded'}): the next one "
            "waits out the backoff",
        )
    if f.next_attempt_at > f.now:
        return Wait(WaitReason.SCHEDULED, f.next_attempt_at, "not due yet")
    cap = f.in_flight_cap
    if cap is not None and f.in_flight >= cap:
        return _at_cap(f, cap)
    pace = (
        f", at most {f.rate_limit_per_s:g} a second to this endpoint (its rate limit)"
        if f.rate_limit_per_s
        else ""
    )
    if f.slow_lane:
        pace += (
            f"; its endpoint is in the slow lane ({_why_slow(f)}): its deliveries go one per "
            f"sender invocation, at most {cap} at once"
        )
    overdue_s = (f.now - f.next_attempt_at).total_seconds()
    return Wait(
        WaitReason.DUE,
        None,
        f"due for {overdue_s:.0f} s: the claimer leases due messages every second or so, in "
        f"fair shares across endpoints{pace}",
    )


def _at_cap(f: WaitFacts, cap: int) -> Wait:
    """Due, but its endpoint has as many rows in flight as its cap lets it: the claimer leases
    more as those end."""
    in_flight = f"{f.in_flight} deliver{'y' if f.in_flight == 1 else 'ies'} in flight"
    limit = f"its limit (max_in_flight {cap})" if f.max_in_flight == cap else "its limit"
    if f.slow_lane:
        where = f"its endpoint is in the slow lane ({_why_slow(f)}) and has {in_flight}, {limit}"
    elif f.untried:
        where = (
            f"its endpoint has not answered yet (its speed is unknown until it does) and has "
            f"{in_flight}, {limit}"
        )
    else:
        where = f"its endpoint has {in_flight}, {limit}"
    return Wait(
        WaitReason.IN_FLIGHT_LIMIT,
        None,
        f"due, but {where}: the claimer leases it when one of those ends",
    )


def _why_slow(f: WaitFacts) -> str:
    if f.slow_until is None:
        return "it has not answered yet"
    threshold = f"{f.slow_lane_threshold_ms / 1000:g} s"
    quick = f"{f.slow_lane_threshold_ms / 2000:g} s"
    return (
        f"answers took ≥ {threshold} or timed out; until {_at(f.slow_until)}, or sooner after "
        f"{f.slow_lane_release_answers} deliveries accepted in a row under {quick}"
    )


def _at(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
