"""Nothing secret reaches a log: not the PostgreSQL server log (exported to CloudWatch Logs on
AWS), not the application's own (Powertools) log.

A PostgreSQL of the test's own runs with exactly the logging settings of the deployed parameter
group (``tidings.deployment.DATABASE_LOG_PARAMETERS``). The ingest API, secret rotation, the
claimer and the sender run against it, each as its own login user, and every path on which that
configuration does log about a statement is taken: lock waits (the rotation, the API's event
and the sender's record each wait on a row another session holds; ``deadlock_timeout`` is short
here so that they are logged at once rather than after a second) and failed statements. The
server log must then show those waits and errors, and no signing secret, payload or response
excerpt.

The same scenario first runs with every statement logged (``log_statement = all``): the payload
and the excerpt are then in the server log (so the search would find them), the signing secrets
still are not (they never reach the database in clear).

Every function's handler (``tidings.handlers``) is also called with Powertools' debugging
switch ``POWERTOOLS_LOGGER_LOG_EVENT`` turned on, with an event full of a marker (tokens, SQS
records, payloads): none of them may log it.
"""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psycopg2
import psycopg2.extensions
import pytest

from tests.integration.api.conftest import api_event
from tests.integration.delivery.delivery_harness import RecordingQueue, pipeline_settings
from tests.integration.maintenance.scheduled_support import LambdaContext, load_handler
from tests.support.app_log import captured_app_log
from tests.support.clusters import Cluster, deployed_like_binaries, throwaway_cluster
from tests.support.receivers import Receiver, running_receiver
from tests.support.secrets import secrets_keyring
from tests.support.tls import TestCa
from tidings import wiring
from tidings.api.app import handle
from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.delivery.claimer import Claimer
from tidings.delivery.http_transport import HttpTransport
from tidings.delivery.sender import QueueRecord, Sender
from tidings.delivery.ssrf import parse_allowed_networks
from tidings.deployment import DATABASE_LOG_PARAMETERS
from tidings.local.lambda_env import handler_names
from tidings.local.runtime import ANY_PORT
from tidings.logic.schema import DatabaseLogin, prepare_database
from tidings.observability import logger

# The deployment's payload limit, which the migrator writes where the SQL functions read it.
LIMIT = Settings().max_payload_bytes

PASSWORD = "a-password-for-these-tests"
LOGINS = {
    "ingest": DatabaseLogin("tidings_fn_ingest", "tidings_ingest", PASSWORD),
    "claimer": DatabaseLogin("tidings_fn_claimer", "tidings_claimer", PASSWORD),
    "sender": DatabaseLogin("tidings_fn_sender", "tidings_sender", PASSWORD),
}
# What may be logged about a statement is what the deployed group says; when it is logged is
# not: lock waits are reported after deadlock_timeout (1 s on RDS), here after 100 ms.
SERVER_SETTINGS = {
    **DATABASE_LOG_PARAMETERS,
    "deadlock_timeout": "'100ms'",
    "lc_messages": "'C'",
    "log_line_prefix": "'%m [%p] %u@%d '",
}
WAIT_S = 0.6


@dataclass
class Traces:
    """What one run of the scenario must not leave in a log."""

    secrets: list[str]
    markers: list[str]
    # Receiver credentials: header values, passwords, tokens, a private key's PEM body.
    credentials: list[str]

    def needles(self) -> list[str]:
        keys = [base64.b64decode(s.removeprefix("whsec_")) for s in self.secrets]
        return [
            *self.secrets,
            *(s.removeprefix("whsec_") for s in self.secrets),
            *(k.hex() for k in keys),
            *self.markers,
            *self.credentials,
        ]


@pytest.fixture(scope="module")
def server() -> Iterator[Cluster]:
    with throwaway_cluster(deployed_like_binaries(), SERVER_SETTINGS) as cluster:
        admin = psycopg2.connect(cluster.dsn())
        admin.autocommit = True
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE tidings")
        admin.close()
        conn = psycopg2.connect(cluster.dsn("tidings"))
        prepare_database(
            conn, secrets_keyring(), max_payload_bytes=LIMIT, logins=list(LOGINS.values())
        )
        conn.close()
        yield cluster


@contextmanager
def holding(cluster: Cluster, statements: list[tuple[str, Any]]) -> Iterator[None]:
    """A transaction of the superuser's that runs ``statements`` and holds their locks for the
    block's duration; rolled back at the end."""
    conn = psycopg2.connect(cluster.dsn("tidings"))
    try:
        with conn.cursor() as cur:
            for sql, params in statements:
                cur.execute(sql, params)
            yield
        conn.rollback()
    finally:
        conn.close()


def in_background(work: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(work()), daemon=True)
    thread.start()
    return thread, result


def call_api(method: str, path: str, body: Any = None) -> tuple[int, Any]:
    response = handle(api_event(method, path, body), None)  # type: ignore[arg-type]
    return response["statusCode"], json.loads(response["body"] or "null")


