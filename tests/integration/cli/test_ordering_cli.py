"""Ordered delivery through the CLI, on the database and over the API alike: ``--ordering``,
``--fifo-batch-size`` and ``--fifo-on-dead-letter`` on ``endpoints add`` and ``update``, shown by
``show`` and ``list``; ``send --ordering-key``; ``endpoints lines`` and ``endpoints resume`` on
lines paused at a dead letter."""

from __future__ import annotations

import json

import pytest

from tests.integration.cli.test_both_modes_cli import Cli, cli, mode  # noqa: F401 - fixtures
from tidings.dal.connection import Database

ADD = ["endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "*"]
FIFO = ["--ordering", "fifo"]


def _stored(db: Database, endpoint_id: int) -> tuple[object, ...]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT ordering, fifo_batch_size, fifo_on_dead_letter FROM tidings.endpoints"
            " WHERE id = %s",
            (endpoint_id,),
        )
        row = cur.fetchone()
    assert row is not None
    return tuple(row)


def _count_endpoints(db: Database) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.endpoints")
        row = cur.fetchone()
    assert row is not None
    return int(row[0])


def _start_lines(db: Database) -> None:
    """What the claimer does first: the lines of new waiting messages made, their heads due."""
    with db.cursor() as cur:
        cur.execute("SELECT tidings.advance_noted_lines_v1(1000)")


def _dead_letter_head(db: Database, endpoint_id: int, key: str) -> int:
    """The head of a line dead-lettered, and its line moved on as the sender moves it (a FIFO
    endpoint with fifo_on_dead_letter pause pauses it); the head's id."""
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages m SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 5, last_error = 'http_500', last_status_code = 500"
            " FROM tidings.fifo_lines f"
            " WHERE f.endpoint_id = %(e)s AND f.ordering_key = %(k)s"
            " AND m.endpoint_id = f.endpoint_id AND m.line_key = f.ordering_key"
            " AND m.line_seq = f.head_seq RETURNING m.id",
            {"e": endpoint_id, "k": key},
        )
        row = cur.fetchone()
        assert row is not None
        cur.execute(
            "SELECT * FROM tidings.advance_lines_v1(ARRAY[%s]::bigint[], ARRAY[%s]::text[],"
            " NULL, false, true)",
            (endpoint_id, key),
        )
    return int(row[0])


def _rows(out: str) -> list[list[str]]:
    """A table's rows (below its header and rule), split on its column gaps."""
    return [[cell.strip() for cell in line.split("  ") if cell] for line in out.splitlines()[2:]]


def test_an_endpoint_gets_shows_and_changes_its_ordering(
    cli: Cli,  # noqa: F811
    db: Database,
) -> None:
    code, out, err = cli(*ADD, *FIFO, "--fifo-batch-size", "10", "--fifo-on-dead-letter", "pause")
    assert code == 0, err
    assert "  ordering:    fifo (up to 10 messages a request; a dead letter pauses its line)" in out
    (endpoint,) = [e["id"] for e in json.loads(cli("endpoints", "list", "--json")[1])]
    assert _stored(db, endpoint) == ("fifo", 10, "pause")

    code, out, _ = cli("endpoints", "show", str(endpoint), "--json")
    shown = json.loads(out)
    assert (
        shown["ordering"],
        shown["fifo_batch_size"],
        shown["fifo_on_dead_letter"],
        shown["paused_lines"],
    ) == ("fifo", 10, "pause", 0)
    code, out, _ = cli("endpoints", "show", str(endpoint))
    assert code == 0
    facts = {line[:16].strip(): line[16:].strip() for line in out.splitlines()}
    assert facts["ordering"] == "fifo (in the order accepted, one line per ordering key)"
    assert facts["fifo batch size"] == "up to 10"
    assert facts["on dead letter"] == (
        f"pause (its line waits at it: tidings endpoints resume {endpoint})"
    )
    assert facts["paused lines"] == "0"
    code, out, _ = cli("endpoints", "list")
    assert code == 0 and "ordering" in out.splitlines()[0]
    assert "fifo (batch 10, pause)" in out

    update = ("endpoints", "update", str(endpoint))
    code, out, err = cli(*update, "--fifo-batch-size", "1", "--fifo-on-dead-letter", "continue")
    assert code == 0, err
    assert out.splitlines() == [
        f"endpoint {endpoint}: fifo batch size 1",
        f"endpoint {endpoint}: fifo on dead letter continue",
    ]
    assert _stored(db, endpoint) == ("fifo", 1, "continue")
    code, out, _ = cli(*update, "--ordering", "none")
    assert out.strip() == f"endpoint {endpoint}: ordering none (concurrently, in no promised order)"
    assert _stored(db, endpoint) == ("none", 1, "continue")
    code, out, _ = cli("endpoints", "show", str(endpoint))
    assert "ordering" in out and "fifo batch size" not in out
    # A FIFO option of an endpoint without ordering is kept for when it has.
    code, out, _ = cli(*update, "--fifo-batch-size", "5")
    assert out.strip() == (
        f"endpoint {endpoint}: fifo batch size 5 (used once its ordering is fifo)"
    )
    code, out, _ = cli(*update, "--ordering", "fifo", "--json")
    assert (json.loads(out)["ordering"], json.loads(out)["fifo_batch_size"]) == ("fifo", 5)

    # Without the options: no order, one at a time, continue.
    code, out, _ = cli(*ADD, "--json")
    created = json.loads(out)
    assert (
        created["ordering"],
        created["fifo_batch_size"],
        created["fifo_on_dead_letter"],
    ) == ("none", 1, "continue")
    code, out, _ = cli(*ADD)
    assert "ordering:" not in out


