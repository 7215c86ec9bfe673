"""Retry-After in every unusable form reads as no header at all (issue 11, defect 1).

An HTTP-date with an absurd hour made the old parser raise OverflowError inside the sender's
decision step, failing every batch the endpoint's rows were in. Whatever a receiver sends, the
header is usable (one delta-seconds, one future HTTP-date) or it is absent; it never raises.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tidings.config import DEFAULT_RETRY_SCHEDULE
from tidings.delivery.retry_policy import (
    NextStep,
    Verdict,
    VerdictKind,
    classify,
    decide_next,
    parse_retry_after,
)

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)
RETRY = Verdict(VerdictKind.RETRY, "http_503")


def _decide(verdict: Verdict) -> NextStep:
    return decide_next(
        verdict,
        failed_attempts=1,
        schedule=DEFAULT_RETRY_SCHEDULE,
        message_id=3,
        sqs_max_delay_s=900.0,
    )


# Every unusable form reads as no header at all (issue 11): the sender must never fail on one.
UNUSABLE_RETRY_AFTER = {
    "empty": "",
    "blank": "   ",
    "words": "soon",
    "negative": "-5",
    "minus zero": "-0",
    "signed": "+5",
    "fractional": "1.5",
    "exponent": "1e3",
    "with a unit": "12 s",
    "non-ASCII digits": "٣",
    "full-width digits": "\uff15",
    "repeated (joined by the client)": "5, 7",
    "comma-joined dates": "Sun, 01 Mar 2026 12:01:30 GMT, Sun, 01 Mar 2026 12:02:30 GMT",
    "overflowing number": "99999999999999999999",
    "just past 2^31 - 1": "2147483648",
    "thousands of digits": "9" * 5000,
    "overflowing hour": "Mon, 01 Jan 2024 99999999999999999999:00:00 GMT",
    "overflowing zone": "Sun, 01 Mar 2026 12:01:30 +99999999999999999999",
    "zone out of range": "Sun, 01 Mar 2026 12:01:30 +2400",
    "hour 25": "Sun, 01 Mar 2026 25:00:00 GMT",
    "February 30th": "Mon, 30 Feb 2026 12:00:00 GMT",
    "unknown month": "Mon, 99 Foo 2026",
    "a date in the past": "Sun, 01 Mar 2026 11:00:00 GMT",
    "now": "Sun, 01 Mar 2026 12:00:00 GMT",
    "year 1": "Mon, 01 Jan 0001 00:00:00 +0100",
    "year 9999": "Fri, 31 Dec 9999 23:59:59 GMT",
    "lower-case": "sun, 01 mar 2026 12:01:30 gmt",
    "bare minus": "-",
    "NUL": "5\x00",
}


@pytest.mark.parametrize("header", UNUSABLE_RETRY_AFTER.values(), ids=UNUSABLE_RETRY_AFTER.keys())
def test_an_unusable_retry_after_is_treated_as_absent(header: str) -> None:
    assert parse_retry_after(header, NOW) is None


@pytest.mark.parametrize("header", UNUSABLE_RETRY_AFTER.values(), ids=UNUSABLE_RETRY_AFTER.keys())
@pytest.mark.parametrize("status", [429, 503])
def test_an_unusable_retry_after_leaves_the_backoff_in_charge(status: int, header: str) -> None:
    verdict = classify(status, None, header, now=NOW)
    assert verdict == Verdict(VerdictKind.RETRY, f"http_{status}", None)
    assert _decide(verdict) == _decide(RETRY)
