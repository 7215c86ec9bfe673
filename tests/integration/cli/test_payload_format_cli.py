"""Payload formats through the CLI: ``--payload-format`` on add and update, shown by ``show``;
an application's ``--default-payload-format`` for its new endpoints."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.cli.test_operator_cli import cli  # noqa: F401 - the fixture
from tidings.dal.connection import Database

ADD = ["endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "*"]


def _formats(db: Database) -> list[tuple[int, str]]:
    with db.cursor() as cur:
        cur.execute("SELECT id, payload_format FROM tidings.endpoints ORDER BY id")
        return [(int(i), str(f)) for i, f in cur.fetchall()]


def test_an_endpoint_gets_shows_and_changes_its_format(cli: Any, db: Database) -> None:  # noqa: F811
    code, out, _ = cli(*ADD, "--payload-format", "envelope")
    assert code == 0
    assert "body:        envelope" in out
    code, out, _ = cli(*ADD, "--json")
    assert code == 0 and json.loads(out)["payload_format"] == "raw"
    (first, _), (second, _) = _formats(db)

    code, out, _ = cli("endpoints", "show", str(first))
    assert code == 0 and any(line.split() == ["body", "envelope"] for line in out.splitlines())
    code, out, _ = cli("endpoints", "update", str(second), "--payload-format", "envelope")
    assert code == 0 and f"endpoint {second}: body envelope" in out
    # The retry schedule is left as it was: only what is given changes.
    code, out, _ = cli("endpoints", "show", str(second), "--json")
    assert json.loads(out)["retry_schedule_source"] == "default"
    assert _formats(db) == [(first, "envelope"), (second, "envelope")]


def test_an_applications_default_format_goes_to_its_new_endpoints(
    cli: Any,  # noqa: F811
    db: Database,
) -> None:
    code, out, _ = cli("apps", "create", "acme", "--default-payload-format", "envelope", "--json")
    assert code == 0 and json.loads(out)["default_payload_format"] == "envelope"
    code, out, _ = cli(*ADD, "--app", "acme", "--json")
    assert code == 0 and json.loads(out)["payload_format"] == "envelope"
    code, out, _ = cli(*ADD, "--json")
    assert code == 0 and json.loads(out)["payload_format"] == "raw"


@pytest.mark.parametrize(
    "argv",
    [
        [*ADD, "--payload-format", "json"],
        ["apps", "create", "acme", "--default-payload-format", "RAW"],
    ],
)
def test_an_unknown_format_exits_2_naming_it_and_writes_nothing(
    cli: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    db: Database,
    argv: list[str],
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(*argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "payload-format" in err and "invalid choice" in err
    assert _formats(db) == []
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.applications")
        assert cur.fetchone() == (2,)  # 'default' and the operational application


def test_update_without_a_change_exits_2(cli: Any, db: Database) -> None:  # noqa: F811
    assert cli(*ADD)[0] == 0
    ((endpoint_id, _),) = _formats(db)
    code, _, err = cli("endpoints", "update", str(endpoint_id))
    assert code == 2
    assert (
        "nothing to change: give --url, --description, --event-type, --filter, --channel, "
        "--no-channels, --retry-schedule, "
        "--payload-format, --max-in-flight, --rate-limit, --timeout-ms, --ordering, "
        "--fifo-batch-size, --fifo-on-dead-letter or a receiver credential option" in err
    )
