"""Classifying an endpoint's dead letters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tidings.dal.dead_letters import DeadLetterStats
from tidings.maintenance.dead_letter_report import (
    JSON_MARKER,
    MAX_ENDPOINTS_PER_MESSAGE,
    DeadLetterReport,
    EndpointDeadLetters,
    Pattern,
    PatternRules,
    classify,
    report_message,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RULES = PatternRules()


def stats(
    count: int,
    *,
    auth: int = 0,
    limited: int = 0,
    span_s: float = 0,
    endpoint_id: int = 1,
    top_error: str = "http_500",
    top_status_code: int | None = 500,
) -> DeadLetterStats:
    return DeadLetterStats(
        endpoint_id=endpoint_id,
        url="https://r.example/",
        dead_letters=count,
        top_error=top_error,
        top_status_code=top_status_code,
        auth_refusals=auth,
        rate_limited=limited,
        first_at=NOW - timedelta(seconds=span_s),
        last_at=NOW,
        mean_attempts=5.0,
    )


@pytest.mark.parametrize(
    ("figures", "pattern"),
    [
        (stats(4, auth=2), Pattern.CREDENTIALS_CHANGED),
        (stats(4, auth=1), Pattern.SLOW_ACCUMULATION),
        (stats(10, auth=5, limited=5, span_s=60), Pattern.CREDENTIALS_CHANGED),
        (stats(3, limited=2), Pattern.RATE_LIMITED),
        (stats(5, span_s=900), Pattern.OUTAGE_CLUSTER),
        (stats(5, span_s=901), Pattern.SLOW_ACCUMULATION),
        (stats(4, span_s=10), Pattern.SLOW_ACCUMULATION),
        (stats(1), Pattern.SLOW_ACCUMULATION),
        # A redirect is an answer, never followed: however many at once, not an outage.
        (stats(5, top_error="http_307", top_status_code=307), Pattern.REDIRECTED),
        (stats(1, span_s=9000, top_error="http_301", top_status_code=301), Pattern.REDIRECTED),
        (stats(5, top_error="http_400", top_status_code=400), Pattern.OUTAGE_CLUSTER),
        (stats(10, span_s=60, top_error="endpoint disabled: 410 Gone"), Pattern.ENDPOINT_DISABLED),
        (stats(3, auth=3, top_error="endpoint deleted"), Pattern.ENDPOINT_DISABLED),
        (stats(1, top_error="http_410", top_status_code=410), Pattern.ENDPOINT_DISABLED),
        (
            stats(6, top_error="signing_failed", top_status_code=None),
            Pattern.ENDPOINT_MISCONFIGURED,
        ),
        (stats(2, top_error="invalid_url", top_status_code=None), Pattern.ENDPOINT_MISCONFIGURED),
        (
            stats(9, span_s=30, top_error="blocked_address", top_status_code=None),
            Pattern.ENDPOINT_MISCONFIGURED,
        ),
    ],
)
def test_patterns(figures: DeadLetterStats, pattern: Pattern) -> None:
    assert classify(figures, RULES) is pattern


def test_a_large_report_lists_the_largest_endpoints_and_counts_the_rest() -> None:
    entries = tuple(
        EndpointDeadLetters(stats(2, endpoint_id=i), Pattern.SLOW_ACCUMULATION)
        for i in range(MAX_ENDPOINTS_PER_MESSAGE + 3)
    )
    report = DeadLetterReport(NOW - timedelta(hours=1), NOW, entries)
    message = report_message(report)
    assert "...and 6 dead letter(s) on 3 more endpoint(s), not listed." in message
    assert message.count("Endpoint ") == MAX_ENDPOINTS_PER_MESSAGE
    assert JSON_MARKER in message
    assert (
        report.subject() == "[Tidings] 206 dead letters on 103 endpoints since 2026-11-29 11:00 UTC"
    )
