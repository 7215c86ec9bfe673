"""With AWS_ENDPOINT_URL the local runtime uses real SQS and SNS APIs (here a moto server)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest
from moto.server import ThreadedMotoServer

from tests.support.fake_functions import write_fake_functions
from tidings import wiring
from tidings.config import Settings
from tidings.local.runtime import QUEUE_NAME, DevRuntime, RuntimeConfig, aws_collaborators
from tidings.notify import SnsNotifier
from tidings.queue import SqsQueue


@pytest.fixture
def moto_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    for name in ("AWS_PROFILE", "AWS_ENDPOINT_URL_SQS", "AWS_ENDPOINT_URL_SNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    yield endpoint
    server.stop()


def test_queue_and_topic_are_created_when_not_configured(moto_endpoint: str) -> None:
    queue, arn, notifier = aws_collaborators(Settings(aws_endpoint_url=moto_endpoint))
    assert isinstance(queue, SqsQueue) and isinstance(notifier, SnsNotifier)
    assert arn.endswith(f":{QUEUE_NAME}")
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=queue.queue_url, AttributeNames=["RedrivePolicy", "VisibilityTimeout"]
    )["Attributes"]
    assert json.loads(attributes["RedrivePolicy"])["deadLetterTargetArn"].endswith("-dlq")
    assert int(attributes["VisibilityTimeout"]) >= 30
    assert notifier.topic_arn.endswith(":tidings-alerts")
    # Asking again finds the same queue rather than failing.
    again, _, _ = aws_collaborators(Settings(aws_endpoint_url=moto_endpoint))
    assert again.queue_url == queue.queue_url


def test_configured_queue_is_used_as_is(moto_endpoint: str) -> None:
    url = boto3.client("sqs").create_queue(QueueName="mine")["QueueUrl"]
    queue, arn, _ = aws_collaborators(
        Settings(aws_endpoint_url=moto_endpoint, delivery_queue_url=url)
    )
    assert queue.queue_url == url
    assert arn.endswith(":mine")


@pytest.mark.parametrize("sender_processes", [False, True], ids=["threads", "processes"])
def test_runtime_moves_messages_through_sqs(
    moto_endpoint: str, database_url: str, tmp_path: Path, sender_processes: bool
) -> None:
    functions = write_fake_functions(tmp_path / "functions")
    settings = Settings(
        database_url=database_url, aws_endpoint_url=moto_endpoint, claim_stop_before_timeout_s=0.1
    )
    runtime = DevRuntime(
        settings,
        RuntimeConfig(
            data_dir=tmp_path / "data",
            serve_api=False,
            sender_environments=1,
            claimer_slice_s=0.3,
            intervals_s={},
            functions_dir=functions,
            drain_timeout_s=2.0,
            sender_processes=sender_processes,
        ),
    )
    runtime.start()
    try:
        assert isinstance(wiring.delivery_queue(), SqsQueue)
        assert isinstance(wiring.notifier(), SnsNotifier)
        log = functions / "calls.jsonl"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            calls = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
            if any(c["function"] == "sender" for c in calls):
                break
            time.sleep(0.1)
        sent = [c for c in calls if c["function"] == "sender"]
        assert sent, "no batch reached the sender through SQS"
        assert sent[0]["source"] == runtime.queue_arn
        assert runtime.queue_arn.startswith("arn:aws:sqs:")
        # No queue server: the environments, processes or not, use SQS itself.
        assert runtime.queue_server is None
        assert {c["pid"] != os.getpid() for c in sent} == {sender_processes}
    finally:
        runtime.stop()