@pytest.mark.parametrize("size", ["0", "101", "2.5", "many", "", "٣"])
def test_a_bad_fifo_batch_size_exits_2_naming_it_and_changes_nothing(
    cli: Cli,  # noqa: F811
    db: Database,
    size: str,
) -> None:
    code, out, err = cli(*ADD, *FIFO, "--fifo-batch-size", size)
    assert (code, out) == (2, "")
    assert "--fifo-batch-size" in err and "must be a whole number 1..100" in err
    assert _count_endpoints(db) == 0

    endpoint = json.loads(cli(*ADD, *FIFO, "--fifo-batch-size", "3", "--json")[1])["id"]
    code, _, err = cli("endpoints", "update", str(endpoint), "--fifo-batch-size", size)
    assert code == 2 and "--fifo-batch-size" in err
    assert _stored(db, endpoint) == ("fifo", 3, "continue")


def test_a_bad_ordering_choice_exits_2(cli: Cli) -> None:  # noqa: F811
    code, _, err = cli(*ADD, "--ordering", "lifo")
    assert code == 2 and "--ordering" in err and "invalid choice" in err
    code, _, err = cli(*ADD, "--fifo-on-dead-letter", "stop")
    assert code == 2 and "--fifo-on-dead-letter" in err


def test_an_update_with_nothing_to_change_names_the_ordering_options(
    cli: Cli,  # noqa: F811
) -> None:
    endpoint = json.loads(cli(*ADD, "--json")[1])["id"]
    code, _, err = cli("endpoints", "update", str(endpoint))
    assert code == 2
    assert "--ordering, --fifo-batch-size, --fifo-on-dead-letter" in err


def test_send_carries_the_ordering_key_into_the_line(
    cli: Cli,  # noqa: F811
    db: Database,
) -> None:
    endpoint = json.loads(cli(*ADD, *FIFO, "--json")[1])["id"]
    code, out, err = cli("send", "order.paid", '{"n": 1}', "--ordering-key", "cus_1", "--json")
    assert code == 0, err
    (first,) = json.loads(out)["message_ids"]
    code, out, _ = cli("send", "order.paid", '{"n": 2}', "--ordering-key", "cus_1")
    assert code == 0 and out.startswith("event order.paid ")
    second = int(out.rsplit("messages: ", 1)[1])
    code, out, _ = cli("messages", "show", str(first), "--json")
    assert json.loads(out)["ordering_key"] == "cus_1"
    code, out, _ = cli("messages", "show", str(first))
    assert any(line.split() == ["ordering", "key", "cus_1"] for line in out.splitlines())
    # Until the claimer makes the line, both wait; then the first heads it.
    code, out, _ = cli("messages", "list", "--status", "waiting", "--json")
    assert sorted(m["id"] for m in json.loads(out)) == sorted([first, second])
    _start_lines(db)
    code, out, _ = cli("messages", "list", "--status", "waiting", "--json")
    assert [m["id"] for m in json.loads(out)] == [second]
    code, out, _ = cli("messages", "show", str(second), "--json")
    assert json.loads(out)["status"] == "waiting"

    code, out, _ = cli("send", "order.paid", "{}", "--json")
    (keyless,) = json.loads(out)["message_ids"]
    code, out, _ = cli("messages", "show", str(keyless), "--json")
    assert json.loads(out)["ordering_key"] is None
    code, out, _ = cli("messages", "show", str(keyless))
    assert not any(line.startswith("ordering key") for line in out.splitlines())
    code, out, _ = cli("endpoints", "lines", str(endpoint), "--json")
    assert [(line["ordering_key"], line["head_message_id"]) for line in json.loads(out)] == [
        ("cus_1", first)
    ]


