"""Filters and channels through the CLI, on the database and over the API alike: ``--filter
JSON|@FILE`` and ``--channel`` on ``endpoints add`` and ``update``, shown by ``show``; a bad
filter exits 2 naming the clause and operator, and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.cli.test_both_modes_cli import Cli, cli, mode  # noqa: F401 - fixtures
from tidings.dal.connection import Database

ADD = ["endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "*"]


def _stored(db: Database) -> list[tuple[object, object, object]]:
    with db.cursor() as cur:
        cur.execute("SELECT filter, filter_path IS NOT NULL, channels FROM tidings.endpoints")
        return list(cur.fetchall())


def test_an_endpoint_gets_shows_and_changes_its_filter_and_channels(
    cli: Cli,  # noqa: F811
    db: Database,
    tmp_path: Path,
) -> None:
    document = {"total": {"$gte": 100}}
    code, out, err = cli(
        *ADD, "--filter", json.dumps(document), "--channel", "eu", "--channel", "acme"
    )
    assert code == 0, err
    assert 'filter:      {"total":{"$gte":100}}' in out
    assert "channels:    acme, eu" in out
    assert _stored(db) == [(document, True, ["acme", "eu"])]
    (endpoint,) = [e["id"] for e in json.loads(cli("endpoints", "list", "--json")[1])]

    code, out, _ = cli("endpoints", "show", str(endpoint))
    assert code == 0 and any(
        line.split() == ["channels", "acme,", "eu"] for line in out.splitlines()
    )

    from_file = tmp_path / "filter.json"
    from_file.write_text('{"$event_type": "order.paid"}', encoding="utf-8")
    code, out, err = cli(
        "endpoints", "update", str(endpoint), "--filter", f"@{from_file}", "--channel", "us"
    )
    assert code == 0, err
    assert f'endpoint {endpoint}: filter {{"$event_type":"order.paid"}}' in out
    assert f"endpoint {endpoint}: channels us" in out
    assert _stored(db) == [({"$event_type": "order.paid"}, True, ["us"])]

    code, out, err = cli("endpoints", "update", str(endpoint), "--filter", "null", "--no-channels")
    assert code == 0, err
    assert (
        f"endpoint {endpoint}: filter none" in out and f"endpoint {endpoint}: channels none" in out
    )
    assert _stored(db) == [(None, False, None)]


def test_a_bad_filter_exits_2_naming_the_clause_and_writes_nothing(
    cli: Cli,  # noqa: F811
    db: Database,
    tmp_path: Path,
) -> None:
    code, _, err = cli(*ADD, "--filter", '{"total": {"$regex": "^1"}}')
    assert code == 2
    assert "filter/total/$regex" in err and "$regex is not supported" in err
    code, _, err = cli(*ADD, "--filter", "{not json")
    assert code == 2 and "--filter is not valid JSON" in err
    code, _, err = cli(*ADD, "--filter", f"@{tmp_path / 'missing.json'}")
    assert code == 2 and "cannot read the filter file" in err
    code, _, err = cli(*ADD, "--channel", "not a name")
    assert code == 2 and "channels" in err
    assert _stored(db) == []


def test_send_carries_channels_to_the_endpoints_that_share_one(
    cli: Cli,  # noqa: F811
) -> None:
    eu = json.loads(cli(*ADD, "--channel", "eu", "--json")[1])["id"]
    every = json.loads(cli(*ADD, "--json")[1])["id"]
    code, out, err = cli("send", "order.paid", '{"n": 1}', "--channel", "eu", "--json")
    assert code == 0, err
    reached = {
        json.loads(cli("messages", "show", str(m), "--json")[1])["endpoint_id"]
        for m in json.loads(out)["message_ids"]
    }
    assert reached == {eu, every}
    code, out, _ = cli("send", "order.paid", '{"n": 2}', "--channel", "us", "--json")
    assert code == 0 and len(json.loads(out)["message_ids"]) == 1
    code, _, err = cli("send", "order.paid", "1", "--channel", "no good")
    assert code == 2 and "channels" in err
