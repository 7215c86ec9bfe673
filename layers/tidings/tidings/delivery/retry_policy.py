"""What to do after one HTTP attempt: classify its outcome, then choose the next step."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from tidings.delivery.retry_schedule import attempts_allowed, wait_s


class AttemptError(enum.Enum):
    """Why an attempt got no HTTP response at all."""

    TIMEOUT = "timeout"
    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_RESET = "connection_reset"
    DNS = "dns"
    TLS = "tls"
    BLOCKED_ADDRESS = "blocked_address"
    INVALID_URL = "invalid_url"
    # The endpoint's stored secret cannot sign (it was written around the API): nothing was sent.
    SIGNING_FAILED = "signing_failed"
    OTHER = "other"


class VerdictKind(enum.Enum):
    DELIVERED = "delivered"
    RETRY = "retry"
    PERMANENT = "permanent"
    GONE = "gone"


@dataclass(frozen=True, slots=True)
class Verdict:
    kind: VerdictKind
    reason: str
    retry_after_s: float | None = None

    def __post_init__(self) -> None:
        if self.retry_after_s is not None and not self.retry_after_s >= 0:
            raise ValueError(f"retry_after_s must be >= 0, got {self.retry_after_s}")


class NextAction(enum.Enum):
    FINISH_DELIVERED = "finish_delivered"
    RETRY_VIA_QUEUE = "retry_via_queue"
    RETRY_VIA_DATABASE = "retry_via_database"
    DEAD_LETTER = "dead_letter"
    DEAD_LETTER_AND_DISABLE = "dead_letter_and_disable"


@dataclass(frozen=True, slots=True)
class NextStep:
    action: NextAction
    delay_s: float = 0.0


# Failures of the receiver's own making that may pass: timeouts, early data, rate limits.
_RETRYABLE_4XX = frozenset({408, 425, 429})
_RETRY_AFTER_STATUSES = frozenset({429, 503})
# The request itself can never succeed, so retrying only burns attempts; fixing the endpoint
# (its URL, its secret) and replaying is the way out.
_PERMANENT_ERRORS = frozenset(
    {AttemptError.BLOCKED_ADDRESS, AttemptError.INVALID_URL, AttemptError.SIGNING_FAILED}
)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date, RFC 9110 §10.2.3).

    A time in the past gives 0; a value that is neither form gives None.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if value is None:
        return None
    text = value.strip()
    unsigned = text.removeprefix("-")
    if unsigned.isascii() and unsigned.isdigit():
        # float() rather than int(): an absurdly long digit string becomes inf, not an error.
        return max(0.0, float(text))
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        # RFC 5322 "-0000" parses as naive; HTTP-dates are always GMT.
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def classify(
    status_code: int | None,
    error: AttemptError | None,
    retry_after: str | None,
    *,
    now: datetime,
) -> Verdict:
    """Classify one attempt: exactly one of ``status_code`` and ``error`` must be given."""
    if (status_code is None) == (error is None):
        raise ValueError("give exactly one of status_code and error")
    if error is not None:
        kind = VerdictKind.PERMANENT if error in _PERMANENT_ERRORS else VerdictKind.RETRY
        return Verdict(kind, error.value)
    assert status_code is not None
    if isinstance(status_code, bool) or not 100 <= status_code <= 999:
        raise ValueError(f"status_code must be a three-digit HTTP status, got {status_code!r}")
    reason = f"http_{status_code}"
    if 200 <= status_code <= 299:
        return Verdict(VerdictKind.DELIVERED, reason)
    if status_code == 410:
        return Verdict(VerdictKind.GONE, reason)
    if status_code in _RETRYABLE_4XX or 500 <= status_code <= 599:
        wait = parse_retry_after(retry_after, now) if status_code in _RETRY_AFTER_STATUSES else None
        return Verdict(VerdictKind.RETRY, reason, wait)
    return Verdict(VerdictKind.PERMANENT, reason)


def decide_next(
    verdict: Verdict,
    *,
    failed_attempts: int,
    schedule: Sequence[float],
    message_id: int,
    sqs_max_delay_s: float,
) -> NextStep:
    """The next step after ``failed_attempts`` attempts, the last of which got ``verdict``, for a
    message following ``schedule`` (``retry_schedule``: ``len(schedule) + 1`` attempts, each wait
    drawn in its slot).

    Retries whose delay fits in an SQS ``DelaySeconds`` go back to the queue; longer ones wait in
    the database for the claimer.
    """
    if failed_attempts < 1:
        raise ValueError(f"failed_attempts must be at least 1, got {failed_attempts}")
    if sqs_max_delay_s < 0:
        raise ValueError(f"sqs_max_delay_s must be >= 0, got {sqs_max_delay_s}")
    if verdict.kind is VerdictKind.DELIVERED:
        return NextStep(NextAction.FINISH_DELIVERED)
    if verdict.kind is VerdictKind.GONE:
        return NextStep(NextAction.DEAD_LETTER_AND_DISABLE)
    if verdict.kind is VerdictKind.PERMANENT or failed_attempts >= attempts_allowed(schedule):
        return NextStep(NextAction.DEAD_LETTER)
    delay = wait_s(schedule, failed_attempts, message_id)
    if verdict.retry_after_s is not None:
        # The receiver's "not before" is honoured up to the schedule's longest delay, but never
        # shortens the wait: an endpoint answering "Retry-After: 0" would otherwise use up every
        # attempt within seconds.
        delay = max(delay, min(verdict.retry_after_s, max(schedule)))
    if delay <= sqs_max_delay_s:
        return NextStep(NextAction.RETRY_VIA_QUEUE, delay)
    return NextStep(NextAction.RETRY_VIA_DATABASE, delay)
