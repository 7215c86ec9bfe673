"""Alerts through an SNS topic (``AWS_ENDPOINT_URL`` redirects the client like any boto3 one)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tidings.aws_clients import sns_client
from tidings.notify.base import clean_subject, validate_alert


class SnsNotifier:
    def __init__(self, topic_arn: str, client: Any = None) -> None:
        if not topic_arn.startswith("arn:") or ":sns:" not in topic_arn:
            raise ValueError(f"not an SNS topic ARN: {topic_arn!r}")
        self.topic_arn = topic_arn
        self._client = client if client is not None else sns_client()

    def publish(
        self, subject: str, message: str, attributes: Mapping[str, str] | None = None
    ) -> str:
        attributes = dict(attributes or {})
        validate_alert(message, attributes)
        reply = self._client.publish(
            TopicArn=self.topic_arn,
            Subject=clean_subject(subject),
            Message=message,
            MessageAttributes={
                name: {"DataType": "String", "StringValue": value}
                for name, value in attributes.items()
            },
        )
        return str(reply["MessageId"])