def run_scenario(cluster: Cluster, receiver: Receiver, run: str) -> Traces:
    """Create and rotate a secret, send events (one waiting on a lock, one refused), deliver
    one to a receiver that fails with a marked body while its record waits on a lock."""
    payload_marker = f"payload-marker-{run}-{uuid.uuid4().hex}"
    excerpt_marker = f"excerpt-marker-{run}-{uuid.uuid4().hex}"
    settings = pipeline_settings(max_attempts=1, endpoint_ports=ANY_PORT)
    event_type = f"order.{run}"

    def as_user(name: str) -> Database:
        return Database(cluster.dsn("tidings", LOGINS[name].user, PASSWORD))

    secrets = []
    api_key = f"api-key-{run}-{uuid.uuid4().hex}"
    password = f"password-{run}-{uuid.uuid4().hex}"
    token = f"token-{run}-{uuid.uuid4().hex}"
    client = TestCa().issue("tidings-client")
    key_body = "".join(client.private_key_pem.splitlines()[1:-1])
    credentials = [
        api_key,
        password,
        token,
        key_body[:40],
        base64.b64encode(f"u:{password}".encode()).decode(),
    ]
    with wiring.overridden(
        settings=settings,
        keyring=secrets_keyring(),
        database_factory=lambda: as_user("ingest"),
    ):
        status, created = call_api(
            "POST",
            "/v1/endpoints",
            {
                "url": receiver.url(f"say/500/{excerpt_marker}"),
                "event_types": [event_type],
                "headers": {"X-Api-Key": api_key},
                "auth": {"type": "basic", "username": "u", "password": password},
                "tls_client_certificate": client.as_credential(),
            },
        )
        assert status == 201, created
        endpoint_id = created["id"]
        secrets.append(created["secret"])
        status, changed = call_api(
            "PATCH", f"/v1/endpoints/{endpoint_id}", {"auth": {"type": "bearer", "token": token}}
        )
        assert status == 200, changed

        # A rotation that waits for another transaction's lock on the endpoint.
        with holding(
            cluster, [("SELECT 1 FROM tidings.endpoints WHERE id = %s FOR UPDATE", (endpoint_id,))]
        ):
            thread, rotated = in_background(
                lambda: call_api("POST", f"/v1/endpoints/{endpoint_id}/rotate-secret")
            )
            time.sleep(WAIT_S)
        thread.join(30)
        assert rotated[0][0] == 200, rotated
        secrets.append(rotated[0][1]["secret"])

        # An event whose key another transaction is inserting: the API waits for it.
        event = {
            "event_type": event_type,
            "event_id": f"order-{run}",
            "payload": {"note": payload_marker},
        }
        with holding(
            cluster,
            [
                (
                    "INSERT INTO tidings.events (event_type, event_id, payload)"
                    " VALUES (%s, %s, '{}')",
                    (event_type, f"order-{run}"),
                )
            ],
        ):
            thread, sent = in_background(lambda: call_api("POST", "/v1/events", event))
            time.sleep(WAIT_S)
        thread.join(30)
        assert sent[0][0] == 202, sent

        # An event the database refuses (an endpoint that does not exist).
        status, refused = call_api(
            "POST",
            "/v1/events",
            {**event, "event_id": f"refused-{run}", "endpoint_ids": [999_999]},
        )
        assert (status, refused["error"]["code"]) == (422, "unknown_endpoint")

    # The claimer and the sender, each as its own user; the sender's record waits for a lock
    # on the endpoint's health row.
    queue = RecordingQueue()
    claimer_db, sender_db = as_user("claimer"), as_user("sender")
    transport = HttpTransport(allowed_networks=parse_allowed_networks(settings.allowed_networks))
    sender = Sender(sender_db, queue, settings, transport, keyring=secrets_keyring())
    try:
        assert Claimer(claimer_db, queue, settings).claim_once().claimed == 1
        received = queue.receive(max_messages=10)
        with holding(
            cluster,
            [
                (
                    "SELECT 1 FROM tidings.endpoint_health WHERE endpoint_id = %s FOR UPDATE",
                    (endpoint_id,),
                )
            ],
        ):
            thread, reports = in_background(
                lambda: sender.process([QueueRecord(m.message_id, m.body) for m in received])
            )
            time.sleep(WAIT_S)
        thread.join(30)
        assert reports[0].dead_lettered == 1
    finally:
        claimer_db.close()
        sender_db.close()
    [request] = receiver.requests_to(f"/say/500/{excerpt_marker}")
    assert payload_marker.encode() in request.body
    # The credentials went out with the request.
    sent = {k.lower(): v for k, v in request.headers.items()}
    assert (sent["x-api-key"], sent["authorization"]) == (api_key, f"Bearer {token}")
    return Traces(secrets, [payload_marker, excerpt_marker], credentials)


