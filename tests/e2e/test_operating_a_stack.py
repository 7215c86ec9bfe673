"""Operating a deployed stack, played against ``tidings dev``: the operator CLI over its API
(``--api-url``, ``--token``) prints what it prints on the database, as one JSON document a pipe
can read; and the README's "Sending an event from Python", run exactly as written, sends an event
that the runtime delivers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import wait_until
from tests.support.receivers import Receiver, running_receiver
from tests.support.seed import make_application, make_endpoint, seed_messages
from tidings.dal.connection import Database
from tidings.local.runtime import DevRuntime, RuntimeConfig, dev_settings
from tidings.logic import tokens

ROOT = Path(__file__).resolve().parents[2]
# Nothing scheduled runs while a test looks: the figures stay what the test made them.
QUIET = {"percentiles": 3600.0, "health_monitor": 3600.0, "dead_letter_report": 3600.0}
# What changes between two calls made a moment apart, whatever the mode.
MOMENTS = ("checked_at", "oldest_undelivered_age_s")


@dataclass
class Stack:
    api_url: str
    database_url: str
    db: Database


@pytest.fixture
def stack(database_url: str, tmp_path: Path) -> Iterator[Stack]:
    runtime = DevRuntime(
        dev_settings({}, database_url=database_url),
        RuntimeConfig(
            data_dir=tmp_path / "data",
            port=0,
            sender_environments=1,
            slow_sender_environments=1,
            intervals_s={**QUIET, "pruner": 3600.0},
            alerts_stream=None,
            drain_timeout_s=1.0,
        ),
    )
    db = Database(database_url)
    runtime.start()
    try:
        assert runtime.api is not None
        yield Stack(runtime.api.url, database_url, db)
    finally:
        runtime.stop()
        db.close()


def tidings(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The command line as a user runs it, in a process of its own."""
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("TIDINGS_") and name != "DATABASE_URL"
    }
    environ.update(
        PYTHONPATH=str(ROOT / "layers" / "tidings"),
        TIDINGS_SECRETS_KEY=os.environ["TIDINGS_SECRETS_KEY"],
        **env,
    )
    return subprocess.run(
        [sys.executable, "-c", "import sys; from tidings.cli import main; sys.exit(main())", *argv],
        capture_output=True,
        text=True,
        env=environ,
        timeout=120,
        check=False,
    )


def document(done: subprocess.CompletedProcess[str]) -> Any:
    """Standard output as the one JSON document it must be (what `| jq` reads)."""
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def without_moments(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_moments(v) for k, v in value.items() if k not in MOMENTS}
    if isinstance(value, list):
        return [without_moments(v) for v in value]
    return value


def without_ages(text: str) -> str:
    """The text with its ages (``12 s``) blanked, and the padding and rules of its columns,
    which widen with an age's digits, collapsed."""
    text = re.sub(r"\d[\d,]* s\b", "-", text)
    return re.sub(r"-{2,}", "--", re.sub(r" {2,}", " ", text))


def settled_figures(db: Database) -> None:
    """Two applications' endpoints with messages that stay as they are while the runtime runs:
    awaiting a retry a day from now, dead-lettered, delivered (with attempts to measure)."""
    with db.cursor() as cur:
        acme = make_application(cur, "acme")
        for app_id, n in ((1, 2), (acme, 3)):
            endpoint = make_endpoint(cur, "http://127.0.0.1:9/hook", app_id=app_id)
            for status in ("failed", "dead_letter", "delivered"):
                seed_messages(cur, endpoint, n, status=status)
            cur.execute(
                "INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number,"
                " status_code, response_ms, error_class) SELECT id, endpoint_id, 1,"
                " CASE WHEN status = 'delivered' THEN 200 ELSE 500 END, 40 + id, NULL"
                " FROM tidings.messages WHERE endpoint_id = %s",
                (endpoint,),
            )
        cur.execute(
            "UPDATE tidings.messages SET next_attempt_at = now() + interval '1 day',"
            " last_error = 'http_500', last_status_code = 500 WHERE status = 'failed'"
        )
        cur.execute(
            "UPDATE tidings.messages SET last_error = 'http_500', last_status_code = 500"
            " WHERE status = 'dead_letter'"
        )


