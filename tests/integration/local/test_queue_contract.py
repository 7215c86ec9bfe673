"""One contract, three queues: LocalQueue (test clock), the same served to other processes by the
queue server (real time), and SqsQueue on moto (real time)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from aws_lambda_powertools.utilities.batch import (
    BatchProcessor,
    EventType,
    process_partial_response,
)
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from aws_lambda_powertools.utilities.parser import parse
from aws_lambda_powertools.utilities.parser.models import SqsModel
from moto import mock_aws
from moto.server import ThreadedMotoServer

from tidings.local.event_source import ConsumeResult, consume_once, to_sqs_event
from tidings.local.queue import LocalQueue
from tidings.local.queue_server import DEAD_LETTER, QueueServer
from tidings.queue import DeliveryQueue, OutgoingMessage, QueueError, ReceivedMessage, SqsQueue

MAX_RECEIVE_COUNT = 2
LOCAL_ARN = "arn:aws:sqs:local:000000000000:tidings-delivery"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Harness:
    queue: DeliveryQueue
    dead_letter: DeliveryQueue
    queue_arn: str
    visibility_s: int
    # Moves time forward by at least the given seconds, as each queue understands time.
    advance: Callable[[float], None]


def _local_harness() -> Harness:
    clock = FakeClock()
    dead_letter = LocalQueue(visibility_timeout_s=30, clock=clock)
    queue = LocalQueue(
        visibility_timeout_s=1,
        max_receive_count=MAX_RECEIVE_COUNT,
        dead_letter=dead_letter,
        clock=clock,
    )
    return Harness(queue, dead_letter, LOCAL_ARN, 1, clock.advance)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_SQS", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")


def _create_sqs_pair(client: Any) -> tuple[str, str, str]:
    dlq_url = client.create_queue(QueueName="tidings-delivery-dlq")["QueueUrl"]
    dlq_arn = client.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    policy = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(MAX_RECEIVE_COUNT)}
    queue_url = client.create_queue(
        QueueName="tidings-delivery",
        Attributes={"VisibilityTimeout": "1", "RedrivePolicy": json.dumps(policy)},
    )["QueueUrl"]
    return queue_url, dlq_url, dlq_arn


@pytest.fixture(params=["local", "served", "sqs"])
def harness(request: pytest.FixtureRequest, aws_env: None) -> Iterator[Harness]:
    if request.param == "local":
        yield _local_harness()
        return
    if request.param == "served":
        server = QueueServer(visibility_timeout_s=1, max_receive_count=MAX_RECEIVE_COUNT).start()
        try:
            served = server.connect()
            yield Harness(
                served["fast"],
                served[DEAD_LETTER],
                LOCAL_ARN,
                1,
                lambda seconds: time.sleep(seconds + 0.05),
            )
        finally:
            server.stop()
        return
    with mock_aws():
        client = boto3.client("sqs")
        queue_url, dlq_url, _ = _create_sqs_pair(client)
        queue = SqsQueue(queue_url)

        def sleep_past(seconds: float) -> None:
            # moto compares whole-second timeouts against wall-clock milliseconds.
            time.sleep(seconds + 0.25)

        yield Harness(queue, SqsQueue(dlq_url), queue.queue_arn(), 1, sleep_past)


def _messages(count: int, prefix: str = "m") -> list[OutgoingMessage]:
    return [OutgoingMessage(id=f"{prefix}{i}", body=f"body-{i}") for i in range(count)]


def _drain(queue: DeliveryQueue) -> list[ReceivedMessage]:
    received: list[ReceivedMessage] = []
    while batch := queue.receive(max_messages=10):
        assert len(batch) <= 10
        received.extend(batch)
    return received


def _powertools_handler(poison: set[str]) -> Callable[[dict[str, Any], Any], Mapping[str, Any]]:
    processor = BatchProcessor(event_type=EventType.SQS)

    def record_handler(record: SQSRecord) -> None:
        if record.body in poison:
            raise RuntimeError(f"cannot process {record.body}")

    def handler(event: dict[str, Any], context: Any) -> Mapping[str, Any]:
        return process_partial_response(
            event=event, record_handler=record_handler, processor=processor, context=context
        )

    return handler


def test_batches_larger_than_ten_are_chunked_and_all_arrive(harness: Harness) -> None:
    assert harness.queue.send_batch(_messages(25)) == []
    assert harness.queue.approximate_depth() == 25

    received = _drain(harness.queue)

    assert sorted(m.body for m in received) == sorted(f"body-{i}" for i in range(25))
    assert len({m.message_id for m in received}) == 25
    assert all(m.receive_count == 1 for m in received)


def test_delay_hides_a_message_until_it_is_due(harness: Harness) -> None:
    harness.queue.send_batch(
        [OutgoingMessage("now", "immediate"), OutgoingMessage("later", "delayed", delay_s=1)]
    )

    [immediate] = harness.queue.receive()
    assert immediate.body == "immediate"
    harness.queue.delete([immediate.receipt_handle])
    assert harness.queue.receive() == []
    assert harness.queue.approximate_depth() == 1

    harness.advance(1)
    assert [m.body for m in harness.queue.receive()] == ["delayed"]


def test_visibility_timeout_redelivers_with_a_higher_receive_count(harness: Harness) -> None:
    harness.queue.send_batch([OutgoingMessage("a", "hello")])
    [first] = harness.queue.receive()
    assert first.receive_count == 1
    assert first.attributes["ApproximateReceiveCount"] == "1"
    assert harness.queue.receive() == []

    harness.advance(harness.visibility_s)
    [again] = harness.queue.receive()

    assert again.message_id == first.message_id
    assert again.body == "hello"
    assert again.receive_count == 2
    assert again.attributes["ApproximateReceiveCount"] == "2"
    assert again.receipt_handle != first.receipt_handle


def test_delete_removes_the_message_for_good(harness: Harness) -> None:
    harness.queue.send_batch(_messages(3))
    received = harness.queue.receive()
    assert len(received) == 3

    harness.queue.delete([m.receipt_handle for m in received[:2]])
    harness.advance(harness.visibility_s)

    assert [m.message_id for m in harness.queue.receive()] == [received[2].message_id]
    assert harness.queue.approximate_depth() == 1


def test_change_visibility_to_zero_releases_the_message_at_once(harness: Harness) -> None:
    harness.queue.send_batch([OutgoingMessage("a", "hello")])
    [first] = harness.queue.receive()

    harness.queue.change_visibility(first.receipt_handle, 0)

    [again] = harness.queue.receive()
    assert again.message_id == first.message_id
    assert again.receive_count == 2


def test_a_message_received_too_often_is_redriven_to_the_dead_letter_queue(
    harness: Harness,
) -> None:
    harness.queue.send_batch([OutgoingMessage("a", "poison")])
    for expected_count in range(1, MAX_RECEIVE_COUNT + 1):
        [message] = harness.queue.receive()
        assert message.receive_count == expected_count
        harness.advance(harness.visibility_s)

    assert harness.queue.receive() == []
    assert harness.queue.approximate_depth() == 0
    [dead] = harness.dead_letter.receive()
    assert dead.body == "poison"
    assert dead.message_id == message.message_id


def test_consume_once_deletes_successes_and_redelivers_the_partial_failure(
    harness: Harness,
) -> None:
    harness.queue.send_batch(
        [OutgoingMessage("a", "ok-1"), OutgoingMessage("b", "bad"), OutgoingMessage("c", "ok-2")]
    )

    result = consume_once(
        harness.queue, _powertools_handler({"bad"}), queue_arn=harness.queue_arn, context=None
    )

    assert len(result.received) == 3
    assert len(result.deleted) == 2
    assert len(result.failed) == 1
    assert harness.queue.receive() == []
    harness.advance(harness.visibility_s)
    [again] = harness.queue.receive()
    assert again.body == "bad"
    assert again.message_id == result.failed[0]
    assert again.receive_count == 2
    assert harness.queue.approximate_depth() == 1


def test_consume_once_leaves_the_whole_batch_when_the_handler_raises(harness: Harness) -> None:
    harness.queue.send_batch(_messages(3))

    def broken(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise ConnectionError("database unreachable")

    with pytest.raises(ConnectionError, match="database unreachable"):
        consume_once(harness.queue, broken, queue_arn=harness.queue_arn, context=None)

    harness.advance(harness.visibility_s)
    again = _drain(harness.queue)
    assert sorted(m.body for m in again) == ["body-0", "body-1", "body-2"]
    assert all(m.receive_count == 2 for m in again)


def test_consume_once_on_an_empty_queue_does_nothing(harness: Harness) -> None:
    def must_not_run(event: dict[str, Any], context: Any) -> dict[str, Any]:
        raise AssertionError("handler called without messages")

    result = consume_once(harness.queue, must_not_run, queue_arn=harness.queue_arn, context=None)
    assert result == ConsumeResult()


def test_received_messages_make_an_event_powertools_parses(harness: Harness) -> None:
    harness.queue.send_batch(_messages(2))
    received = harness.queue.receive()

    event = to_sqs_event(received, harness.queue_arn)
    parsed = parse(event=event, model=SqsModel)

    assert [r.messageId for r in parsed.Records] == [m.message_id for m in received]
    assert all(r.attributes.ApproximateReceiveCount == "1" for r in parsed.Records)


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        (OutgoingMessage("late", "x", delay_s=901), "delay_s"),
        (OutgoingMessage("early", "x", delay_s=-1), "delay_s"),
        (OutgoingMessage("m0", "x"), "used twice"),
        (OutgoingMessage("x" * 81, "x"), "1..80 characters"),
        (OutgoingMessage("has space", "x"), "1..80 characters"),
        (OutgoingMessage("dot.ted", "x"), "1..80 characters"),
        (OutgoingMessage("", "x"), "1..80 characters"),
        (OutgoingMessage("empty", ""), "non-empty"),
        (OutgoingMessage("huge", "x" * 262_145), "bytes"),
        (OutgoingMessage("nul", "a\x00b"), "U\\+0000"),
    ],
)
def test_bad_input_raises_before_anything_is_sent(
    harness: Harness, bad: OutgoingMessage, problem: str
) -> None:
    # The bad entry comes last, after a full first chunk, so an eager send would be visible.
    with pytest.raises(ValueError, match=problem):
        harness.queue.send_batch([*_messages(12), bad])

    assert harness.queue.approximate_depth() == 0
    assert harness.queue.receive() == []


def test_an_unknown_receipt_handle_is_refused(harness: Harness) -> None:
    with pytest.raises(QueueError):
        harness.queue.delete(["not-a-receipt-handle"])


def test_receive_limits_are_checked(harness: Harness) -> None:
    with pytest.raises(ValueError, match="max_messages"):
        harness.queue.receive(max_messages=11)
    with pytest.raises(ValueError, match="wait_s"):
        harness.queue.receive(wait_s=21)


class _RecordingClient:
    """Passes calls to the real client and keeps the SendMessageBatch entries."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self.sent_batches: list[list[dict[str, Any]]] = []

    def send_message_batch(self, **params: Any) -> Any:
        self.sent_batches.append(params["Entries"])
        return self._client.send_message_batch(**params)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


