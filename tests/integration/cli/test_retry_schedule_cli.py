"""Retry schedules through the CLI: given on add and update, shown by ``endpoints show``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.cli.test_operator_cli import cli  # noqa: F401 - the fixture
from tidings.config import DEFAULT_RETRY_SCHEDULE
from tidings.dal.connection import Database


def test_an_endpoint_gets_shows_and_changes_its_schedule(cli: Any, db: Database) -> None:  # noqa: F811
    code, out, _ = cli(
        "endpoints",
        "add",
        "http://127.0.0.1:9/hook",
        "--event-type",
        "*",
        "--retry-schedule",
        "5,300,1800",
        "--json",
    )
    assert code == 0
    endpoint_id = json.loads(out)["id"]

    code, out, _ = cli("endpoints", "show", str(endpoint_id), "--json")
    assert code == 0
    shown = json.loads(out)
    assert (shown["retry_schedule"], shown["retry_schedule_source"]) == ([5, 300, 1800], "endpoint")
    assert "secret" not in shown
    code, out, _ = cli("endpoints", "show", str(endpoint_id))
    assert "5s, 5m, 30m (2105 s, 4 attempts): its own" in out

    code, out, _ = cli("endpoints", "update", str(endpoint_id), "--retry-schedule", "60")
    assert code == 0 and "retries 1m (60 s, 2 attempts)" in out
    code, out, _ = cli("endpoints", "update", str(endpoint_id), "--retry-schedule", "default")
    assert code == 0
    code, out, _ = cli("endpoints", "show", str(endpoint_id), "--json")
    shown = json.loads(out)
    assert shown["retry_schedule"] == [int(d) for d in DEFAULT_RETRY_SCHEDULE]
    assert shown["retry_schedule_source"] == "default"
    code, out, _ = cli("endpoints", "show", str(endpoint_id))
    assert "(27.6 h, 8 attempts): the deployment's" in out
    with db.cursor() as cur:
        cur.execute("SELECT retry_schedule FROM tidings.endpoints")
        assert cur.fetchall() == [(None,)]


@pytest.mark.parametrize(
    ("schedule", "named"),
    [
        ("5,,300", "delay 2 ('') is not a whole number of seconds"),
        ("5,1.5", "delay 2 ('1.5') is not a whole number of seconds"),
        ("5,0", "delay 2 (0) must be 1 to 86400 seconds"),
        ("86401", "delay 1 (86401) must be 1 to 86400 seconds"),
        (",".join(["1"] * 51), "must hold 1 to 50 delays, not 51"),
        ("soon", "delay 1 ('soon') is not a whole number"),
    ],
)
def test_a_bad_schedule_exits_2_naming_the_problem_and_writes_nothing(
    cli: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    db: Database,
    schedule: str,
    named: str,
) -> None:
    argv = ["endpoints", "add", "http://127.0.0.1:9/x", "--event-type", "a"]
    with pytest.raises(SystemExit) as exit_info:
        cli(*argv, "--retry-schedule", schedule)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.endpoints")
        assert cur.fetchone() == (0,)


def test_a_schedule_with_a_max_attempts_exits_2(cli: Any) -> None:  # noqa: F811
    argv = ["endpoints", "add", "http://127.0.0.1:9/x", "--event-type", "a"]
    code, _, err = cli(*argv, "--retry-schedule", "5", "--max-attempts", "3")
    assert code == 2
    assert "give retry_schedule or max_attempts (deprecated), not both" in err


def test_show_of_an_unknown_endpoint_exits_1(cli: Any) -> None:  # noqa: F811
    code, _, err = cli("endpoints", "show", "4242")
    assert code == 1
    assert "endpoint 4242 does not exist" in err
