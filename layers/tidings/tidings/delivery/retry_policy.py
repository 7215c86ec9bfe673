"""What to do after one HTTP attempt: classify its outcome, then choose the next step."""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from tidings.delivery.retry_schedule import attempts_allowed, wait_s


class AttemptError(enum.Enum):
    """Why an attempt got no usable HTTP response at all."""

    TIMEOUT = "timeout"
    CONNECTION_REFUSED = "connection_refused"
    CONNECTION_RESET = "connection_reset"
    # What came back is not an HTTP response: garbage, a malformed status line, headers past
    # the limits (a line over 64 KiB, more than 100 of them).
    INVALID_RESPONSE = "invalid_response"
    DNS = "dns"
    TLS = "tls"
    BLOCKED_ADDRESS = "blocked_address"
    INVALID_URL = "invalid_url"
    # The endpoint's stored secret cannot sign (it was written around the API): nothing was sent.
    SIGNING_FAILED = "signing_failed"
    # The endpoint's OAuth2 token endpoint gave no token (its status is in the excerpt):
    # nothing was sent to the receiver. Retried on the endpoint's schedule like any failure.
    AUTH_FAILED = "auth_failed"
    # The endpoint's stored credentials do not open or cannot be used: nothing was sent.
    CREDENTIALS_FAILED = "credentials_failed"
    # The sender itself failed on this one record (a defect in Tidings, not the receiver's
    # doing): the record counts a failed attempt and the rest of its batch goes on.
    INTERNAL = "internal_error"
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
    {
        AttemptError.BLOCKED_ADDRESS,
        AttemptError.INVALID_URL,
        AttemptError.SIGNING_FAILED,
        AttemptError.CREDENTIALS_FAILED,
    }
)


# What a Retry-After may ask for at most: 2^31 - 1 seconds, the largest delta-seconds common HTTP
# implementations represent (RFC 9111 §1.2.2). A longer wait (a number past it, a date decades
# ahead) is an overflow, not a request to wait, and the header is treated as absent. What is
# honoured is bounded again, by the maximum retry delay, in ``decide_next``.
MAX_RETRY_AFTER_S = 2**31 - 1
_DELTA_SECONDS = re.compile(r"[0-9]+", re.ASCII)
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
_MONTH = "(?P<month>" + "|".join(_MONTHS) + ")"
_TIME = r"(?P<hour>[0-9]{2}):(?P<minute>[0-9]{2}):(?P<second>[0-9]{2})"
# The three forms of an HTTP-date (RFC 9110 §5.6.7), each with its weekday: IMF-fixdate, which
# senders use (with a numeric zone tolerated in place of GMT), and the obsolete RFC 850 and
# asctime forms, which recipients must still accept. ASCII digits only, every field its width.
_HTTP_DATES = tuple(
    re.compile(pattern, re.ASCII)
    for pattern in (
        r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun), (?P<day>[0-9]{2}) "
        + _MONTH
        + r" (?P<year>[0-9]{4}) "
        + _TIME
        + r" (?:GMT|UTC|UT|(?P<zone>[+-][0-9]{4}))",
        r"(?:Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (?P<day>[0-9]{2})-"
        + _MONTH
        + r"-(?P<year2>[0-9]{2}) "
        + _TIME
        + " GMT",
        r"(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) "
        + _MONTH
        + r" (?P<day>[ 0-9][0-9]) "
        + _TIME
        + r" (?P<year>[0-9]{4})",
    )
)


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a Retry-After header (delta-seconds or HTTP-date, RFC 9110 §10.2.3).

    Only a usable header gives a number: exactly one delta-seconds (ASCII digits) or exactly one
    HTTP-date in the future, asking for at most ``MAX_RETRY_AFTER_S``. Anything else (empty,
    negative, fractional, non-ASCII digits, repeated or comma-joined values, a date in the past
    or out of range, an overflowing number) gives None, as if the receiver had sent none. Never
    raises for any text.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    if value is None:
        return None
    text = value.strip(" \t")
    if _DELTA_SECONDS.fullmatch(text):
        # Measured as text first: int() refuses thousands of digits, and would be slow on them.
        digits = text.lstrip("0") or "0"
        if len(digits) > len(str(MAX_RETRY_AFTER_S)) or int(digits) > MAX_RETRY_AFTER_S:
            return None
        return float(int(digits))
    when = _http_date(text, now)
    if when is None:
        return None
    wait = (when - now).total_seconds()
    return wait if 0 < wait <= MAX_RETRY_AFTER_S else None


def _http_date(text: str, now: datetime) -> datetime | None:
    """The moment an HTTP-date names, or None when ``text`` is not exactly one valid date."""
    match = next((m for m in (p.fullmatch(text) for p in _HTTP_DATES) if m), None)
    if match is None:
        return None
    fields = match.groupdict()
    if fields.get("year2") is not None:
        # RFC 9110: a two-digit year more than 50 years ahead is the most recent past such year.
        year = now.year - now.year % 100 + int(fields["year2"])
        if year > now.year + 50:
            year -= 100
    else:
        year = int(fields["year"])
    zone = fields.get("zone")
    offset = timedelta(0)
    if zone is not None:
        hours, minutes = int(zone[1:3]), int(zone[3:5])
        if hours > 23 or minutes > 59:
            return None
        offset = timedelta(hours=hours, minutes=minutes) * (-1 if zone[0] == "-" else 1)
    try:
        local = datetime(
            year,
            _MONTHS.index(fields["month"]) + 1,
            int(fields["day"]),
            int(fields["hour"]),
            int(fields["minute"]),
            int(fields["second"]),
            tzinfo=UTC,
        )
        return local - offset
    except (ValueError, OverflowError):
        # February 30th, hour 25, a year at the very edge of the calendar: not a date.
        return None


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
