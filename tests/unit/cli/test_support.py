"""Pure parts of the operator CLI: times, JSON conversion, argument checks, the demo's plan."""

from __future__ import annotations

import argparse
import random
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from tidings.cli import build_parser
from tidings.cli.dead_letters import window_seconds
from tidings.cli.support import parse_time, plain
from tidings.local.demo import DEMO_FIXED, demo_settings, event_plan
from tidings.local.receivers import Kind

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", NOW - timedelta(seconds=90)),
        ("15m", NOW - timedelta(minutes=15)),
        ("2h", NOW - timedelta(hours=2)),
        ("1.5d", NOW - timedelta(hours=36)),
        ("2026-04-30T10:00:00+02:00", datetime(2026, 4, 30, 8, 0, tzinfo=UTC)),
        ("2026-04-30T10:00:00", datetime(2026, 4, 30, 10, 0, tzinfo=UTC)),
        ("2026-04-30", datetime(2026, 4, 30, tzinfo=UTC)),
    ],
)
def test_times_are_ages_or_iso_8601(text: str, expected: datetime) -> None:
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "5 weeks", "-3h", ""])
def test_bad_times_are_named(text: str) -> None:
    with pytest.raises(ValueError, match="neither an ISO 8601 time nor an age"):
        parse_time(text, NOW)


def test_window_must_be_an_age() -> None:
    assert window_seconds("2h") == pytest.approx(7200, abs=1)
    with pytest.raises(argparse.ArgumentTypeError, match="must be an age"):
        window_seconds("2999-01-01")


@dataclass
class _Row:
    when: datetime
    amount: Decimal


def test_plain_makes_json_ready_values() -> None:
    ident = uuid.UUID(int=7)
    assert plain({"a": [_Row(NOW, Decimal("1.5"))], "id": ident, "kind": Kind.SLOW}) == {
        "a": [{"when": "2026-05-01T12:00:00Z", "amount": 1.5}],
        "id": str(ident),
        "kind": "slow",
    }


def test_every_operator_command_is_registered() -> None:
    parser = build_parser()
    for argv in (
        ["status", "--json"],
        ["endpoints", "add", "http://127.0.0.1/x", "--event-type", "a", "--event-type", "b"],
        ["endpoints", "list"],
        ["endpoints", "disable", "3"],
        ["endpoints", "rotate-secret", "3"],
        ["send", "order.created", "{}", "--event-id", "x"],
        ["messages", "show", "5"],
        ["dead-letters", "--json"],
        ["replay", "--endpoint", "2", "--since", "2h", "--ids", "1", "2"],
        ["dev", "--port", "0", "--senders", "2", "--health-monitor-every", "5"],
        ["demo", "--events", "100", "--seed", "3"],
    ):
        args = parser.parse_args(argv)
        assert callable(args.handler)
    args = parser.parse_args(
        ["endpoints", "add", "http://h/x", "--event-type", "a", "--event-type", "b"]
    )
    assert args.event_types == ["a", "b"]


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["dev", "--port", "70000"], "'70000' is not within 0..65535"),
        (["dev", "--senders", "0"], "'0' must be at least 1"),
        (["dev", "--pruner-every", "soon"], "'soon' is not a number"),
        (["demo", "--timeout", "-1"], "'-1' must be positive"),
    ],
)
def test_bad_runtime_arguments_are_named(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_demo_plan_keeps_the_mix_and_is_repeatable() -> None:
    plan = event_plan(5000, random.Random(1))
    assert len(plan) == 5000
    counts = Counter(event.event_type for event in plan)
    for kind, fixed in DEMO_FIXED.items():
        assert counts[f"demo.{kind.value}"] == fixed, kind
    assert counts["demo.dead"] == DEMO_FIXED[Kind.DEAD] == 8
    assert counts["demo.healthy"] > counts["demo.flaky"] > counts["demo.slow"]
    assert len({event.event_id for event in plan}) == 5000
    assert event_plan(5000, random.Random(1)) == plan
    with pytest.raises(ValueError, match="at least"):
        event_plan(5, random.Random(1))


def test_demo_settings_are_short_but_the_environment_wins() -> None:
    settings = demo_settings({"DATABASE_URL": "postgresql://elsewhere/db"})
    assert settings.retry_schedule == (0.5, 1.0, 2.0)
    assert settings.circuit_cooldown_s == 1.0
    # The demo never writes into a database named by the environment.
    assert settings.database_url == ""
    assert demo_settings({"TIDINGS_RETRY_SCHEDULE": "2,4"}).retry_schedule == (2.0, 4.0)
    # The formula's settings of earlier releases set the schedule too, and win as well.
    legacy = demo_settings({"TIDINGS_BACKOFF_BASE_S": "2"})
    assert (legacy.backoff_base_s, legacy.retry_schedule) == (2.0, ())
