"""One delivery attempt's fate, decided without I/O.

After a request returns, ``decide`` reads its result (the receiver's answer or the network's
failure) and settles what happens to the message: delivered, retried through the queue or the
database after a backoff (always the database for an endpoint the claim holds to a limit:
``retries_pass_the_claim``), or dead-lettered (and the endpoint disabled on 410 Gone). The names
along the way: the answer reads as a ``Verdict`` (``retry_policy``), which leads to a
``NextStep``, which leaves the message in a ``MessageStatus``.

When ``decide`` itself fails on one attempt (a defect: nothing a receiver sends may cause it),
``internal_failure`` settles that attempt from the row and the settings alone, so the rest of the
batch is decided and recorded as usual.

``circuit_summaries`` reduces a batch's decisions to what each endpoint's circuit breaker needs.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from tidings.dal.delivery import (
    AttemptOutcome,
    CircuitSummary,
    MessageStatus,
    StartedAttempt,
)
from tidings.delivery import circuit_breaker, retry_policy, retry_schedule
from tidings.delivery.envelope import DeliveryEnvelope
from tidings.delivery.http_transport import HttpResult
from tidings.delivery.retry_policy import AttemptError, NextAction, NextStep, Verdict, VerdictKind


class RetrySettings(Protocol):
    """What deciding an attempt's fate reads of the settings (the retry schedule comes with
    each attempt: its endpoint's own, or the deployment's)."""

    @property
    def sqs_max_delay_s(self) -> int: ...
    @property
    def lease_s(self) -> float: ...


# The status each next step leaves the message in.
STATUS_AFTER = {
    NextAction.FINISH_DELIVERED: MessageStatus.DELIVERED,
    NextAction.RETRY_VIA_QUEUE: MessageStatus.FAILED,
    NextAction.RETRY_VIA_DATABASE: MessageStatus.FAILED,
    NextAction.DEAD_LETTER: MessageStatus.DEAD_LETTER,
    NextAction.DEAD_LETTER_AND_DISABLE: MessageStatus.DEAD_LETTER,
}


# The error class of an attempt the sender failed on itself.
INTERNAL_ERROR = AttemptError.INTERNAL.value
# What PostgreSQL's integer columns hold; an elapsed time beyond it is stored as the largest.
_MAX_INT4 = 2**31 - 1
# Characters PostgreSQL text cannot hold (NUL) or JSON cannot carry to it (lone surrogates).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def webhook_id(message_id: int) -> str:
    """The ``webhook-id`` of a row: the same on every attempt, the receiver's dedupe key."""
    return f"msg_{message_id}"


@dataclass(frozen=True, slots=True)
class Job:
    """A row the sender may send now: the queue record it came in, and what sending needs."""

    record_id: str
    envelope: DeliveryEnvelope
    row: StartedAttempt
    payload: str = field(repr=False)
    # The messages a FIFO endpoint's batch carries behind this head, in line order; they share
    # its outcome.
    members: tuple[StartedAttempt, ...] = ()

    @property
    def member_ids(self) -> tuple[int, ...]:
        return tuple(member.message_id for member in self.members)


@dataclass(frozen=True, slots=True)
class Attempt:
    """A job's request, made at ``attempted_at``, and what came back."""

    job: Job
    attempted_at: datetime
    result: HttpResult


@dataclass(frozen=True, slots=True)
class Decision:
    """An attempt, how its answer reads, the next step, and the outcome to record."""

    attempt: Attempt
    verdict: Verdict
    step: NextStep
    outcome: AttemptOutcome


def verdict_of(attempt: Attempt, *, now: datetime) -> Verdict:
    """How the answer (or the failure) of an attempt reads."""
    result = attempt.result
    return retry_policy.classify(result.status_code, result.error, result.retry_after, now=now)


def retries_pass_the_claim(job: Job, *, turned_slow: bool = False) -> bool:
    """Whether the job's retries must wait in the database for the claim rather than travel
    back through the queue: the claim holds its endpoint to a limit that a retry sent without it
    would break. A rate-limited endpoint's requests spend the tokens the claim takes from its
    bucket; a capped one's (its own ``max_in_flight``, or the slow lane's cap, which holds an
    untried endpoint too, or ``turned_slow``: this attempt puts it in the slow lane) are counted
    by the claim as rows in flight, which a row waiting for its queue message is not."""
    row = job.row
    return (
        row.rate_limit_per_s is not None
        or row.max_in_flight is not None
        or job.envelope.slow
        or turned_slow
    )


