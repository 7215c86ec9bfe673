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
# The database's ranges: messages.id is a bigint, an attempt number an integer.
MAX_MESSAGE_ID = 2**63 - 1
MAX_ATTEMPT = 2**31 - 1


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


def _body(**fields: object) -> str:
    return json.dumps({"message_id": 4, "lease_token": str(TOKEN), "attempt": 1, **fields})


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        # Beyond the database's columns: bigint ids, integer attempt numbers (issue 11).
        (_body(message_id=2**63), "message_id must be an integer within 1..9223372036854775807"),
        (_body(message_id=10**400), "message_id must be an integer within"),
        (_body(message_id=0), "message_id"),
        (_body(message_id=4.0), "message_id"),
        (_body(attempt=2**31), "attempt must be an integer within 1..2147483647"),
        (_body(attempt=0), "attempt"),
        (_body(attempt=None), "attempt"),
        (_body(lease_token=12345), "lease_token"),
        (_body(lease_token=None), "lease_token"),
        (_body(payload="\ud800"), "payload is not valid Unicode"),
        ("[" * 100_000 + "]" * 100_000, "not JSON|nested too deeply"),
        ('{"message_id": ' + "9" * 5000 + "}", "not JSON"),
    ],
    ids=[
        "message_id 2^63",
        "message_id 10^400",
        "message_id 0",
        "message_id float",
        "attempt 2^31",
        "attempt 0",
        "attempt null",
        "lease_token a number",
        "lease_token null",
        "payload a lone surrogate",
        "nested 100000 deep",
        "a number of 5000 digits",
    ],
)
def test_an_envelope_the_database_could_not_take_is_malformed(body: str, problem: str) -> None:
    with pytest.raises(MalformedEnvelope, match=problem):
        DeliveryEnvelope.from_body(body)


def test_the_largest_ids_the_database_holds_are_envelopes() -> None:
    envelope = DeliveryEnvelope(MAX_MESSAGE_ID, TOKEN, MAX_ATTEMPT, "{}")
    assert DeliveryEnvelope.from_body(envelope.to_body()) == envelope


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner),
    max_leaves=12,
)
envelope_fields = st.fixed_dictionaries(
    {},
    optional={
        "message_id": json_values | st.integers(min_value=-(2**70), max_value=2**70),
        "attempt": json_values | st.integers(min_value=-(2**40), max_value=2**40),
        "lease_token": json_values | st.uuids().map(str),
        "payload": json_values,
    },
)


@given(st.text() | envelope_fields.map(json.dumps) | json_values.map(json.dumps))
def test_any_body_is_an_envelope_in_range_or_malformed(body: str) -> None:
    try:
        envelope = DeliveryEnvelope.from_body(body)
    except MalformedEnvelope:
        return
    assert 1 <= envelope.message_id <= MAX_MESSAGE_ID
    assert 1 <= envelope.attempt <= MAX_ATTEMPT
    assert envelope.payload is None or envelope.payload.encode("utf-8")


@given(
    message_id=st.integers(min_value=-(2**70), max_value=2**70),
    attempt=st.integers(min_value=-(2**40), max_value=2**40),
    token=st.uuids(),
    payload=st.none() | st.text(),
)
def test_an_envelope_is_accepted_only_within_the_databases_ranges(
    message_id: int, attempt: int, token: uuid.UUID, payload: str | None
) -> None:
    body = json.dumps(
        {
            "message_id": message_id,
            "attempt": attempt,
            "lease_token": str(token),
            "payload": payload,
        }
    )
    in_range = 1 <= message_id <= MAX_MESSAGE_ID and 1 <= attempt <= MAX_ATTEMPT
    try:
        envelope = DeliveryEnvelope.from_body(body)
    except MalformedEnvelope:
        assert not in_range
    else:
        assert in_range
        assert (envelope.message_id, envelope.attempt) == (message_id, attempt)
