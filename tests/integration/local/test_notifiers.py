"""SnsNotifier against moto SNS (read back through an SQS subscription); local notifiers."""

from __future__ import annotations

import io
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import botocore.exceptions
import pytest
from moto import mock_aws

from tidings.aws_clients import sns_client
from tidings.local.notifier import LocalNotifier, MemoryNotifier
from tidings.notify import Notifier, SnsNotifier


@pytest.fixture
def sns_topic(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Any, str]]:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SNS", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with mock_aws():
        sns = boto3.client("sns")
        sqs = boto3.client("sqs")
        topic_arn = sns.create_topic(Name="tidings-alerts")["TopicArn"]
        queue_url = sqs.create_queue(QueueName="alert-inbox")["QueueUrl"]
        queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queue_arn)
        yield topic_arn, sqs, queue_url


def _delivered(sqs: Any, queue_url: str) -> list[dict[str, Any]]:
    reply = sqs.receive_message(QueueUrl=queue_url, MaxNumberOfMessages=10)
    return [json.loads(message["Body"]) for message in reply.get("Messages", [])]


def test_sns_publishes_subject_message_and_attributes(sns_topic: tuple[str, Any, str]) -> None:
    topic_arn, sqs, queue_url = sns_topic
    notifier: Notifier = SnsNotifier(topic_arn)

    message_id = notifier.publish(
        "Dead letters growing", "12 new dead letters in 5 minutes", {"alert": "dead_letters"}
    )

    [notification] = _delivered(sqs, queue_url)
    assert notification["MessageId"] == message_id
    assert notification["Subject"] == "Dead letters growing"
    assert notification["Message"] == "12 new dead letters in 5 minutes"
    assert notification["MessageAttributes"]["alert"] == {
        "Type": "String",
        "Value": "dead_letters",
    }


def test_sns_subject_is_cut_to_one_line_of_100_characters(
    sns_topic: tuple[str, Any, str],
) -> None:
    topic_arn, sqs, queue_url = sns_topic

    SnsNotifier(topic_arn).publish("Endpoint\nslow: " + "x" * 200, "p95 above 2 s")

    [notification] = _delivered(sqs, queue_url)
    subject = notification["Subject"]
    assert len(subject) == 100
    assert subject.startswith("Endpoint slow: xxx")
    assert subject.endswith("...")


def test_sns_refuses_a_message_over_256_kib_before_calling(
    sns_topic: tuple[str, Any, str],
) -> None:
    topic_arn, sqs, queue_url = sns_topic

    with pytest.raises(ValueError, match="262144"):
        SnsNotifier(topic_arn).publish("Too big", "x" * 262_145)

    assert _delivered(sqs, queue_url) == []


def test_sns_notifier_needs_a_topic_arn() -> None:
    with pytest.raises(ValueError, match="not an SNS topic ARN"):
        SnsNotifier("tidings-alerts", client=object())


def test_local_notifier_prints_and_appends_json_lines(tmp_path: Path) -> None:
    log = tmp_path / "alerts.jsonl"
    stream = io.StringIO()
    notifier: Notifier = LocalNotifier(log, stream=stream)

    first = notifier.publish("Circuit opened", "https://example.test/hook failed 10 times")
    second = notifier.publish("Endpoint disabled", "410 Gone", {"endpoint_id": "42"})

    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    assert [r["message_id"] for r in records] == [first, second]
    assert records[0]["subject"] == "Circuit opened"
    assert records[1]["message"] == "410 Gone"
    assert records[1]["attributes"] == {"endpoint_id": "42"}
    assert all(r["published_at"] for r in records)
    printed = stream.getvalue()
    assert "Circuit opened" in printed
    assert "https://example.test/hook failed 10 times" in printed
    assert "endpoint_id: 42" in printed


def test_local_notifier_without_a_path_only_prints(tmp_path: Path) -> None:
    stream = io.StringIO()
    LocalNotifier(None, stream=stream).publish("Oldest undelivered", "45 minutes old")
    assert "Oldest undelivered" in stream.getvalue()
    assert list(tmp_path.iterdir()) == []


def test_memory_notifier_keeps_alerts_in_order() -> None:
    notifier = MemoryNotifier()
    notifier.publish("one", "first")
    notifier.publish("two", "second", {"k": "v"})

    assert [(a.subject, a.message) for a in notifier.published] == [
        ("one", "first"),
        ("two", "second"),
    ]
    assert notifier.published[1].attributes == {"k": "v"}


@pytest.mark.parametrize(
    ("subject", "message", "attributes", "problem"),
    [
        ("", "m", None, "subject"),
        ("\n\t", "m", None, "subject"),
        ("s", "", None, "message must not be empty"),
        ("s", "m", {"AWS.reserved": "v"}, "attribute name"),
        ("s", "m", {"has space": "v"}, "attribute name"),
        ("s", "m", {"empty": ""}, "non-empty string value"),
    ],
)
def test_bad_alerts_are_refused_with_the_reason(
    subject: str, message: str, attributes: dict[str, str] | None, problem: str
) -> None:
    notifier = MemoryNotifier()
    with pytest.raises(ValueError, match=problem):
        notifier.publish(subject, message, attributes)
    assert notifier.published == []


def test_a_publish_to_an_sns_endpoint_that_never_answers_gives_up_within_ten_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Within the idle-in-transaction timeout of the dead-letter report's transaction."""
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SNS", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    with socket.socket() as silent:
        # Accepts connections (the kernel completes them from the backlog) and never answers.
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        notifier = SnsNotifier(
            "arn:aws:sns:eu-west-1:123456789012:tidings-alerts",
            client=sns_client(f"http://127.0.0.1:{port}"),
        )
        started = time.monotonic()
        with pytest.raises(botocore.exceptions.ReadTimeoutError):
            notifier.publish("Dead letters", "3 dead letters")
        assert time.monotonic() - started < 10
