"""The command line with applications and tokens: tidings apps, tidings tokens, and --app on
the operator commands, each acting inside the application it names and naming its problems."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tidings.cli import main
from tidings.dal.connection import Database
from tidings.logic import tokens


@pytest.fixture
def cli(database_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("TIDINGS_ALLOWED_NETWORKS", "127.0.0.0/8")
    monkeypatch.setenv("TIDINGS_ENDPOINT_PORTS", "9")

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    return run


def test_apps_create_and_list(cli: Any) -> None:
    code, out, _ = cli("apps", "create", "acme", "--name", "Acme", "--metadata", '{"plan": "pro"}')
    assert (code, out.strip()) == (0, "application 3 created: acme")
    code, out, _ = cli("apps", "create", "globex", "--json")
    assert json.loads(out)["uid"] == "globex"
    code, out, _ = cli("apps", "list")
    assert code == 0 and "acme" in out and "Acme" in out and "default" in out
    code, out, _ = cli("apps", "list", "--json")
    assert [(a["uid"], a["metadata"]) for a in json.loads(out)] == [
        ("default", {}),
        ("tidings-operational", {}),
        ("acme", {"plan": "pro"}),
        ("globex", {}),
    ]


@pytest.mark.parametrize(
    ("argv", "exit_code", "named"),
    [
        # A refusal at run time (a conflict, an unknown name or id) exits 1; input the command
        # cannot take exits 2, as bad arguments do.
        (("apps", "create", "acme"), 1, "an application with uid acme exists"),
        (("apps", "create", "_x"), 2, "uid must be 1 to 200 letters"),
        (("apps", "create", "ok", "--metadata", "{"), 2, "--metadata is not valid JSON"),
        (
            ("apps", "create", "ok", "--metadata", '{"n": 1}'),
            2,
            "metadata must be an object of strings",
        ),
        (("endpoints", "list", "--app", "nobody"), 1, "application nobody does not exist"),
        (("send", "t", "{}", "--app", "nobody"), 1, "application nobody does not exist"),
        (("tokens", "create", "--scope", "app"), 2, "an application is named for scopes app"),
        (("tokens", "create", "--scope", "app", "--app", "nobody"), 1, "application nobody"),
        (("tokens", "create", "--scope", "admin", "--app", "acme"), 2, "only for them"),
        (("tokens", "create", "--scope", "app_read"), 2, "an application is named for scopes"),
        (("tokens", "revoke", "99"), 1, "token 99 does not exist"),
    ],
)
def test_bad_requests_exit_1_or_2_naming_the_problem(
    cli: Any, argv: tuple[str, ...], exit_code: int, named: str
) -> None:
    cli("apps", "create", "acme")
    code, _, err = cli(*argv)
    assert code == exit_code
    assert named in err


def test_malformed_token_arguments_exit_2(cli: Any, capsys: pytest.CaptureFixture[str]) -> None:
    for argv, named in (
        (("tokens", "create", "--scope", "root"), "invalid choice: 'root'"),
        (("tokens", "create", "--scope", "admin", "--expires", "soon"), "is not a duration"),
        (("tokens", "create", "--scope", "admin", "--expires", "0d"), "is not a duration"),
        (("tokens", "revoke", "x"), "token id 'x' is not a whole number"),
    ):
        with pytest.raises(SystemExit) as exit_info:
            cli(*argv)
        assert exit_info.value.code == 2
        assert named in capsys.readouterr().err


def test_tokens_create_list_revoke(cli: Any, db: Database) -> None:
    cli("apps", "create", "acme")
    code, out, _ = cli("tokens", "create", "--scope", "admin")
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.strip().startswith("token:")]
    admin = line.split()[-1]
    assert tokens.is_token(admin)
    assert tokens.authenticate(db, admin) is not None
    code, out, _ = cli(
        "tokens", "create", "--scope", "app", "--app", "acme", "--expires", "30d", "--json"
    )
    made = json.loads(out)
    assert (made["id"], made["scope"], made["application"]) == (2, "app", "acme")
    expires = datetime.fromisoformat(made["expires_at"])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)
    code, out, _ = cli("tokens", "list")
    assert admin not in out and made["token"] not in out
    assert admin[:12] in out and "acme" in out and "valid" in out
    code, out, _ = cli("tokens", "revoke", "2")
    assert (code, out.strip()) == (0, f"token 2 revoked ({made['token'][:12]}…)")
    assert tokens.authenticate(db, made["token"]) is None
    code, out, _ = cli("tokens", "list", "--json")
    assert [t["revoked_at"] is not None for t in json.loads(out)] == [False, True]
    assert "token" not in json.loads(out)[0]


def test_operator_commands_act_inside_the_application_they_name(cli: Any, db: Database) -> None:
    cli("apps", "create", "acme")
    code, out, _ = cli(
        "endpoints",
        "add",
        "http://127.0.0.1:9/acme",
        "--event-type",
        "*",
        "--app",
        "acme",
        "--json",
    )
    acme_endpoint = json.loads(out)["id"]
    cli("endpoints", "add", "http://127.0.0.1:9/default", "--event-type", "*")
    code, out, _ = cli("endpoints", "list", "--app", "acme", "--json")
    assert [e["id"] for e in json.loads(out)] == [acme_endpoint]
    code, out, _ = cli("endpoints", "list", "--json")
    assert acme_endpoint not in [e["id"] for e in json.loads(out)]
    # Another application's endpoint is unknown here.
    code, _, err = cli("endpoints", "disable", str(acme_endpoint))
    assert code == 1 and f"endpoint {acme_endpoint} does not exist" in err
    code, out, _ = cli("endpoints", "rotate-secret", str(acme_endpoint), "--app", "acme", "--json")
    assert code == 0

    code, out, _ = cli(
        "send", "order.paid", '{"n": 1}', "--event-id", "o-1", "--app", "acme", "--json"
    )
    (message_id,) = json.loads(out)["message_ids"]
    # The same key in the default application is another event.
    code, out, _ = cli("send", "order.paid", '{"n": 1}', "--event-id", "o-1", "--json")
    assert json.loads(out)["created"] is True
    code, _, err = cli("messages", "show", str(message_id))
    assert code == 1 and f"message {message_id} does not exist" in err
    code, out, _ = cli("messages", "show", str(message_id), "--app", "acme", "--json")
    assert json.loads(out)["endpoint_id"] == acme_endpoint

    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 5, last_error = 'http_500', last_status_code = 500"
        )
    code, _, err = cli("replay", "--ids", str(message_id))
    assert code == 1 and f"message {message_id} does not exist" in err
    code, _, err = cli("replay", "--endpoint", str(acme_endpoint))
    assert code == 1 and f"endpoint {acme_endpoint} does not exist" in err
    code, out, _ = cli("dead-letters", "--app", "acme", "--json")
    report = json.loads(out)
    assert report["total"] == 1
    assert [(e["endpoint_id"], e["application"]) for e in report["endpoints"]] == [
        (acme_endpoint, "acme")
    ]
    code, out, _ = cli("dead-letters")
    assert "2 dead letter(s)" in out and "acme" in out and "default" in out
    code, out, _ = cli("replay", "--since", "1h", "--app", "acme", "--json")
    assert json.loads(out) == {"matched": 1, "requeued": 1}

    code, out, _ = cli("status", "--app", "acme", "--json")
    status = json.loads(out)
    assert status["application"] == "acme"
    assert (status["summary"]["pending"], status["summary"]["dead_letters"]) == (1, 0)
    assert [e["endpoint_id"] for e in status["endpoints"]] == [acme_endpoint]
    assert [a["app_uid"] for a in status["applications"]] == ["acme"]
    code, out, _ = cli("status", "--json")
    whole = json.loads(out)
    assert (whole["summary"]["pending"], whole["summary"]["dead_letters"]) == (1, 1)
    assert {a["app_uid"]: a["dead_letters"] for a in whole["applications"]} == {
        "acme": 0,
        "default": 1,
    }
    code, out, _ = cli("status")
    assert "application" in out and "acme" in out