def set_server(cluster: Cluster, **settings: str | None) -> None:
    conn = psycopg2.connect(cluster.dsn())
    conn.autocommit = True
    with conn.cursor() as cur:
        for name, value in settings.items():
            if value is None:
                cur.execute(f"ALTER SYSTEM RESET {name}")
            else:
                cur.execute(f"ALTER SYSTEM SET {name} = %s", (value,))
        cur.execute("SELECT pg_reload_conf()")
    conn.close()
    time.sleep(0.3)  # the postmaster signals the backends; let them take it in


def found(text: str, traces: Traces) -> list[str]:
    return [needle for needle in traces.needles() if needle in text]


def test_with_every_statement_logged_payloads_and_excerpts_show_but_secrets_never_do(
    server: Cluster,
) -> None:
    set_server(server, log_statement="all")
    start = len(server.log_text())
    try:
        with running_receiver() as receiver, captured_app_log() as application:
            traces = run_scenario(server, receiver, "control")
    finally:
        set_server(server, log_statement=None)
    logged = server.log_text()[start:]
    assert found(logged, traces) == traces.markers
    assert "tidings_fn_sender@tidings LOG:  statement:" in logged
    assert found(application.getvalue(), traces) == []


def test_with_the_deployed_settings_no_log_holds_a_secret_a_payload_or_an_excerpt(
    server: Cluster,
) -> None:
    start = len(server.log_text())
    with running_receiver() as receiver, captured_app_log() as application:
        traces = run_scenario(server, receiver, "deployed")
    logged = server.log_text()[start:]
    # Every way this configuration logs about a statement was taken ...
    for user in ("tidings_fn_ingest", "tidings_fn_sender"):
        assert f"{user}@tidings LOG:  process" in logged and "still waiting for" in logged, user
    assert logged.count("acquired ") >= 3
    assert "tidings_fn_ingest@tidings ERROR:  tidings.enqueue: unknown endpoint ids" in logged
    # ... and none of it carries what must stay secret; nor does the application's own log.
    assert "STATEMENT:" not in logged and "DETAIL:" not in logged and "CONTEXT:" not in logged
    assert found(logged, traces) == []
    written = application.getvalue()
    assert '"message":"delivery attempt"' in written and '"status_code":500' in written
    assert found(written, traces) == []


FUNCTIONS = handler_names()


def an_event_full_of(marker: str) -> dict[str, Any]:
    """One event that every kind of function reads far enough to be called: an SQS batch, an
    API request with a token, a TOKEN authorizer call, a scheduled event, a custom resource's
    Delete (the migrator answers it without a database)."""
    return {
        "Records": [{"messageId": marker, "body": marker, "eventSourceARN": "arn:aws:sqs"}],
        "httpMethod": "POST",
        "path": "/v1/events",
        "headers": {"Authorization": f"Bearer {marker}", "Content-Type": "application/json"},
        "body": json.dumps({"payload": marker}),
        "type": "TOKEN",
        "authorizationToken": f"Bearer {marker}",
        "methodArn": "arn:aws:execute-api:eu-west-1:123456789012:api/prod/POST/v1/events",
        "source": "aws.events",
        "detail": {"note": marker},
        "RequestType": "Delete",
        "ResourceProperties": {"AdminTokenSecretArn": marker},
    }


def no_database() -> Database:
    raise psycopg2.OperationalError("no database in this test")


def test_the_event_logging_switch_would_log_an_event(monkeypatch: pytest.MonkeyPatch) -> None:
    """The control: with the switch on, a handler that does not pin it off logs its event (so
    the test below would see a function that logged its own)."""
    monkeypatch.setenv("POWERTOOLS_LOGGER_LOG_EVENT", "true")
    marker = f"event-marker-{uuid.uuid4().hex}"

    @logger.inject_lambda_context
    def handler(event: dict[str, Any], context: Any) -> None:
        return None

    with captured_app_log() as application:
        handler(an_event_full_of(marker), LambdaContext())
    assert marker in application.getvalue()


@pytest.mark.filterwarnings("ignore:No application metrics to publish")
@pytest.mark.parametrize("function", FUNCTIONS)
def test_no_function_logs_its_event_when_the_switch_is_on(
    function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Powertools reads the switch when the handler is decorated: the module is loaded with it on.
    monkeypatch.setenv("POWERTOOLS_LOGGER_LOG_EVENT", "true")
    module = load_handler(function)
    marker = f"event-marker-{uuid.uuid4().hex}"
    # Without a database most handlers fail; the event is logged (or not) before that.
    with (
        wiring.overridden(settings=Settings(), database_factory=no_database),
        captured_app_log() as application,
        contextlib.suppress(Exception),
    ):
        module.handler(an_event_full_of(marker), LambdaContext())
    assert marker not in application.getvalue()