@pytest.mark.parametrize("key", ["", "k" * 201])
def test_a_bad_ordering_key_exits_2_and_records_nothing(
    cli: Cli,  # noqa: F811
    db: Database,
    key: str,
) -> None:
    cli(*ADD, *FIFO)
    code, out, err = cli("send", "order.paid", "{}", "--ordering-key", key)
    assert (code, out) == (2, "")
    assert "ordering_key" in err
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.events WHERE event_type = 'order.paid'")
        assert cur.fetchone() == (0,)


def _paused_endpoint(cli: Cli, db: Database, *app: str) -> tuple[int, dict[str, int]]:  # noqa: F811
    """A FIFO endpoint that pauses at a dead letter, with the lines cus_1 (3 messages), cus_2 (1)
    and that of events without a key (2); cus_1's and the keyless line's heads dead-lettered,
    those lines paused. The endpoint's id and each line's head, by key ('' for none)."""
    endpoint = json.loads(cli(*ADD, *FIFO, "--fifo-on-dead-letter", "pause", *app, "--json")[1])[
        "id"
    ]
    heads: dict[str, int] = {}
    for key in ("cus_1", "cus_1", "cus_2", None, "cus_1", None):
        keyed = () if key is None else ("--ordering-key", key)
        code, out, err = cli("send", "order.paid", "{}", *keyed, *app, "--json")
        assert code == 0, err
        heads.setdefault(key or "", json.loads(out)["message_ids"][0])
    _start_lines(db)
    for key in ("cus_1", ""):
        assert _dead_letter_head(db, endpoint, key) == heads[key]
    return endpoint, heads


def test_lines_are_listed_and_paused_ones_resumed(
    cli: Cli,  # noqa: F811
    db: Database,
) -> None:
    endpoint, heads = _paused_endpoint(cli, db)
    code, out, _ = cli("endpoints", "show", str(endpoint))
    assert f"2 (see tidings endpoints lines {endpoint} --paused)" in out
    code, out, _ = cli("endpoints", "list")
    assert "fifo (batch 1, pause; 2 paused)" in out

    code, out, err = cli("endpoints", "lines", str(endpoint))
    assert code == 0, err
    assert out.splitlines()[0].split() == [
        "ordering",
        "key",
        "head",
        "message",
        "head",
        "status",
        "attempts",
        "waiting",
        "paused",
        "at",
        "(UTC)",
    ]
    # By ordering key: the keyless line ('') first.
    rows = _rows(out)
    assert [row[:5] for row in rows] == [
        ["(none)", str(heads[""]), "dead_letter", "5", "1"],
        ["cus_1", str(heads["cus_1"]), "dead_letter", "5", "2"],
        ["cus_2", str(heads["cus_2"]), "pending", "0", "0"],
    ]
    # Paused at: a time for the paused lines, '-' for the other.
    assert [row[5] != "-" for row in rows] == [True, True, False]
    code, out, _ = cli("endpoints", "lines", str(endpoint), "--paused", "--json")
    listed = json.loads(out)
    assert [(line["ordering_key"], line["head_message_id"]) for line in listed] == [
        (None, heads[""]),
        ("cus_1", heads["cus_1"]),
    ]
    assert all(line["paused_at"] is not None and line["waiting"] > 0 for line in listed)
    assert set(listed[0]) == {
        "ordering_key",
        "paused_at",
        "head_message_id",
        "head_status",
        "head_attempts",
        "head_next_attempt_at",
        "waiting",
    }

    # Naming a line that is not paused with one that is: only the paused one goes on.
    code, out, err = cli(
        "endpoints", "resume", str(endpoint), "--ordering-key", "cus_1", "--ordering-key", "cus_2"
    )
    assert code == 0, err
    assert out.splitlines() == [
        f"endpoint {endpoint}: resumed 1 line: cus_1",
        "  not paused: cus_2",
    ]
    code, out, _ = cli("endpoints", "lines", str(endpoint), "--paused")
    assert [row[0] for row in _rows(out)] == ["(none)"]
    code, out, _ = cli("endpoints", "lines", str(endpoint), "--json")
    cus_1 = next(line for line in json.loads(out) if line["ordering_key"] == "cus_1")
    # Its next message heads it, due now; the one behind waits.
    assert (cus_1["head_status"], cus_1["paused_at"], cus_1["waiting"]) == ("pending", None, 1)

    code, out, _ = cli("endpoints", "resume", str(endpoint), "--ordering-key", "cus_2")
    assert out.strip() == f"endpoint {endpoint}: none of the lines named is paused; nothing resumed"
    code, out, _ = cli("endpoints", "resume", str(endpoint), "--no-key", "--json")
    assert json.loads(out) == {"endpoint_id": endpoint, "resumed": [None]}
    code, out, _ = cli("endpoints", "resume", str(endpoint))
    assert (code, out.strip()) == (0, f"endpoint {endpoint}: no line is paused; nothing to resume")
    code, out, _ = cli("endpoints", "lines", str(endpoint), "--paused")
    assert (code, out.strip()) == (
        0,
        f"no line of endpoint {endpoint} is paused (only FIFO endpoints have lines; see "
        "tidings endpoints show)",
    )
    code, out, _ = cli("endpoints", "show", str(endpoint), "--json")
    assert json.loads(out)["paused_lines"] == 0


