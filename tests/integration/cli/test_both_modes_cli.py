"""The operator commands on the database and over the API (``--api-url``, ``--token``) do the
same, print the same, and exit the same: each scenario runs in both modes, on a database of its
own (over the API, served on loopback as ``tidings dev`` serves it, with an admin token; the
command line is given no database at all)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tidings import wiring
from tidings.cli import main
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.local.api_server import ApiServer
from tidings.local.lambda_env import load_handler
from tidings.logic import tokens

Cli = Callable[..., tuple[int, str, str]]
# The receivers below are loopback addresses on port 9, resolved without the network.
ENDPOINT_RULES = {"TIDINGS_ALLOWED_NETWORKS": "127.0.0.0/8", "TIDINGS_ENDPOINT_PORTS": "9"}


@pytest.fixture(params=["database", "api"])
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def cli(
    mode: str,
    database_url: str,
    db: Database,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Iterator[Cli]:
    def run(*argv: str) -> tuple[int, str, str]:
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse refusing an argument: exit 2, as the shell sees
            code = int(exit_.code or 0)
        captured = capsys.readouterr()
        return code, captured.out, captured.err

    if mode == "database":
        monkeypatch.setenv("DATABASE_URL", database_url)
        for name, value in ENDPOINT_RULES.items():
            monkeypatch.setenv(name, value)
        yield run
        return
    monkeypatch.delenv("DATABASE_URL", raising=False)
    admin = tokens.create_token(db, scope="admin", description="the operator").token
    settings = Settings.from_env({"DATABASE_URL": database_url, **ENDPOINT_RULES})
    with wiring.overridden(settings=settings, database_factory=lambda: Database(database_url)):
        server = ApiServer(
            load_handler("ingest"), "127.0.0.1", 0, authorizer=load_handler("authorizer")
        )
        server.start()
        try:
            monkeypatch.setenv("TIDINGS_API_URL", server.url + "/v1/")
            monkeypatch.setenv("TIDINGS_TOKEN", admin)
            yield run
        finally:
            server.stop()


def _json(out: str) -> Any:
    return json.loads(out)


def _dead(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'dead_letter', dead_lettered_at = now(),"
            " attempts = 5, last_error = 'http_500', last_status_code = 500"
        )


def test_an_application_from_creation_to_deletion(cli: Cli, db: Database, mode: str) -> None:
    code, out, _ = cli("apps", "create", "acme", "--name", "Acme", "--json")
    assert code == 0 and _json(out)["uid"] == "acme"
    add = ("endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "order.paid")
    code, out, _ = cli(*add, "--app", "acme", "--json")
    created = _json(out)
    assert code == 0 and created["secret"].startswith("whsec_")
    endpoint = str(created["id"])
    code, out, _ = cli("endpoints", "list", "--app", "acme", "--json")
    assert [e["id"] for e in _json(out)] == [created["id"]]
    assert created["secret"] not in out

    code, out, _ = cli(
        "endpoints", "update", endpoint, "--url", "http://127.0.0.1:9/moved", "--app", "acme"
    )
    assert (code, out.strip()) == (0, f"endpoint {endpoint}: url http://127.0.0.1:9/moved")
    code, out, _ = cli(
        "endpoints",
        "update",
        endpoint,
        "--event-type",
        "order.paid",
        "--event-type",
        "order.refunded",
        "--description",
        "billing",
        "--app",
        "acme",
        "--json",
    )
    changed = _json(out)
    assert (changed["event_types"], changed["description"]) == (
        ["order.paid", "order.refunded"],
        "billing",
    )
    limits = ("endpoints", "update", endpoint, "--app", "acme")
    code, out, _ = cli(*limits, "--rate-limit", "2.5", "--timeout-ms", "500")
    assert (code, out.splitlines()) == (
        0,
        [f"endpoint {endpoint}: rate limit 2.5/s", f"endpoint {endpoint}: timeout 500 ms"],
    )
    code, out, _ = cli(*limits, "--rate-limit", "default", "--timeout-ms", "default", "--json")
    assert code == 0 and (_json(out)["rate_limit_per_s"], _json(out)["timeout_ms"]) == (None, None)
    # Out of range: the API's rule, the same refusal in both modes, and nothing changed.
    code, _, err = cli(*limits, "--timeout-ms", "99")
    assert code == 2 and "timeout_ms" in err
    code, _, err = cli(*limits, "--rate-limit", "nan")
    assert code == 2 and "rate limit 'nan'" in err
    code, out, _ = cli("endpoints", "show", endpoint, "--app", "acme", "--json")
    assert (_json(out)["rate_limit_per_s"], _json(out)["timeout_ms"]) == (None, None)
    code, out, _ = cli("endpoints", "disable", endpoint, "--app", "acme")
    assert (code, out.strip()) == (0, f"endpoint {endpoint} disabled: http://127.0.0.1:9/moved")
    code, out, _ = cli("endpoints", "enable", endpoint, "--app", "acme", "--json")
    assert code == 0 and _json(out)["enabled"] is True

    send = ("send", "order.paid", '{"id": 42}', "--event-id", "o-42", "--app", "acme", "--json")
    code, out, _ = cli(*send)
    (message,) = _json(out)["message_ids"]
    code, out, _ = cli(*send)
    assert (_json(out)["created"], _json(out)["message_ids"]) == (False, [message])
    code, out, _ = cli("messages", "list", "--app", "acme", "--json")
    assert [m["id"] for m in _json(out)] == [message]
    code, out, _ = cli("messages", "list", "--app", "acme", "--status", "delivered")
    assert (code, out.strip()) == (0, "no messages in application acme match")
    code, out, _ = cli("messages", "list", "--app", "acme", "--endpoint", endpoint)
    assert code == 0 and "order.paid" in out and "o-42" in out and "pending" in out
    code, out, _ = cli("messages", "show", str(message), "--app", "acme", "--json")
    assert _json(out)["payload"] == {"id": 42}
    code, _, err = cli("messages", "resend", str(message), "--app", "acme")
    assert code == 1 and f"message {message} is pending" in err

    _dead(db)
    code, out, _ = cli("dead-letters", "--app", "acme", "--window", "1h", "--json")
    assert [(e["endpoint_id"], e["dead_letters"]) for e in _json(out)["endpoints"]] == [
        (created["id"], 1)
    ]
    code, out, _ = cli("status", "--app", "acme", "--json")
    assert (_json(out)["application"], _json(out)["summary"]["dead_letters"]) == ("acme", 1)
    code, out, _ = cli("replay", "--endpoint", endpoint, "--app", "acme", "--json")
    # The database mode counts what matched first; the API replays in one call.
    assert _json(out) == {"matched": 1 if mode == "database" else None, "requeued": 1}
    code, out, _ = cli("endpoints", "recover", endpoint, "--since", "1h", "--app", "acme")
    assert code == 0 and f"endpoint {endpoint}: sent 0 of 0" in out

    code, out, _ = cli("endpoints", "rotate-secret", endpoint, "--app", "acme", "--json")
    assert _json(out)["secret"] != created["secret"]
    code, out, _ = cli("endpoints", "delete", endpoint, "--app", "acme", "--json")
    assert (code, _json(out)) == (0, {"endpoint_id": created["id"], "deleted": True})
    code, _, err = cli("endpoints", "show", endpoint, "--app", "acme")
    assert code == 1 and f"endpoint {endpoint} does not exist" in err
    code, out, _ = cli("apps", "delete", "acme")
    assert code == 0 and "application acme deleted" in out
    code, out, _ = cli("apps", "list", "--json")
    assert [a["uid"] for a in _json(out)] == ["default", "tidings-operational"]


def test_tokens_and_portal_links(cli: Cli, mode: str) -> None:
    cli("apps", "create", "acme")
    code, out, _ = cli("tokens", "create", "--scope", "app", "--app", "acme", "--json")
    made = _json(out)
    assert code == 0 and made["token"].startswith("tdg_") and made["application"] == "acme"
    code, out, _ = cli("tokens", "list", "--json")
    listed = _json(out)
    assert made["id"] in [t["id"] for t in listed] and "token" not in listed[0]
    assert made["token"] not in out
    code, out, _ = cli("tokens", "revoke", str(made["id"]))
    assert (code, out.strip()) == (0, f"token {made['id']} revoked ({made['token'][:12]}…)")
    base = ("--base-url", "https://portal.example/prod/portal") if mode == "database" else ()
    code, out, _ = cli("portal-link", "acme", "--read-only", "--expires", "10m", *base, "--json")
    link = _json(out)
    assert code == 0 and (link["application"], link["read_only"]) == ("acme", True)
    assert "#link=tdg_" in link["url"]


@pytest.mark.parametrize(
    ("argv", "exit_code", "named"),
    [
        # Input the command cannot take: 2.
        (("endpoints", "add", "ftp://example.com/x", "--event-type", "a"), 2, "url"),
        (("apps", "create", "_x"), 2, "uid"),
        (("tokens", "create", "--scope", "app"), 2, "application"),
        # A refusal at run time: 1, naming the problem.
        (("messages", "show", "999999"), 1, "message 999999 does not exist"),
        (("endpoints", "disable", "424242"), 1, "endpoint 424242 does not exist"),
        (("endpoints", "list", "--app", "nobody"), 1, "application nobody does not exist"),
        (("tokens", "revoke", "99"), 1, "token 99 does not exist"),
        (("apps", "delete", "default"), 1, "the default application cannot be deleted"),
    ],
)
def test_refusals_exit_the_same_in_both_modes(
    cli: Cli, mode: str, argv: tuple[str, ...], exit_code: int, named: str
) -> None:
    code, out, err = cli(*argv)
    assert (code, out) == (exit_code, "")
    assert named in err
    if mode == "api":
        # Over the API the reason code and the status are named too.
        assert "HTTP 4" in err and "[" in err


def test_json_is_one_document_and_the_logs_stay_on_stderr(cli: Cli) -> None:
    cli("endpoints", "add", "http://127.0.0.1:9/hook", "--event-type", "*")
    cli("send", "t", "{}")
    for argv in (("status", "--json"), ("dead-letters", "--json"), ("endpoints", "list", "--json")):
        code, out, _ = cli(*argv)
        assert code == 0
        json.loads(out)