def test_status_over_the_api_prints_what_the_database_mode_prints(stack: Stack) -> None:
    settled_figures(stack.db)
    admin = tokens.create_token(stack.db, scope="admin").token
    acme = tokens.create_token(stack.db, scope="app_read", application="acme").token
    on_database = {"DATABASE_URL": stack.database_url}
    over_api = {"TIDINGS_API_URL": stack.api_url + "/v1/", "TIDINGS_TOKEN": admin}

    local = document(tidings("status", "--json", env=on_database))
    remote = document(
        tidings("--api-url", stack.api_url, "--token", admin, "status", "--json", env={})
    )
    assert local["summary"]["dead_letters"] == 5 and local["summary"]["awaiting_retry"] == 5
    assert [a["app_uid"] for a in local["applications"]] == ["acme", "default"]
    assert len(local["endpoints"]) == 2
    assert without_moments(remote) == without_moments(local)
    # The moments are taken at each call, a moment apart.
    assert (
        abs(
            remote["summary"]["oldest_undelivered_age_s"]
            - local["summary"]["oldest_undelivered_age_s"]
        )
        < 60
    )

    # One application's, with its own read-only token over the API.
    local = document(tidings("status", "--app", "acme", "--json", env=on_database))
    remote = document(
        tidings(
            "status",
            "--app",
            "acme",
            "--json",
            env={"TIDINGS_API_URL": stack.api_url, "TIDINGS_TOKEN": acme},
        )
    )
    assert local["application"] == "acme" and len(local["endpoints"]) == 1
    assert without_moments(remote) == without_moments(local)

    local = document(tidings("dead-letters", "--window", "2h", "--json", env=on_database))
    remote = document(tidings("dead-letters", "--window", "2h", "--json", env=over_api))
    assert local["total"] == 5
    assert remote["endpoints"] == local["endpoints"]

    # The text for people is the same too (its times aside).
    local_text = tidings("status", env=on_database)
    remote_text = tidings("status", env=over_api)
    assert (local_text.returncode, remote_text.returncode) == (0, 0)
    assert without_ages(remote_text.stdout) == without_ages(local_text.stdout)

    # The whole queue is an admin's: the application's token is refused, exit 1, naming why.
    refused = tidings("status", env={"TIDINGS_API_URL": stack.api_url, "TIDINGS_TOKEN": acme})
    assert (refused.returncode, refused.stdout) == (1, "")
    assert "[forbidden, HTTP 403]" in refused.stderr


def test_an_api_out_of_reach_exits_1_naming_it(stack: Stack) -> None:
    done = tidings(
        "status",
        "--json",
        env={"TIDINGS_API_URL": "http://127.0.0.1:9", "TIDINGS_TOKEN": "tdg_" + "x" * 43},
    )
    assert (done.returncode, done.stdout) == (1, "")
    assert "cannot reach the API at http://127.0.0.1:9" in done.stderr


def readme_snippet() -> str:
    """The README's "Sending an event from Python", as written there."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Sending an event from Python", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_readme_sends_an_event_from_python_in_five_lines(stack: Stack) -> None:
    snippet = readme_snippet()
    assert len(snippet.strip().splitlines()) == 5
    receiver: Receiver
    with running_receiver() as receiver:
        admin = tokens.create_token(stack.db, scope="admin").token
        from tidings.client import Client

        with Client(stack.api_url, admin) as client:
            client.create_endpoint(receiver.url("orders"), event_types=["order.created"])
        producer = tokens.create_token(stack.db, scope="producer").token
        environ = {
            name: value for name, value in os.environ.items() if not name.startswith("TIDINGS_")
        }
        environ.update(
            PYTHONPATH=str(ROOT / "layers" / "tidings"),
            TIDINGS_API_URL=stack.api_url + "/v1/",
            TIDINGS_TOKEN=producer,
        )
        done = subprocess.run(
            [sys.executable, "-c", snippet],
            capture_output=True,
            text=True,
            env=environ,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        created, ids = done.stdout.strip().split(" ", 1)
        assert created == "True" and len(json.loads(ids)) == 1
        wait_until(lambda: bool(receiver.requests_to("orders")), 60, "the delivery")
        (delivered,) = receiver.requests_to("orders")
        assert json.loads(delivered.body) == {"id": 42, "total": 1999}
        # Run again, it creates nothing: the event id is the idempotency key.
        again = subprocess.run(
            [sys.executable, "-c", snippet],
            capture_output=True,
            text=True,
            env=environ,
            timeout=60,
            check=False,
        )
        assert again.stdout.strip() == f"False {ids}"
