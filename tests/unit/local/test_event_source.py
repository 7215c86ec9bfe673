"""The Lambda SQS event shape, batch responses, chunking and consume_once's edge cases."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from aws_lambda_powertools.utilities.data_classes import SQSEvent
from hypothesis import given
from hypothesis import strategies as st

from tidings.local.event_source import consume_once, failed_message_ids, to_sqs_event
from tidings.local.queue import LocalQueue
from tidings.queue import OutgoingMessage, ReceivedMessage
from tidings.queue.base import MAX_BODY_BYTES, send_chunks

ARN = "arn:aws:sqs:eu-central-1:123456789012:tidings-delivery"


def _received(message_id: str = "id-1", body: str = '{"message": 7}') -> ReceivedMessage:
    return ReceivedMessage(
        message_id=message_id,
        receipt_handle=f"{message_id}#handle",
        body=body,
        receive_count=3,
        attributes={
            "ApproximateReceiveCount": "3",
            "SentTimestamp": "1700000000000",
            "ApproximateFirstReceiveTimestamp": "1700000000100",
            "SenderId": "AIDAEXAMPLE",
        },
    )


def test_the_event_has_the_shape_lambda_gives() -> None:
    event = to_sqs_event([_received()], ARN)

    [record] = event["Records"]
    assert record == {
        "messageId": "id-1",
        "receiptHandle": "id-1#handle",
        "body": '{"message": 7}',
        "attributes": {
            "ApproximateReceiveCount": "3",
            "SentTimestamp": "1700000000000",
            "ApproximateFirstReceiveTimestamp": "1700000000100",
            "SenderId": "AIDAEXAMPLE",
        },
        "messageAttributes": {},
        "md5OfBody": hashlib.md5(b'{"message": 7}').hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": ARN,
        "awsRegion": "eu-central-1",
    }
    parsed = SQSEvent(event)
    assert [r.message_id for r in parsed.records] == ["id-1"]
    assert next(parsed.records).attributes.approximate_receive_count == "3"


def test_the_receive_count_field_wins_over_a_stale_attribute() -> None:
    message = _received()
    bumped = ReceivedMessage(
        message.message_id, message.receipt_handle, message.body, 4, message.attributes
    )
    [record] = to_sqs_event([bumped], ARN)["Records"]
    assert record["attributes"]["ApproximateReceiveCount"] == "4"


def test_an_event_needs_a_queue_arn_and_full_attributes() -> None:
    with pytest.raises(ValueError, match="not an SQS queue ARN"):
        to_sqs_event([_received()], "tidings-delivery")
    bare = ReceivedMessage("id-1", "h", "b", 1, {})
    with pytest.raises(ValueError, match="SentTimestamp"):
        to_sqs_event([bare], ARN)


def test_failed_message_ids_reads_batch_item_failures() -> None:
    response = {"batchItemFailures": [{"itemIdentifier": "a"}, {"itemIdentifier": "b"}]}
    assert failed_message_ids(response) == {"a", "b"}
    assert failed_message_ids({"batchItemFailures": []}) == set()
    assert failed_message_ids({}) == set()
    assert failed_message_ids(None) == set()


@pytest.mark.parametrize(
    "response",
    [
        {"batchItemFailures": "a"},
        {"batchItemFailures": [{"id": "a"}]},
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": ["a"]},
    ],
)
def test_failed_message_ids_refuses_malformed_responses(response: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        failed_message_ids(response)


@given(st.lists(st.text(min_size=1, max_size=40_000), max_size=40))
def test_chunks_keep_order_and_respect_both_limits(bodies: list[str]) -> None:
    messages = [OutgoingMessage(f"m{i}", body) for i, body in enumerate(bodies)]

    chunks = list(send_chunks(messages))

    assert [m for chunk in chunks for m in chunk] == messages
    for chunk in chunks:
        assert 1 <= len(chunk) <= 10
        assert sum(len(m.body.encode()) for m in chunk) <= MAX_BODY_BYTES


def _queue_with(count: int) -> LocalQueue:
    clock_time = [0.0]
    queue = LocalQueue(visibility_timeout_s=10, clock=lambda: clock_time[0])
    queue.send_batch([OutgoingMessage(f"m{i}", f"body-{i}") for i in range(count)])
    return queue


def test_a_response_naming_an_unknown_message_fails_the_whole_batch() -> None:
    queue = _queue_with(2)

    result = consume_once(
        queue,
        lambda event, context: {"batchItemFailures": [{"itemIdentifier": "not-in-batch"}]},
        queue_arn=ARN,
        context=None,
    )

    assert result.deleted == ()
    assert result.failed == result.received
    assert queue.approximate_depth() == 2


def test_a_malformed_response_fails_the_whole_batch() -> None:
    queue = _queue_with(2)

    result = consume_once(
        queue, lambda event, context: {"batchItemFailures": "all"}, queue_arn=ARN, context=None
    )

    assert result.deleted == ()
    assert len(result.failed) == 2
    assert queue.approximate_depth() == 2


def test_a_none_response_means_every_record_succeeded() -> None:
    queue = _queue_with(3)
    seen: list[tuple[dict[str, Any], Any]] = []

    def handler(event: dict[str, Any], context: Any) -> None:
        seen.append((event, context))

    result = consume_once(queue, handler, queue_arn=ARN, context="ctx", max_messages=2)

    [(event, context)] = seen
    assert len(event["Records"]) == 2
    assert context == "ctx"
    assert len(result.deleted) == 2
    assert queue.approximate_depth() == 1


def test_a_raising_handler_is_logged_with_the_batch_and_re_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queue = _queue_with(2)

    def broken(event: dict[str, Any], context: Any) -> None:
        raise TimeoutError("endpoint pool exhausted")

    with pytest.raises(TimeoutError):
        consume_once(queue, broken, queue_arn=ARN, context=None)

    [record] = [r for r in caplog.records if "whole batch will be redelivered" in r.getMessage()]
    assert record.exc_info is not None
    assert "endpoint pool exhausted" in str(record.exc_info[1])
    assert len(getattr(record, "message_ids", ())) == 2
    assert queue.approximate_depth() == 2
