"""Per-application figures: the health summary of one application, each application's part of
the queue, the monitor's alerts and the dead-letter report naming the application, and metrics
with an Application dimension only for the applications the operator listed."""

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
    make_messages,
)
from tests.support.seed import make_application, make_endpoint
from tidings import wiring
from tidings.config import ConfigError, Settings
from tidings.dal.connection import Database
from tidings.dal.health import application_figures
from tidings.local.lambda_env import load_handler
from tidings.maintenance.dead_letter_report import build_report
from tidings.maintenance.health import health_summary
from tidings.maintenance.health_monitor import run_monitor
from tidings.notify import SnsNotifier

SETTINGS = Settings()


@pytest.fixture
def inbox(monkeypatch: pytest.MonkeyPatch) -> Iterator[SnsInbox]:
    aws_test_environment(monkeypatch)
    with mock_aws():
        yield SnsInbox()


def two_customers(db: Database) -> tuple[int, int, int, int]:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        globex = make_application(cur, "globex")
        acme_endpoint = make_endpoint(cur, "https://r.example/acme", app_id=acme)
        globex_endpoint = make_endpoint(cur, "https://r.example/globex", app_id=globex)
        make_messages(cur, acme_endpoint, 3, created_at=now - timedelta(hours=2))
        make_messages(cur, acme_endpoint, 1, status="failed", attempts=1)
        make_messages(
            cur,
            globex_endpoint,
            2,
            status="dead_letter",
            attempts=5,
            dead_lettered_at=now - timedelta(minutes=5),
            last_error="http_503",
            last_status_code=503,
        )
        make_messages(cur, globex_endpoint, 1, created_at=now - timedelta(minutes=1))
    return acme, globex, acme_endpoint, globex_endpoint


def test_the_summary_of_one_application_and_each_applications_part(db: Database) -> None:
    acme, globex, _, _ = two_customers(db)
    whole = db.run(lambda cur: health_summary(cur, SETTINGS))
    assert (whole.pending, whole.awaiting_retry, whole.dead_letters) == (4, 1, 2)
    assert whole.oldest_undelivered_application == "acme"
    of_acme = db.run(lambda cur: health_summary(cur, SETTINGS, app_id=acme))
    assert (of_acme.pending, of_acme.awaiting_retry, of_acme.dead_letters) == (3, 1, 0)
    of_globex = db.run(lambda cur: health_summary(cur, SETTINGS, app_id=globex))
    assert (of_globex.pending, of_globex.dead_letters) == (1, 2)
    assert of_globex.oldest_undelivered_application == "globex"
    assert of_globex.oldest_undelivered_age_s is not None
    assert of_globex.oldest_undelivered_age_s < 120
    parts = db.run(lambda cur: application_figures(cur, now=whole.checked_at))
    assert [(p.app_uid, p.pending, p.awaiting_retry, p.dead_letters) for p in parts] == [
        ("acme", 3, 1, 0),
        ("globex", 1, 0, 2),
    ]


def test_alerts_and_the_report_name_the_application(db: Database, inbox: SnsInbox) -> None:
    _, _, acme_endpoint, globex_endpoint = two_customers(db)
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.endpoint_health SET state = 'open', opened_at = now()"
            " WHERE endpoint_id = %s",
            (globex_endpoint,),
        )
    now = datetime.now(UTC)
    run_monitor(db, SnsNotifier(inbox.topic_arn), SETTINGS, now - timedelta(minutes=10))
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 5 WHERE endpoint_id = %s AND status = 'failed'",
            (acme_endpoint,),
        )
    run_monitor(db, SnsNotifier(inbox.topic_arn), SETTINGS, datetime.now(UTC))
    sent = {n["Subject"]: n["Message"] for n in inbox.read()}
    circuit = sent[f"[Tidings] ALERT circuit open for endpoint {globex_endpoint} (globex)"]
    assert json.loads(circuit.split("\n\n", 1)[1])["details"]["application"] == "globex"
    oldest = next(m for s, m in sent.items() if "oldest undelivered" in s)
    assert "A message in application acme has waited" in oldest
    growing = next(m for s, m in sent.items() if "dead letters growing" in s)
    assert "per application: globex 2, acme 1" in growing

    report = db.run(lambda cur: build_report(cur, 3600))
    assert {(e.stats.endpoint_id, e.to_dict()["application"]) for e in report.endpoints} == {
        (acme_endpoint, "acme"),
        (globex_endpoint, "globex"),
    }
    assert f"Endpoint {globex_endpoint} of application globex" in report.to_text()


def test_metrics_carry_the_application_only_for_the_listed_ones(
    database_url: str, db: Database, inbox: SnsInbox, capsys: pytest.CaptureFixture[str]
) -> None:
    two_customers(db)
    listed = SETTINGS.replace(database_url=database_url, metrics_applications=("globex", "quiet"))
    with db.cursor() as cur:
        make_application(cur, "quiet")
    with wiring.overridden(
        settings=listed,
        notifier=SnsNotifier(inbox.topic_arn),
        database_factory=lambda: Database(database_url),
    ):
        result = load_handler("health_monitor")({}, LambdaContext())
    assert [a["app_uid"] for a in result["applications"]] == ["globex", "quiet"]
    emitted = [
        json.loads(line)
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("{") and "_aws" in line
    ]
    by_application = {d["Application"]: d for d in emitted if "Application" in d}
    assert set(by_application) == {"globex", "quiet"}
    globex = by_application["globex"]
    assert (globex["Pending"], globex["DeadLetters"]) == ([1.0], [2.0])
    assert by_application["quiet"]["Pending"] == [0.0]
    (dimensions,) = globex["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    assert set(dimensions) == {"Application", "service"}
    # The whole queue's metrics carry no application.
    (whole,) = [d for d in emitted if "Application" not in d]
    assert whole["Pending"] == [4.0]


def test_at_most_twenty_applications_are_listed_for_metrics() -> None:
    uids = ",".join(f"app-{n}" for n in range(21))
    with pytest.raises(ConfigError, match="more than 20 applications"):
        Settings.from_env({"TIDINGS_METRICS_APPLICATIONS": uids})
    assert Settings.from_env({"TIDINGS_METRICS_APPLICATIONS": "a, b"}).metrics_applications == (
        "a",
        "b",
    )
