"""The claimer and sender Lambda handlers on moto SQS and real PostgreSQL, end to end.

Also: the connection survives the server dropping it between invocations, and a sender killed
between delivering and recording loses nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import boto3
import psycopg2
import pytest
from moto import mock_aws

from functions.claimer import app as claimer_app
from functions.sender import app as sender_app
from tests.integration.delivery.delivery_harness import (
    make_pipeline,
    message_row,
    only_message_id,
    pipeline_settings,
)
from tests.support.receivers import Receiver, running_receiver
from tests.support.seed import make_endpoint, seed_messages
from tidings import wiring
from tidings.dal.connection import Database
from tidings.delivery.attempt import webhook_id
from tidings.local.event_source import ConsumeResult, consume_once
from tidings.local.runtime import SENDER_TIMEOUT_S
from tidings.observability import metrics
from tidings.queue import OutgoingMessage, SqsQueue

ROOT = Path(__file__).resolve().parents[3]


@dataclass
class LambdaContext:
    """What Powertools and the handlers read from Lambda's context object."""

    budget_s: float = 30.0
    function_name: str = "tidings-test"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:tidings-test"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"
    started: float = field(default_factory=time.monotonic)

    def get_remaining_time_in_millis(self) -> int:
        return int((self.budget_s - (time.monotonic() - self.started)) * 1000)


@dataclass
class Aws:
    queue: SqsQueue
    queue_arn: str


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        client = boto3.client("sqs")
        url = client.create_queue(QueueName="tidings-delivery")["QueueUrl"]
        queue = SqsQueue(url, client)
        yield Aws(queue, queue.queue_arn())


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with running_receiver() as r:
        yield r


@pytest.fixture
def wired(database_url: str, aws: Aws) -> Iterator[Aws]:
    # The claimer stops 10 s before its budget ends; a 10.5 s budget claims for half a second.
    settings = pipeline_settings(claim_stop_before_timeout_s=10.0, claim_idle_poll_s=0.1)
    # Metrics added outside a handler (other tests' direct calls) would be flushed with ours.
    metrics.clear_metrics()
    with wiring.overridden(
        settings=settings, queue=aws.queue, database_factory=lambda: Database(database_url)
    ):
        yield aws


def run_claimer() -> dict[str, int]:
    return claimer_app.handler({}, LambdaContext(budget_s=10.5))  # type: ignore[arg-type]


def drain(aws: Aws) -> list[ConsumeResult]:
    results = []
    while (
        result := consume_once(
            aws.queue,
            sender_app.handler,
            queue_arn=aws.queue_arn,
            context=LambdaContext(budget_s=SENDER_TIMEOUT_S),
        )
    ).received:
        results.append(result)
    return results


def emitted_metrics(output: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for line in output.splitlines():
        if not line.startswith("{") or "_aws" not in line:
            continue
        blob: dict[str, Any] = json.loads(line)
        for definition in blob["_aws"]["CloudWatchMetrics"]:
            for metric in definition["Metrics"]:
                value = blob[metric["Name"]]
                values = value if isinstance(value, list) else [value]
                totals[metric["Name"]] = totals.get(metric["Name"], 0) + sum(values)
    return totals


def test_claimer_and_sender_handlers_deliver_through_sqs(
    db: Database, wired: Aws, receiver: Receiver, capsys: pytest.CaptureFixture[str]
) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur, receiver.url("ok")), 12)
        seed_messages(cur, make_endpoint(cur, receiver.url("status/400")), 1)
    wired.queue.send_batch([OutgoingMessage(id="poison", body="{not an envelope")])

    claimed = run_claimer()
    results = drain(wired)

    assert claimed["claimed"] == 13 and claimed["sent"] == 13
    with db.cursor() as cur:
        cur.execute("SELECT status::text, count(*) FROM tidings.messages GROUP BY 1 ORDER BY 1")
        assert cur.fetchall() == [("dead_letter", 1), ("delivered", 12)]
    failed = [message_id for result in results for message_id in result.failed]
    assert len(failed) == 1, "only the malformed message comes back from SQS"
    assert len(receiver.requests) == 13
    metrics = emitted_metrics(capsys.readouterr().out)
    assert metrics["Delivered"] == 12
    assert metrics["DeadLettered"] == 1
    assert metrics["Claimed"] == 13


