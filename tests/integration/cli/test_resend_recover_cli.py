"""``tidings messages resend`` and ``tidings endpoints recover`` against a real database."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.integration.cli.test_operator_cli import cli  # noqa: F401 - the fixture
from tests.integration.maintenance.scheduled_support import make_messages
from tests.support.seed import make_endpoint
from tidings.dal.connection import Database


def statuses(db: Database) -> list[tuple[str, int]]:
    with db.cursor() as cur:
        cur.execute("SELECT status::text, count(*) FROM tidings.messages GROUP BY 1 ORDER BY 1")
        return [(s, int(n)) for s, n in cur.fetchall()]


def test_resend_a_dead_letter(cli: Any, db: Database) -> None:  # noqa: F811
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, "http://127.0.0.1:9/hook")
        (dead,) = make_messages(
            cur, endpoint, 1, status="dead_letter", dead_lettered_at=datetime.now(UTC)
        )
    code, out, _ = cli("messages", "resend", str(dead))
    assert code == 0
    assert f"message {dead} is pending again" in out and f"webhook-id msg_{dead}" in out
    # Refusals at run time: exit 1.
    code, _, err = cli("messages", "resend", str(dead))
    assert code == 1
    assert f"message {dead} is pending: only a delivered message or a dead letter" in err
    code, _, err = cli("messages", "resend", "999999")
    assert (code, "message 999999 does not exist" in err) == (1, True)


def test_recover_an_endpoint_with_a_progress_bar(cli: Any, db: Database) -> None:  # noqa: F811
    now = datetime.now(UTC)
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, "http://127.0.0.1:9/hook")
        make_messages(
            cur,
            endpoint,
            25,
            status="dead_letter",
            created_at=now - timedelta(minutes=90),
            dead_lettered_at=now,
        )
        make_messages(cur, endpoint, 5, status="failed", created_at=now - timedelta(minutes=30))
        make_messages(
            cur,
            endpoint,
            3,
            status="dead_letter",
            created_at=now - timedelta(hours=3),
            dead_lettered_at=now,
        )

    code, out, err = cli(
        "endpoints", "recover", str(endpoint), "--since", "2h", "--batch-size", "10"
    )

    assert code == 0
    assert "sent 30 of 30 undelivered message(s)" in out
    assert "recovering endpoint" in err and "100%  30/30" in err
    assert statuses(db) == [("dead_letter", 3), ("pending", 30)]
    code, out, _ = cli("endpoints", "recover", str(endpoint), "--since", "2h", "--json")
    assert (json.loads(out)["matched"], json.loads(out)["requeued"]) == (0, 0)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("endpoints", "recover", "1"), "--since"),
        (("endpoints", "recover", "1", "--since", "soon"), "'soon' is neither an ISO 8601 time"),
        (("endpoints", "recover", "1", "--since", "2h", "--batch-size", "0"), "batch size '0'"),
        (("messages", "resend", "x"), "message id 'x' is not a whole number"),
    ],
)
def test_malformed_arguments_exit_2(
    cli: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    argv: tuple[str, ...],
    named: str,
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(*argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_recover_refusals_exit_1_or_2_naming_them(cli: Any, db: Database) -> None:  # noqa: F811
    # Refused at run time (an unknown or disabled endpoint): 1; a window that is no window: 2.
    code, _, err = cli("endpoints", "recover", "4242", "--since", "1h")
    assert code == 1 and "endpoint 4242 does not exist" in err
    with db.cursor() as cur:
        endpoint = make_endpoint(cur, "http://127.0.0.1:9/hook", enabled=False)
    code, _, err = cli("endpoints", "recover", str(endpoint), "--since", "1h")
    assert code == 1 and "is disabled: enable it, then recover" in err
    code, _, err = cli("endpoints", "recover", str(endpoint), "--since", "1h", "--until", "2h")
    assert code == 2 and "since must be before until" in err
