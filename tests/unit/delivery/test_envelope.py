"""The queue envelope: round trips exactly, refuses anything that is not one."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.delivery.envelope import INLINE_PAYLOAD_BYTES, DeliveryEnvelope, MalformedEnvelope
from tidings.queue import MAX_BODY_BYTES, OutgoingMessage
from tidings.queue.base import validate_outgoing

TOKEN = uuid.UUID("6f1c1f9e-7d39-4a55-9d67-3c8c2f1c0b11")


@given(
    message_id=st.integers(min_value=1, max_value=2**63 - 1),
    attempt=st.integers(min_value=1, max_value=100),
    payload=st.none() | st.text(),
)
def test_an_envelope_round_trips_with_its_payload_text_unchanged(
    message_id: int, attempt: int, payload: str | None
) -> None:
    envelope = DeliveryEnvelope(message_id, TOKEN, attempt, payload)
    assert DeliveryEnvelope.from_body(envelope.to_body()) == envelope


def test_a_payload_that_does_not_fit_is_left_for_the_database() -> None:
    envelope = DeliveryEnvelope(1, TOKEN, 1, '"' + "\\" * INLINE_PAYLOAD_BYTES + '"')
    body = envelope.to_body()
    assert len(body.encode()) <= MAX_BODY_BYTES
    assert DeliveryEnvelope.from_body(body) == DeliveryEnvelope(1, TOKEN, 1, None)


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "JSON list"),
        (json.dumps({"lease_token": str(TOKEN), "attempt": 1}), "message_id"),
        (json.dumps({"message_id": True, "lease_token": str(TOKEN), "attempt": 1}), "message_id"),
        (json.dumps({"message_id": -4, "lease_token": str(TOKEN), "attempt": 1}), "message_id"),
        (json.dumps({"message_id": 4, "lease_token": str(TOKEN), "attempt": "1"}), "attempt"),
        (json.dumps({"message_id": 4, "lease_token": "nope", "attempt": 1}), "lease_token"),
        (json.dumps({"message_id": 4, "attempt": 1}), "lease_token"),
        (
            json.dumps({"message_id": 4, "lease_token": str(TOKEN), "attempt": 1, "payload": {}}),
            "payload",
        ),
    ],
)
def test_a_malformed_body_is_refused_with_the_reason(body: str, problem: str) -> None:
    with pytest.raises(MalformedEnvelope, match=problem):
        DeliveryEnvelope.from_body(body)


def test_characters_sqs_refuses_travel_escaped() -> None:
    envelope = DeliveryEnvelope(1, TOKEN, 1, '{"s": "\ufffe\U0001f600 caf\u00e9"}')
    body = envelope.to_body()
    validate_outgoing([OutgoingMessage(id="1", body=body)])
    assert DeliveryEnvelope.from_body(body) == envelope
