"""Helpers for the scheduled jobs' tests: attempts at chosen times and handlers by file."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from types import ModuleType
from typing import Any

from tidings.dal.connection import Cursor
from tidings.local.lambda_env import handler_module


def load_handler(function: str) -> ModuleType:
    """The handler module of ``function`` (``tidings.handlers.<function>``), loaded afresh as a
    module of its own name, as a new execution environment loads it."""
    return handler_module(function, module_name=f"function_{function}_app")


def insert_attempts(
    cur: Cursor,
    endpoint_id: int,
    attempted_at: Sequence[datetime],
    response_ms: Sequence[int | None],
    *,
    status_code: int | None = 200,
    error_class: str | None = None,
) -> None:
    """Attempts of one endpoint at the given times with the given latencies, each for a message
    id of its own (below every id used so far, so no real message is meant)."""
    assert len(attempted_at) == len(response_ms)
    cur.execute(
        """
        INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, attempted_at,
                                      status_code, response_ms, error_class)
        SELECT (SELECT least(min(message_id), 0) FROM tidings.attempts) - n,
               %(endpoint_id)s, 1, t, %(status_code)s, ms, %(error_class)s
        FROM unnest(%(times)s::timestamptz[], %(ms)s::integer[]) WITH ORDINALITY AS a(t, ms, n)
        """,
        {
            "endpoint_id": endpoint_id,
            "times": list(attempted_at),
            "ms": list(response_ms),
            "status_code": status_code,
            "error_class": error_class,
        },
    )


class LambdaContext:
    """The parts of a Lambda context the Powertools decorators read."""

    function_name = "tidings-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:tidings-test"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000


class SnsInbox:
    """An SNS topic (moto) with an SQS queue subscribed to it, to read what was published."""

    def __init__(self) -> None:
        import boto3

        self.sns = boto3.client("sns", region_name="eu-west-1")
        self.sqs = boto3.client("sqs", region_name="eu-west-1")
        self.topic_arn = self.sns.create_topic(Name="tidings-alerts")["TopicArn"]
        self.queue_url = self.sqs.create_queue(QueueName="alerts-inbox")["QueueUrl"]
        queue_arn = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["QueueArn"]
        )["Attributes"]["QueueArn"]
        self.sns.subscribe(TopicArn=self.topic_arn, Protocol="sqs", Endpoint=queue_arn)

    def read(self) -> list[dict[str, Any]]:
        """The notifications published since the last read, oldest first (SNS envelopes)."""
        found: list[dict[str, Any]] = []
        while True:
            reply = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            messages = reply.get("Messages", [])
            if not messages:
                return found
            for message in messages:
                found.append(json.loads(message["Body"]))
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )


def aws_test_environment(monkeypatch: Any) -> None:
    """Fake credentials and a region, so that boto3 talks to moto and never to AWS."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": "eu-west-1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def make_messages(
    cur: Cursor,
    endpoint_id: int,
    count: int,
    *,
    status: str = "pending",
    created_at: datetime | None = None,
    delivered_at: datetime | None = None,
    dead_lettered_at: datetime | None = None,
    dead_letter_reported_at: datetime | None = None,
    attempts: int = 0,
    last_error: str | None = None,
    last_status_code: int | None = None,
) -> list[int]:
    """``count`` messages of one endpoint in any state, each with its own event; their ids."""
    cur.execute(
        """
        WITH ev AS (
            INSERT INTO tidings.events (event_type, event_id, payload, created_at)
            SELECT 'test.event', 'made-' || gen_random_uuid(), jsonb_build_object('n', g),
                   coalesce(%(created_at)s, now())
            FROM generate_series(1, %(count)s) g
            RETURNING id
        )
        INSERT INTO tidings.messages (event_ref, endpoint_id, event_type, status, attempts,
                                      created_at, delivered_at, dead_lettered_at,
                                      dead_letter_reported_at, last_error, last_status_code,
                                      lease_token)
        SELECT ev.id, %(endpoint_id)s, 'test.event', %(status)s::tidings.message_status,
               %(attempts)s, coalesce(%(created_at)s, now()), %(delivered_at)s,
               %(dead_lettered_at)s, %(dead_letter_reported_at)s, %(last_error)s,
               %(last_status_code)s,
               CASE WHEN %(status)s = 'in_flight' THEN gen_random_uuid() END
        FROM ev
        RETURNING id
        """,
        {
            "endpoint_id": endpoint_id,
            "count": count,
            "status": status,
            "created_at": created_at,
            "delivered_at": delivered_at,
            "dead_lettered_at": dead_lettered_at,
            "dead_letter_reported_at": dead_letter_reported_at,
            "attempts": attempts,
            "last_error": last_error,
            "last_status_code": last_status_code,
        },
    )
    return sorted(int(row[0]) for row in cur.fetchall())
