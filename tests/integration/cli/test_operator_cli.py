"""The operator CLI against a real database: tables for people, JSON for scripts, exit code 2
with the problem named for bad arguments."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tidings.cli import main
from tidings.dal.connection import Database


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("DATABASE_URL", database_url)
    # The targets below are loopback addresses, resolved without the network, on port 9.
    monkeypatch.setenv("TIDINGS_ALLOWED_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("TIDINGS_ENDPOINT_PORTS", "9")

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def _json(out: str) -> Any:
    return json.loads(out)


def test_endpoint_lifecycle(cli: Any) -> None:
    code, out, _ = cli(
        "endpoints",
        "add",
        "http://127.0.0.1:9/hook",
        "--event-type",
        "order.created",
        "--event-type",
        "order.paid",
        "--json",
    )
    assert code == 0
    created = _json(out)
    assert created["secret"].startswith("whsec_")
    assert created["event_types"] == ["order.created", "order.paid"]
    endpoint_id = created["id"]

    code, out, _ = cli("endpoints", "list")
    assert code == 0
    assert "http://127.0.0.1:9/hook" in out and "order.created, order.paid" in out
    assert created["secret"] not in out

    code, out, _ = cli("endpoints", "rotate-secret", str(endpoint_id), "--json")
    rotated = _json(out)
    assert rotated["secret"] != created["secret"]

    code, out, _ = cli("endpoints", "disable", str(endpoint_id))
    assert code == 0 and f"endpoint {endpoint_id} disabled" in out
    code, out, _ = cli("endpoints", "list", "--json")
    assert _json(out)[0]["enabled"] is False


def test_human_add_shows_the_secret_once(cli: Any) -> None:
    code, out, _ = cli("endpoints", "add", "http://127.0.0.1:9/a", "--event-type", "*")
    assert code == 0
    assert "secret:      whsec_" in out


def test_send_show_and_idempotency(cli: Any) -> None:
    cli("endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "order.created")
    code, out, _ = cli("send", "order.created", '{"id": 42}', "--event-id", "o-42", "--json")
    assert code == 0
    sent = _json(out)
    assert sent["created"] is True and len(sent["message_ids"]) == 1
    code, out, _ = cli("send", "order.created", '{"id": 42}', "--event-id", "o-42")
    assert "already recorded earlier" in out

    message_id = sent["message_ids"][0]
    code, out, _ = cli("messages", "show", str(message_id))
    assert code == 0
    assert "order.created o-42" in out and '{"id": 42}' in out and "pending" in out
    assert "waiting for" in out and "the claimer leases due messages" in out
    code, out, _ = cli("messages", "show", str(message_id), "--json")
    assert _json(out)["payload"] == {"id": 42}


def test_dead_letters_report_and_replay(cli: Any, db: Database) -> None:
    cli("endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "*")
    for n in range(3):
        cli("send", "thing.happened", json.dumps({"n": n}))
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 5, last_error = 'http_500', last_status_code = 500"
        )
        cur.execute(
            "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, status_code,"
            " error_class) SELECT id, endpoint_id, 5, 500, 'http_500' FROM tidings.messages"
        )
    code, out, _ = cli("dead-letters")
    assert code == 0
    # Each endpoint by its origin, as in the JSON and the scheduled report.
    assert "3 dead letter(s)" in out and "http://127.0.0.1:9 " in out and "What to do" in out
    code, out, _ = cli("dead-letters", "--json")
    assert _json(out)["total"] == 3
    with db.cursor() as cur:
        # A view: the scheduled report still has all three to report.
        cur.execute(
            "SELECT count(*) FROM tidings.messages WHERE dead_letter_reported_at IS NOT NULL"
        )
        assert cur.fetchone() == (0,)

    code, out, _ = cli("status", "--json")
    status = _json(out)
    assert status["summary"]["dead_letters"] == 3
    assert status["endpoints"][0]["dead_letter"] == 3
    code, out, _ = cli("status")
    assert "dead letters" in out and "endpoint" in out

    code, out, _ = cli("replay", "--since", "1h", "--json")
    assert _json(out) == {"matched": 3, "requeued": 3}
    code, out, _ = cli("replay", "--since", "1h")
    assert "requeued 0 of 0" in out
    with db.cursor() as cur:
        cur.execute("SELECT DISTINCT status::text, attempts FROM tidings.messages")
        assert cur.fetchall() == [("pending", 0)]


@pytest.mark.parametrize(
    ("argv", "exit_code", "named"),
    [
        (("send", "order.created", "{not json"), 2, "JSON is not valid JSON"),
        (("replay",), 2, "--endpoint ID, --since TIME or --ids"),
        # An unknown id is a refusal at run time: exit 1.
        (("messages", "show", "999999"), 1, "message 999999 does not exist"),
        (("endpoints", "add", "ftp://example.com/x", "--event-type", "a"), 2, "url"),
        (("endpoints", "disable", "424242"), 1, "endpoint 424242 does not exist"),
    ],
)
def test_bad_requests_exit_1_or_2_naming_the_problem(
    cli: Any, argv: tuple[str, ...], exit_code: int, named: str
) -> None:
    code, _, err = cli(*argv)
    assert code == exit_code
    assert named in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (
            ("endpoints", "add", "http://127.0.0.1:6379/x", "--event-type", "a"),
            "the URL's port 6379 cannot be reached from this deployment; the allowed ports are 9",
        ),
        (
            (
                "endpoints",
                "add",
                "http://127.0.0.1:9/x",
                "--event-type",
                "a",
                "--rate-limit",
                "1e-300",
            ),
            "rate_limit_per_s must be at least one request a minute",
        ),
        (
            (
                "endpoints",
                "add",
                "http://127.0.0.1:9/x",
                "--event-type",
                "a",
                "--rate-limit",
                "0.01",
            ),
            "(rate_limit_per_s)",
        ),
    ],
)
def test_endpoints_the_sender_could_never_serve_are_refused_with_exit_2(
    cli: Any, db: Database, argv: tuple[str, ...], named: str
) -> None:
    code, out, err = cli(*argv)
    assert code == 2, out
    assert named in err
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.endpoints")
        assert cur.fetchone() == (0,)


def test_a_refused_address_is_not_disclosed(cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    def resolver(host: str, port: int, family: int = 0, type: int = 0):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.9.8.7", port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    code, _, err = cli("endpoints", "add", "http://vault.internal.example:9/x", "--event-type", "a")
    assert code == 2
    assert "the URL's host does not resolve to a public address" in err
    assert "10.9.8.7" not in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("messages", "show", "abc"), "message id 'abc' is not a whole number"),
        (("replay", "--since", "yesterday"), "'yesterday' is neither an ISO 8601 time"),
        (("endpoints", "add", "http://127.0.0.1:9/x"), "--event-type"),
        (("endpoints", "disable", "0"), "endpoint id '0' must be positive"),
    ],
)
def test_malformed_arguments_exit_2_naming_them(
    cli: Any, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], named: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli(*argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_without_a_database_the_error_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["status"]) == 2
    assert "DATABASE_URL is not set" in capsys.readouterr().err


def test_migrate_and_secrets_where_print_one_json_document(cli: Any) -> None:
    code, out, err = cli("migrate", "--json")
    assert code == 0, err
    migrated = _json(out)
    assert migrated["applied"] == []
    assert migrated["secrets_key"].startswith(("local:", "kms:"))
    code, out, err = cli("secrets", "where", "--json")
    assert code == 0, err
    assert _json(out) == {"key": migrated["secrets_key"], "where": migrated["secrets_key_where"]}


def test_status_json_is_one_document_with_the_logs_on_stderr(cli: Any) -> None:
    code, out, _ = cli("status", "--json")
    assert code == 0
    assert set(_json(out)) == {"application", "summary", "applications", "endpoints"}
