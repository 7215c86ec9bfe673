"""Several deliveries to a queue message: packed in order within the size SQS bills as one
request, read back exactly, and refused whole when any part is not an envelope."""

from __future__ import annotations

import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.config import MAX_DELIVERIES_PER_MESSAGE, ConfigError, Settings
from tidings.delivery.envelope import (
    PACKED_BODY_BYTES,
    DeliveryEnvelope,
    MalformedEnvelope,
    envelopes_of,
    pack,
)
from tidings.queue import MAX_BODY_BYTES, OutgoingMessage
from tidings.queue.base import validate_outgoing

TOKEN = uuid.UUID("6f1c1f9e-7d39-4a55-9d67-3c8c2f1c0b11")


def _envelopes(count: int, payload: str | None = '{"n": 1}') -> list[DeliveryEnvelope]:
    return [DeliveryEnvelope(n, TOKEN, 1, payload) for n in range(1, count + 1)]


envelope_lists = st.lists(
    st.builds(
        DeliveryEnvelope,
        message_id=st.integers(min_value=1, max_value=2**63 - 1),
        lease_token=st.uuids(),
        attempt=st.integers(min_value=1, max_value=100),
        payload=st.none() | st.text(max_size=3000),
        slow=st.booleans(),
    ),
    max_size=40,
    unique_by=lambda e: e.message_id,
)


@given(envelopes=envelope_lists, per_message=st.integers(min_value=1, max_value=12))
def test_packed_envelopes_read_back_in_their_order_within_the_limits(
    envelopes: list[DeliveryEnvelope], per_message: int
) -> None:
    packed = pack(envelopes, per_message=per_message, max_bytes=8000)

    assert [e for m in packed for e in envelopes_of(m.body)] == envelopes
    for message in packed:
        assert envelopes_of(message.body) == message.envelopes
        assert 1 <= len(message.envelopes) <= per_message
        if len(message.envelopes) > 1:
            assert len(message.body.encode("utf-8")) <= 8000
    # Every body is one SQS accepts.
    validate_outgoing([OutgoingMessage(str(n), m.body) for n, m in enumerate(packed)])


def test_ten_small_deliveries_share_one_message() -> None:
    [message] = pack(_envelopes(10), per_message=10)
    assert json.loads(message.body)["deliveries"][9]["message_id"] == 10
    assert len(message.body.encode()) < 2000


def test_a_pack_closes_at_the_billing_size_and_the_next_one_opens() -> None:
    payload = json.dumps({"pad": "x" * 20_000})
    packed = pack(_envelopes(7, payload), per_message=10)
    assert [len(m.envelopes) for m in packed] == [3, 3, 1]
    assert all(len(m.body.encode()) <= PACKED_BODY_BYTES for m in packed)


def test_a_delivery_too_large_to_share_travels_alone_in_a_body_of_one() -> None:
    big = json.dumps({"pad": "x" * 100_000})
    small = _envelopes(3)
    envelopes = [small[0], DeliveryEnvelope(99, TOKEN, 1, big), small[1], small[2]]
    packed = pack(envelopes, per_message=10)
    assert [m.envelopes for m in packed] == [(small[0],), (envelopes[1],), (small[1], small[2])]
    # Alone, it is the plain envelope (as retries send it), its payload kept: it fits 256 KiB.
    assert DeliveryEnvelope.from_body(packed[1].body) == envelopes[1]
    assert len(packed[1].body.encode()) <= MAX_BODY_BYTES


def test_one_to_a_message_is_the_plain_envelope() -> None:
    envelopes = _envelopes(3)
    assert [m.body for m in pack(envelopes, per_message=1)] == [e.to_body() for e in envelopes]


@pytest.mark.parametrize("per_message", [0, MAX_DELIVERIES_PER_MESSAGE + 1])
def test_packing_outside_the_bounds_is_refused(per_message: int) -> None:
    with pytest.raises(ValueError, match="per_message"):
        pack(_envelopes(2), per_message=per_message)


GOOD = {"message_id": 4, "lease_token": str(TOKEN), "attempt": 1}


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (json.dumps({"deliveries": []}), "deliveries must be a list of 1..100"),
        (json.dumps({"deliveries": GOOD}), "deliveries must be a list"),
        (json.dumps({"deliveries": [GOOD] * 101}), "1..100"),
        (json.dumps({"deliveries": [GOOD, GOOD]}), "same message_id twice"),
        (json.dumps({"deliveries": [GOOD, {**GOOD, "message_id": 0}]}), "message_id"),
        (json.dumps({"deliveries": [GOOD, "x"]}), "JSON str, not an object"),
        (
            json.dumps({"deliveries": [GOOD, {**GOOD, "message_id": 5, "attempt": 2**31}]}),
            "attempt",
        ),
    ],
)
def test_a_pack_with_one_malformed_part_is_malformed_whole(body: str, problem: str) -> None:
    with pytest.raises(MalformedEnvelope, match=problem):
        envelopes_of(body)


@pytest.mark.parametrize("value", [0, MAX_DELIVERIES_PER_MESSAGE + 1])
def test_deliveries_per_message_outside_its_bounds_is_a_configuration_error(value: int) -> None:
    refusal = r"TIDINGS_DELIVERIES_PER_MESSAGE must be within 1\.\.100"
    with pytest.raises(ConfigError, match=refusal):
        Settings(deliveries_per_message=value).validate()