def test_resume_without_names_resumes_every_paused_line_of_the_application(
    cli: Cli,  # noqa: F811
    db: Database,
) -> None:
    code, _, err = cli("apps", "create", "acme")
    assert code == 0, err
    endpoint, _ = _paused_endpoint(cli, db, "--app", "acme")
    # In another application the endpoint does not exist.
    code, out, err = cli("endpoints", "lines", str(endpoint))
    assert (code, out) == (1, "") and f"endpoint {endpoint} does not exist" in err
    code, out, err = cli("endpoints", "resume", str(endpoint))
    assert (code, out) == (1, "") and f"endpoint {endpoint} does not exist" in err

    code, out, err = cli("endpoints", "resume", str(endpoint), "--app", "acme")
    assert code == 0, err
    assert out.strip() == f"endpoint {endpoint}: resumed 2 lines: (none), cus_1"
    code, out, _ = cli("endpoints", "lines", str(endpoint), "--app", "acme", "--json")
    assert [(line["ordering_key"], line["paused_at"]) for line in json.loads(out)] == [
        (None, None),
        ("cus_1", None),
        ("cus_2", None),
    ]


def test_an_endpoint_without_ordering_has_no_lines(cli: Cli) -> None:  # noqa: F811
    endpoint = json.loads(cli(*ADD, "--json")[1])["id"]
    cli("send", "order.paid", "{}", "--ordering-key", "cus_1")
    code, out, _ = cli("endpoints", "lines", str(endpoint))
    assert (code, out.strip()) == (
        0,
        f"no line of endpoint {endpoint} has a message on its way (only FIFO endpoints have "
        "lines; see tidings endpoints show)",
    )
    code, out, _ = cli("endpoints", "lines", str(endpoint), "--json")
    assert json.loads(out) == []


def test_many_named_lines_are_resumed_in_both_modes(
    cli: Cli,  # noqa: F811
    db: Database,
) -> None:
    """More keys than the API takes in one request: the same answer either way."""
    endpoint, _ = _paused_endpoint(cli, db)
    named: list[str] = []
    for n in range(150):
        named += ["--ordering-key", f"other_{n}"]
    code, out, err = cli("endpoints", "resume", str(endpoint), *named, "--ordering-key", "cus_1")
    assert code == 0, err
    assert out.splitlines()[0] == f"endpoint {endpoint}: resumed 1 line: cus_1"
    assert "other_149" in out.splitlines()[1]
