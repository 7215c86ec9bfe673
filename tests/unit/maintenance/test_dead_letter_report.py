"""The scheduled report built from claimed dead letters: its range, what waits, its message."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone

import pytest

from tidings.config import ConfigError, Settings
from tidings.dal.dead_letters import DeadLetterStats
from tidings.maintenance.dead_letter_report import (
    JSON_MARKER,
    MAX_ENDPOINTS_PER_MESSAGE,
    DeadLetterReport,
    Pattern,
    PatternRules,
    claimed_report,
    report_message,
)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
RULES = PatternRules()


def stats(
    endpoint_id: int, count: int, first: datetime, last: datetime, *, status: int = 500
) -> DeadLetterStats:
    return DeadLetterStats(
        endpoint_id=endpoint_id,
        url=f"https://r{endpoint_id}.example/hook",
        dead_letters=count,
        top_error=f"http_{status}",
        top_status_code=status,
        auth_refusals=count if status in (401, 403) else 0,
        rate_limited=count if status == 429 else 0,
        first_at=first,
        last_at=last,
        mean_attempts=5.0,
    )


def test_the_range_runs_from_the_earliest_to_the_latest_dead_letter_claimed() -> None:
    # A dead letter committed late keeps its early time; a backlog can span days.
    claimed = [
        stats(1, 3, NOW - timedelta(minutes=20), NOW - timedelta(minutes=5)),
        stats(2, 1, NOW - timedelta(days=2), NOW - timedelta(days=2), status=401),
    ]
    report = claimed_report(claimed, rules=RULES, waiting=0, now=NOW)
    assert (report.since, report.until) == (NOW - timedelta(days=2), NOW - timedelta(minutes=5))
    assert [e.pattern for e in report.endpoints] == [
        Pattern.SLOW_ACCUMULATION,
        Pattern.CREDENTIALS_CHANGED,
    ]
    assert report.total == 4
    assert report.subject() == "[Tidings] 4 dead letters on 2 endpoints since 2026-11-27 12:00 UTC"


def test_patterns_look_at_each_endpoint_not_at_the_length_of_the_catch_up() -> None:
    # Five dead letters within ten minutes, reported in a run that also catches up a week.
    burst = stats(1, 5, NOW - timedelta(minutes=10), NOW)
    old = stats(2, 1, NOW - timedelta(days=7), NOW - timedelta(days=7))
    report = claimed_report([burst, old], rules=RULES, waiting=0, now=NOW)
    assert report.endpoints[0].pattern is Pattern.OUTAGE_CLUSTER


def test_the_subject_gives_the_start_in_utc() -> None:
    paris = timezone(timedelta(hours=1))
    moment = datetime(2026, 11, 29, 13, 30, tzinfo=paris)
    report = claimed_report([stats(1, 1, moment, moment)], rules=RULES, waiting=0, now=NOW)
    assert report.subject() == "[Tidings] 1 dead letter on 1 endpoint since 2026-11-29 12:30 UTC"


def test_nothing_claimed_is_an_empty_report_at_now() -> None:
    report = claimed_report([], rules=RULES, waiting=0, now=NOW)
    assert report.is_empty and (report.since, report.until) == (NOW, NOW)
    assert report.to_dict()["waiting"] == 0
    with pytest.raises(ValueError, match="timezone"):
        claimed_report([], rules=RULES, waiting=0, now=NOW.replace(tzinfo=None))
    with pytest.raises(ValueError, match="waiting"):
        claimed_report([], rules=RULES, waiting=-1, now=NOW)


def test_what_waits_for_the_next_report_is_said_in_text_and_json() -> None:
    report = claimed_report(
        [stats(1, 2, NOW - timedelta(minutes=3), NOW)], rules=RULES, waiting=1234, now=NOW
    )
    assert "1234 more dead letter(s) wait for the next report." in report.to_text()
    message = report_message(report)
    text, _, structured = message.partition(f"\n\n{JSON_MARKER}\n")
    assert "1234 more dead letter(s) wait for the next report." in text
    assert json.loads(structured)["waiting"] == 1234


def test_a_full_report_that_is_cut_short_still_says_what_waits() -> None:
    claimed = [
        stats(i, 1, NOW - timedelta(minutes=1), NOW) for i in range(MAX_ENDPOINTS_PER_MESSAGE + 2)
    ]
    report = claimed_report(claimed, rules=RULES, waiting=7, now=NOW)
    text, _, structured = report_message(report).partition(f"\n\n{JSON_MARKER}\n")
    assert "7 more dead letter(s) wait" in text
    assert "...and 2 dead letter(s) on 2 more endpoint(s), not listed." in text
    data = json.loads(structured)
    assert (data["waiting"], data["total"], data["omitted_endpoints"]) == (7, 102, 2)


def test_the_operator_view_says_nothing_about_waiting() -> None:
    view = DeadLetterReport(NOW - timedelta(hours=1), NOW, ())
    assert "waiting" not in view.to_dict()
    assert "wait for the next report" not in view.to_text()


def test_the_claim_size_is_a_positive_setting() -> None:
    assert Settings().dead_letter_report_max_rows == 10_000
    assert (
        Settings.from_env({"TIDINGS_DEAD_LETTER_REPORT_MAX_ROWS": "50"}).dead_letter_report_max_rows
        == 50
    )
    with pytest.raises(ConfigError, match="TIDINGS_DEAD_LETTER_REPORT_MAX_ROWS"):
        Settings().replace(dead_letter_report_max_rows=0)
