"""The dead-letter report: each pattern recognised from crafted data, published readable and as
JSON, nothing sent when nothing was dead-lettered. (How the scheduled runs claim what they report
is tested in test_dead_letter_report_runs.py.)"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from moto import mock_aws

from tests.integration.maintenance.scheduled_support import (
    LambdaContext,
    SnsInbox,
    aws_test_environment,
    load_handler,
    make_messages,
)
from tests.support.seed import make_endpoint
from tidings import wiring
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.maintenance.dead_letter_report import (
    JSON_MARKER,
    Pattern,
    PatternRules,
    build_report,
    publish_report,
)
from tidings.notify import SnsNotifier

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
HOUR = 3600.0


@pytest.fixture
def inbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SnsInbox]:
    aws_test_environment(monkeypatch)
    with mock_aws():
        yield SnsInbox()


def dead_letters(
    db: Database,
    endpoint: int,
    at: list[datetime],
    *,
    error: str,
    status: int | None,
    attempts: int = 5,
) -> None:
    with db.cursor() as cur:
        for moment in at:
            make_messages(
                cur,
                endpoint,
                1,
                status="dead_letter",
                dead_lettered_at=moment,
                attempts=attempts,
                last_error=error,
                last_status_code=status,
            )


def test_each_pattern_is_recognised(db: Database) -> None:
    with db.cursor() as cur:
        outage, creds, limited, trickle, quiet = (
            make_endpoint(cur, f"https://{name}.example/hook")
            for name in ("outage", "creds", "limited", "trickle", "quiet")
        )
    # Outage: 8 dead letters within 7 minutes, all 503s and timeouts.
    base = NOW - timedelta(minutes=40)
    dead_letters(
        db, outage, [base + timedelta(minutes=m) for m in range(6)], error="http_503", status=503
    )
    dead_letters(
        db, outage, [base + timedelta(minutes=7)] * 2, error="timeout", status=None, attempts=4
    )
    # Credentials: 3 of 4 refused with 401/403.
    dead_letters(
        db, creds, [NOW - timedelta(minutes=50)] * 2, error="http_401", status=401, attempts=1
    )
    dead_letters(db, creds, [NOW - timedelta(minutes=20)], error="http_403", status=403, attempts=1)
    dead_letters(db, creds, [NOW - timedelta(minutes=10)], error="http_500", status=500)
    # Rate limited: 429s.
    dead_letters(
        db, limited, [NOW - timedelta(minutes=m) for m in (55, 30, 5)], error="http_429", status=429
    )
    # Slow accumulation: 3 spread over the hour (too few for an outage anyway).
    dead_letters(
        db,
        trickle,
        [NOW - timedelta(minutes=m) for m in (58, 31, 2)],
        error="http_400",
        status=400,
        attempts=1,
    )
    # Outside the window: not reported.
    dead_letters(db, quiet, [NOW - timedelta(hours=2)], error="http_500", status=500)
    dead_letters(db, quiet, [NOW + timedelta(minutes=1)], error="http_500", status=500)

    with db.cursor() as cur:
        report = build_report(cur, HOUR, NOW)

    found = {e.stats.endpoint_id: e for e in report.endpoints}
    assert set(found) == {outage, creds, limited, trickle}
    assert found[outage].pattern is Pattern.OUTAGE_CLUSTER
    assert found[creds].pattern is Pattern.CREDENTIALS_CHANGED
    assert found[limited].pattern is Pattern.RATE_LIMITED
    assert found[trickle].pattern is Pattern.SLOW_ACCUMULATION
    o = found[outage].stats
    assert (o.dead_letters, o.top_error, o.top_status_code) == (8, "http_503", 503)
    assert (o.first_at, o.last_at) == (base, base + timedelta(minutes=7))
    assert o.mean_attempts == pytest.approx((6 * 5 + 2 * 4) / 8)
    c = found[creds].stats
    assert (c.dead_letters, c.top_status_code, c.auth_refusals) == (4, 401, 3)
    assert report.endpoints[0].stats.endpoint_id == outage  # largest first
    assert report.total == 8 + 4 + 3 + 3


def test_rules_come_from_settings() -> None:
    rules = PatternRules.from_settings(
        Settings().replace(dead_letter_outage_min_count=3, dead_letter_outage_span_s=60)
    )
    assert (rules.outage_min_count, rules.outage_span_s, rules.share) == (3, 60, 0.5)
    with pytest.raises(ValueError, match="share"):
        PatternRules(share=0)


def test_a_cluster_spread_wider_than_the_span_is_slow_accumulation(db: Database) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    dead_letters(
        db, endpoint, [NOW - timedelta(minutes=10 * m) for m in range(6)], error="x", status=500
    )
    with db.cursor() as cur:
        (entry,) = build_report(cur, HOUR, NOW).endpoints
        assert entry.pattern is Pattern.SLOW_ACCUMULATION
        tight = PatternRules(outage_span_s=HOUR)
        (entry,) = build_report(cur, HOUR, NOW, rules=tight).endpoints
        assert entry.pattern is Pattern.OUTAGE_CLUSTER


def test_published_report_is_readable_and_carries_json(db: Database, inbox: SnsInbox) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, "https://creds.example/hook")
    dead_letters(
        db, endpoint, [NOW - timedelta(minutes=5)] * 2, error="http_401", status=401, attempts=1
    )
    with db.cursor() as cur:
        report = build_report(cur, HOUR, NOW)
    assert publish_report(SnsNotifier(inbox.topic_arn), report) is not None

    (notification,) = inbox.read()
    assert notification["Subject"] == (
        "[Tidings] 2 dead letters on 1 endpoint since 2026-11-29 11:00 UTC"
    )
    text, marker, structured = notification["Message"].partition(f"\n\n{JSON_MARKER}\n")
    assert marker
    assert (
        f"Endpoint {endpoint} (https://creds.example): 2 dead letter(s), credentials changed"
        in text
    )
    assert "signing secret" in text
    data = json.loads(structured)
    assert data == report.to_dict()
    (entry,) = data["endpoints"]
    assert entry["pattern"] == "credentials_changed"
    assert entry["top_status_code"] == 401
    assert notification["MessageAttributes"]["kind"]["Value"] == "dead_letter_report"


def test_nothing_is_sent_when_nothing_was_dead_lettered(db: Database, inbox: SnsInbox) -> None:
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    dead_letters(db, endpoint, [NOW - timedelta(hours=3)], error="x", status=500)
    with db.cursor() as cur:
        report = build_report(cur, HOUR, NOW)
    assert report.is_empty
    assert "Nothing was dead-lettered." in report.to_text()
    assert publish_report(SnsNotifier(inbox.topic_arn), report) is None
    assert inbox.read() == []


def test_handler_reports_each_dead_letter_once(database_url: str, inbox: SnsInbox) -> None:
    db = Database(database_url)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur)
    # Dead-lettered long before the run: no window decides what is reported.
    dead_letters(
        db, endpoint, [datetime.now(UTC) - timedelta(hours=5)], error="http_429", status=429
    )
    db.close()
    app = load_handler("dead_letter_report")
    with wiring.overridden(
        settings=Settings().replace(database_url=database_url),
        notifier=SnsNotifier(inbox.topic_arn),
        database_factory=lambda: Database(database_url),
    ):
        result = app.handler({}, LambdaContext())
        again = app.handler({}, LambdaContext())
    assert result["message_id"]
    assert result["report"]["endpoints"][0]["pattern"] == "rate_limited"
    assert (result["report"]["total"], result["report"]["waiting"]) == (1, 0)
    assert again["message_id"] is None and again["report"]["total"] == 0
    (notification,) = inbox.read()
    assert notification["Subject"].startswith("[Tidings] 1 dead letter on 1 endpoint since ")