@mock_aws
def test_sqs_sends_chunks_of_ten_with_per_entry_delay(aws_env: None) -> None:
    client = boto3.client("sqs")
    queue_url, _, _ = _create_sqs_pair(client)
    recording = _RecordingClient(client)
    queue = SqsQueue(queue_url, client=recording)

    outgoing = [OutgoingMessage(f"m{i}", f"body-{i}", delay_s=i % 3) for i in range(23)]
    assert queue.send_batch(outgoing) == []

    assert [len(batch) for batch in recording.sent_batches] == [10, 10, 3]
    sent = [entry for batch in recording.sent_batches for entry in batch]
    assert [(e["Id"], e["DelaySeconds"]) for e in sent] == [(m.id, m.delay_s) for m in outgoing]


@mock_aws
def test_sqs_reports_entries_the_service_refused(aws_env: None) -> None:
    client = boto3.client("sqs")
    queue_url, _, _ = _create_sqs_pair(client)

    class RefusingClient(_RecordingClient):
        def send_message_batch(self, **params: Any) -> Any:
            refused = [e for e in params["Entries"] if e["MessageBody"] == "refuse me"]
            kept = [e for e in params["Entries"] if e not in refused]
            reply = self._client.send_message_batch(QueueUrl=params["QueueUrl"], Entries=kept)
            reply.setdefault("Failed", []).extend(
                {"Id": e["Id"], "SenderFault": False, "Code": "InternalError"} for e in refused
            )
            return reply

    queue = SqsQueue(queue_url, client=RefusingClient(client))
    outgoing = [OutgoingMessage("a", "fine"), OutgoingMessage("b", "refuse me")]
    outgoing += [OutgoingMessage(f"c{i}", "fine") for i in range(10)]

    assert queue.send_batch(outgoing) == ["b"]
    assert queue.approximate_depth() == 11


@mock_aws
def test_sqs_counts_a_chunk_whose_call_failed_as_failed(aws_env: None) -> None:
    client = boto3.client("sqs")
    queue_url, _, _ = _create_sqs_pair(client)
    gone = SqsQueue(queue_url + "-missing", client=client)

    ids = [m.id for m in _messages(12)]
    assert gone.send_batch(_messages(12)) == ids


def test_sqs_client_follows_aws_endpoint_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://localhost:4566")
    monkeypatch.delenv("AWS_ENDPOINT_URL_SQS", raising=False)

    queue = SqsQueue("http://localhost:4566/000000000000/tidings-delivery")

    assert queue._client.meta.endpoint_url == "http://localhost:4566"


def test_sqs_queue_reaches_a_moto_server_through_aws_endpoint_url(
    aws_env: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://{host}:{port}")
        queue_url = boto3.client("sqs").create_queue(QueueName="over-http")["QueueUrl"]
        queue = SqsQueue(queue_url)

        assert queue.send_batch(_messages(12)) == []
        received = _drain(queue)
        queue.delete([m.receipt_handle for m in received])

        assert len(received) == 12
        assert queue.approximate_depth() == 0
    finally:
        server.stop()
