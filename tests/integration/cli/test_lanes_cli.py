"""Speed lanes through the CLI: an endpoint's own cap on its deliveries in flight given on add,
changed and cleared on update, shown by ``endpoints list/show``; each endpoint's lane in
``tidings status``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.integration.cli.test_operator_cli import cli  # noqa: F401 - the fixture
from tidings.dal.connection import Database

ADD = ("endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "*")


def _stored_cap(db: Database, endpoint_id: int) -> object:
    with db.cursor() as cur:
        cur.execute("SELECT max_in_flight FROM tidings.endpoints WHERE id = %s", (endpoint_id,))
        row = cur.fetchone()
    assert row is not None
    return row[0]


def test_max_in_flight_round_trip(cli: Any, db: Database) -> None:  # noqa: F811
    code, out, _ = cli(*ADD, "--max-in-flight", "5", "--json")
    assert code == 0
    created = json.loads(out)
    endpoint_id = created["id"]
    # Untried: in the slow lane, one delivery at a time until it answers, whatever its own cap.
    assert (created["max_in_flight"], created["lane"], created["in_flight_limit"]) == (5, "slow", 1)
    assert _stored_cap(db, endpoint_id) == 5

    code, out, _ = cli("endpoints", "show", str(endpoint_id))
    assert code == 0
    assert "max in flight  5" in out
    assert "slow (not answered yet; at most 1 in flight)" in out
    code, out, _ = cli("endpoints", "list")
    assert code == 0 and "max in flight" in out and "slow" in out

    code, out, _ = cli("endpoints", "update", str(endpoint_id), "--max-in-flight", "1000")
    assert code == 0 and "max in flight 1000" in out
    assert _stored_cap(db, endpoint_id) == 1000
    # Another option leaves it as it is.
    code, out, _ = cli("endpoints", "update", str(endpoint_id), "--retry-schedule", "60")
    assert code == 0 and _stored_cap(db, endpoint_id) == 1000

    code, out, _ = cli("endpoints", "update", str(endpoint_id), "--max-in-flight", "default")
    assert code == 0 and "max in flight none of its own" in out
    assert _stored_cap(db, endpoint_id) is None
    code, out, _ = cli("endpoints", "show", str(endpoint_id), "--json")
    shown = json.loads(out)
    # Not answered yet: untried, in the slow lane, one delivery at a time.
    assert (shown["max_in_flight"], shown["in_flight_limit"]) == (None, 1)
    assert shown["retry_schedule"] == [60]


@pytest.mark.parametrize("cap", ["0", "1001", "2.5", "many", "", "٣"])
def test_a_bad_max_in_flight_exits_2_and_changes_nothing(
    cli: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    db: Database,
    cap: str,
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(*ADD, "--max-in-flight", cap)
    assert exit_info.value.code == 2
    assert "must be a whole number 1..1000" in capsys.readouterr().err
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.endpoints")
        assert cur.fetchone() == (0,)

    _, out, _ = cli(*ADD, "--max-in-flight", "3", "--json")
    endpoint_id = json.loads(out)["id"]
    with pytest.raises(SystemExit) as exit_info:
        cli("endpoints", "update", str(endpoint_id), "--max-in-flight", cap)
    assert exit_info.value.code == 2
    assert _stored_cap(db, endpoint_id) == 3


def test_an_update_that_changes_nothing_exits_2(cli: Any, db: Database) -> None:  # noqa: F811
    _, out, _ = cli(*ADD, "--json")
    endpoint_id = json.loads(out)["id"]
    code, _, err = cli("endpoints", "update", str(endpoint_id))
    assert code == 2
    assert (
        "give --url, --description, --event-type, --filter, --channel, --no-channels, "
        "--retry-schedule, --payload-format, "
        "--max-in-flight, --rate-limit, --timeout-ms, --ordering, --fifo-batch-size, "
        "--fifo-on-dead-letter or a receiver credential option" in err
    )


def test_status_shows_each_endpoints_lane(cli: Any, db: Database) -> None:  # noqa: F811
    ids = [json.loads(cli(*ADD, "--json")[1])["id"] for _ in range(3)]
    capped = json.loads(cli(*ADD, "--max-in-flight", "4", "--json")[1])["id"]
    with db.cursor() as cur:
        # One answered (fast), one answered slowly (slow, held), one has not answered (slow).
        cur.execute(
            "UPDATE tidings.endpoint_health SET last_success_at = now(),"
            " slow_until = CASE WHEN endpoint_id = %s THEN now() + interval '10 minutes' END"
            " WHERE endpoint_id IN (%s, %s, %s)",
            (ids[1], ids[0], ids[1], capped),
        )
    code, out, _ = cli("status", "--json")
    assert code == 0
    shown = {e["endpoint_id"]: e for e in json.loads(out)["endpoints"]}
    assert (shown[ids[0]]["lane"], shown[ids[0]]["in_flight_limit"]) == ("fast", None)
    assert (shown[ids[1]]["lane"], shown[ids[1]]["in_flight_limit"]) == ("slow", 10)
    assert shown[ids[1]]["slow_until"] is not None
    # Never answered: untried, in the slow lane, one delivery at a time.
    assert (shown[ids[2]]["lane"], shown[ids[2]]["slow_until"]) == ("slow", None)
    assert shown[ids[2]]["in_flight_limit"] == 1
    assert (shown[capped]["lane"], shown[capped]["in_flight_limit"]) == ("fast", 4)
    assert shown[capped]["max_in_flight"] == 4

    code, out, _ = cli("status")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("app"))
    assert header.rstrip().endswith("lane")
    rows = [line for line in lines if "127.0.0.1:9/hook" in line]
    assert [row.rstrip().split("  ")[-1].strip() for row in rows] == [
        "fast",
        "slow (≤ 10 in flight)",
        "slow (≤ 1 in flight)",
        "fast (≤ 4 in flight)",
    ]