def decide(
    attempt: Attempt,
    settings: RetrySettings,
    *,
    now: datetime,
    schedule: Sequence[float],
    turned_slow: bool = False,
) -> Decision:
    """The fate of one attempt, decided at ``now``, for a message that follows ``schedule``
    (``retry_schedule.effective``: its endpoint's or the deployment's, fitted to its row's
    ``max_attempts``); ``turned_slow`` says the attempt put its endpoint in the slow lane."""
    result, row = attempt.result, attempt.job.row
    if result.error is AttemptError.INTERNAL:
        return internal_failure(attempt, settings, now=now, schedule=schedule)
    verdict = verdict_of(attempt, now=now)
    attempt_number = row.attempts + 1
    step = retry_policy.decide_next(
        verdict,
        failed_attempts=attempt_number,
        schedule=schedule,
        message_id=row.message_id,
        sqs_max_delay_s=settings.sqs_max_delay_s,
    )
    if step.action is NextAction.RETRY_VIA_QUEUE and retries_pass_the_claim(
        attempt.job, turned_slow=turned_slow
    ):
        step = NextStep(NextAction.RETRY_VIA_DATABASE, step.delay_s)
    retry_at, keep_lease = None, False
    if step.action is NextAction.RETRY_VIA_QUEUE:
        # The queue message brings the row back; the claimer takes it only if that is lost.
        keep_lease = True
        retry_at = now + timedelta(seconds=step.delay_s + settings.lease_s)
    elif step.action is NextAction.RETRY_VIA_DATABASE:
        retry_at = now + timedelta(seconds=step.delay_s)
    outcome = AttemptOutcome(
        lease=row.lease,
        endpoint_id=row.endpoint_id,
        status=STATUS_AFTER[step.action],
        attempt_number=attempt_number,
        attempted_at=attempt.attempted_at,
        status_code=result.status_code,
        response_ms=(
            min(max(result.elapsed_ms, 0), _MAX_INT4) if result.status_code is not None else None
        ),
        error_class=None if verdict.kind is VerdictKind.DELIVERED else verdict.reason,
        response_excerpt=storable_text(result.excerpt),
        retry_at=retry_at,
        keep_lease=keep_lease,
        members=attempt.job.member_ids,
    )
    return Decision(attempt, verdict, step, outcome)


def internal_failure(
    attempt: Attempt,
    settings: RetrySettings,
    *,
    now: datetime,
    schedule: Sequence[float],
) -> Decision:
    """The fate of an attempt that ``decide`` failed on: a failed attempt with the error class
    ``internal_error``, counted like any other. It is retried through the database after the
    schedule's wait (no queue message to build), and dead-lettered once the schedule's attempts
    are used up.

    Built from the row and the schedule alone, never from what came back, so whatever made
    ``decide`` fail cannot make this fail too; nothing of the answer is kept.
    """
    row = attempt.job.row
    attempt_number = row.attempts + 1
    verdict = Verdict(VerdictKind.RETRY, INTERNAL_ERROR)
    retry_at = None
    if attempt_number >= retry_schedule.attempts_allowed(schedule):
        step = NextStep(NextAction.DEAD_LETTER)
    else:
        delay = retry_schedule.wait_s(schedule, attempt_number, row.message_id)
        step = NextStep(NextAction.RETRY_VIA_DATABASE, delay)
        retry_at = now + timedelta(seconds=delay)
    outcome = AttemptOutcome(
        lease=row.lease,
        endpoint_id=row.endpoint_id,
        status=STATUS_AFTER[step.action],
        attempt_number=attempt_number,
        attempted_at=attempt.attempted_at,
        error_class=INTERNAL_ERROR,
        retry_at=retry_at,
        members=attempt.job.member_ids,
    )
    return Decision(attempt, verdict, step, outcome)


def storable_text(text: str | None) -> str | None:
    """``text`` with what PostgreSQL text cannot hold (NUL, lone surrogates) replaced by U+FFFD."""
    return None if text is None else _UNSTORABLE.sub("\ufffd", text)


def circuit_summaries(decisions: Sequence[Decision]) -> list[CircuitSummary]:
    """Per endpoint, the circuit-relevant outcomes of a batch, in the order they completed.

    A retryable verdict is a failure; any HTTP answer that is not is a success (the endpoint is
    up). A request refused before it was sent (blocked address, invalid URL, a secret that cannot
    sign) says nothing about the endpoint's health and is left out, and so does an attempt the
    sender failed on itself (``internal_error``): that is Tidings' fault, not the endpoint's.
    """
    outcomes: dict[int, list[tuple[bool, datetime]]] = {}
    for d in decisions:
        if d.verdict.reason == INTERNAL_ERROR:
            continue
        if d.verdict.kind is VerdictKind.RETRY:
            success = False
        elif d.attempt.result.status_code is not None:
            success = True
        else:
            continue
        outcomes.setdefault(d.outcome.endpoint_id, []).append((success, d.attempt.attempted_at))
    summaries = []
    for endpoint_id, results in sorted(outcomes.items()):
        summary = circuit_breaker.summarize([success for success, _ in results])
        successes = [at for success, at in results if success]
        failures = [at for success, at in results if not success]
        summaries.append(
            CircuitSummary(
                endpoint_id=endpoint_id,
                has_success=summary.has_success,
                trailing_failures=summary.trailing_failures,
                last_success_at=max(successes, default=None),
                last_failure_at=max(failures, default=None),
            )
        )
    return summaries


def endpoints_to_disable(decisions: Sequence[Decision]) -> list[tuple[int, str]]:
    """The endpoints that answered 410 Gone in a batch, with the reason to record."""
    return sorted(
        {
            (d.outcome.endpoint_id, "410 Gone")
            for d in decisions
            if d.step.action is NextAction.DEAD_LETTER_AND_DISABLE
        }
    )