def test_a_connection_killed_between_invocations_is_replaced_transparently(
    db: Database, wired: Aws, receiver: Receiver, postgres_admin_dsn: str
) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, receiver.url("ok"))
        seed_messages(cur, endpoint_id, 2)
    run_claimer()
    drain(wired)
    old_pid = wiring.database().connection.get_backend_pid()

    admin = psycopg2.connect(postgres_admin_dsn)
    admin.autocommit = True
    with admin.cursor() as cur:
        cur.execute("SELECT pg_terminate_backend(%s)", (old_pid,))
        assert cur.fetchone() == (True,)
    admin.close()
    with db.cursor() as cur:
        seed_messages(cur, endpoint_id, 3)

    claimed = run_claimer()
    drain(wired)

    assert claimed["claimed"] == 3
    assert wiring.database().connection.get_backend_pid() != old_pid
    with db.cursor() as cur:
        cur.execute("SELECT count(*) FROM tidings.messages WHERE status = 'delivered'")
        assert cur.fetchone() == (5,)


_CRASHING_SENDER = """
import sys
from tidings.dal.connection import Database
from tidings.delivery.http_transport import HttpTransport
from tidings.local.queue import LocalQueue
from tidings.delivery.sender import QueueRecord, Sender
from tidings.config import Settings
from tidings.delivery.ssrf import parse_allowed_networks
from tests.support.secrets import secrets_keyring

settings = Settings(allowed_networks=("127.0.0.0/8",))
transport = HttpTransport(allowed_networks=parse_allowed_networks(settings.allowed_networks))
sender = Sender(Database(sys.argv[1]), LocalQueue(), settings, transport, keyring=secrets_keyring())
sender.process([QueueRecord("record-1", sys.argv[2])])
"""


def test_a_sender_killed_between_delivery_and_recording_redelivers_after_the_lease(
    db: Database, database_url: str, receiver: Receiver
) -> None:
    pipeline = make_pipeline(db)
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur, receiver.url("hold")), 1)
    pipeline.claimer.claim_once()
    [queued] = pipeline.queue.receive()
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'layers' / 'tidings'}{os.pathsep}{ROOT}"}
    process = subprocess.Popen(
        [sys.executable, "-c", _CRASHING_SENDER, database_url, queued.body], env=env
    )
    try:
        assert receiver.request_arrived.wait(30), "the sender never reached the receiver"
    finally:
        process.kill()
        process.wait()
    receiver.release()

    message_id = only_message_id(db)
    row = message_row(db, message_id)
    assert (row["status"], row["attempts"]) == ("in_flight", 0)

    # Nothing happens before the lease expires; after it, the claimer takes the row back.
    assert pipeline.claimer.claim_once().claimed == 0
    with db.cursor() as cur:
        cur.execute("UPDATE tidings.messages SET next_attempt_at = now() - interval '1 second'")
    report = pipeline.claim_and_deliver()

    assert report.delivered == 1
    row = message_row(db, message_id)
    assert (row["status"], row["attempts"]) == ("delivered", 1)
    first, second = receiver.requests
    assert first.headers["webhook-id"] == second.headers["webhook-id"] == webhook_id(message_id)
    assert first.body == second.body


def test_the_sender_handler_returns_the_whole_batch_when_the_database_is_unreachable(
    aws: Aws, receiver: Receiver
) -> None:
    def unreachable() -> Database:
        database = Database("postgresql://postgres@127.0.0.1:1/none?connect_timeout=1")
        database.max_retries = 1
        return database

    aws.queue.send_batch(
        [
            OutgoingMessage(
                id=f"m{n}",
                body=json.dumps({"message_id": n, "lease_token": str(uuid.uuid4()), "attempt": 1}),
            )
            for n in (1, 2, 3)
        ]
    )
    with wiring.overridden(
        settings=pipeline_settings(), queue=aws.queue, database_factory=unreachable
    ):
        result = consume_once(
            aws.queue,
            sender_app.handler,
            queue_arn=aws.queue_arn,
            context=LambdaContext(budget_s=SENDER_TIMEOUT_S),
        )

    assert len(result.received) == 3
    assert set(result.failed) == set(result.received)
    assert receiver.requests == []
