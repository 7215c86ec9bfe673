"""The body a receiver gets, in its endpoint's format, and the event type's header."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from urllib.parse import unquote

import pytest
from standardwebhooks.webhooks import Webhook

from tidings.config import PAYLOAD_FORMATS, ConfigError, Settings
from tidings.dal.delivery import PayloadFormat
from tidings.delivery import signing
from tidings.delivery.request_body import (
    EVENT_TYPE_HEADER,
    envelope_timestamp,
    event_type_header,
    request_body,
)

ACCEPTED = datetime(2026, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
# As the database's jsonb text gives it: spaces after separators, escapes kept.
PAYLOAD = '{"id": 43, "name": "Zo\\u00eb \\"Z\\"", "items": [1, 2.5, null]}'
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


def test_a_raw_body_is_the_payload_byte_for_byte() -> None:
    assert request_body(PayloadFormat.RAW, "order.created", ACCEPTED, PAYLOAD) == PAYLOAD.encode()


def test_an_envelope_holds_the_type_the_acceptance_time_and_the_payload_unchanged() -> None:
    body = request_body(PayloadFormat.ENVELOPE, "order.created", ACCEPTED, PAYLOAD)
    assert json.loads(body) == {
        "type": "order.created",
        "timestamp": "2026-05-01T12:00:00.123456Z",
        "data": json.loads(PAYLOAD),
    }
    # The payload's text is spliced in as stored, never parsed and written again.
    assert body.endswith(b',"data":' + PAYLOAD.encode() + b"}")


@pytest.mark.parametrize("payload", ['"just a string"', "[]", "0", "true", '{"a": {"b": []}}'])
def test_an_envelope_carries_any_json_payload(payload: str) -> None:
    body = request_body(PayloadFormat.ENVELOPE, "t", ACCEPTED, payload)
    assert json.loads(body)["data"] == json.loads(payload)


@pytest.mark.parametrize(
    "event_type", ['quote"d', "back\\slash", "caf\u00e9.cr\u00e9\u00e9", "a\nb"]
)
def test_an_envelope_stays_json_whatever_the_event_type_holds(event_type: str) -> None:
    body = request_body(PayloadFormat.ENVELOPE, event_type, ACCEPTED, "{}")
    assert json.loads(body)["type"] == event_type


def test_the_timestamp_is_utc_whatever_zone_the_time_comes_in() -> None:
    paris = ACCEPTED.astimezone(timezone(timedelta(hours=2)))
    assert envelope_timestamp(paris) == "2026-05-01T12:00:00.123456Z"
    assert envelope_timestamp(ACCEPTED.replace(microsecond=0)) == "2026-05-01T12:00:00.000000Z"
    with pytest.raises(ValueError, match="timezone"):
        envelope_timestamp(ACCEPTED.replace(tzinfo=None))


def test_an_unknown_format_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown payload format"):
        request_body("xml", "t", ACCEPTED, "{}")  # type: ignore[arg-type]


@pytest.mark.parametrize("payload_format", list(PayloadFormat))
def test_the_standard_webhooks_library_verifies_either_body(payload_format: PayloadFormat) -> None:
    body = request_body(payload_format, "order.created", ACCEPTED, PAYLOAD)
    now = int(datetime.now(UTC).timestamp())
    headers = signing.webhook_headers("msg_1", now, body, [SECRET])
    headers[EVENT_TYPE_HEADER] = event_type_header("order.created")
    verified = Webhook(SECRET).verify(body, headers)
    assert verified == json.loads(body)
    # One byte more and it no longer verifies: the signature covers exactly what is sent.
    with pytest.raises(Exception, match="signature"):
        Webhook(SECRET).verify(body + b" ", headers)


def test_an_ordinary_event_type_is_its_own_header_value() -> None:
    for name in ("order.created", "invoice:paid", "user/deleted_v2", "A-B~c"):
        assert event_type_header(name) == name


@pytest.mark.parametrize(
    "event_type", ["two words", "caf\u00e9", "100%", "tab\there", "line\r\nbreak", " padded "]
)
def test_any_other_event_type_is_percent_encoded_and_recoverable(event_type: str) -> None:
    value = event_type_header(event_type)
    assert value != event_type
    assert all(0x21 <= ord(ch) <= 0x7E for ch in value)
    assert unquote(value) == event_type


def test_the_deployment_default_names_a_known_format() -> None:
    assert tuple(f.value for f in PayloadFormat) == PAYLOAD_FORMATS
    assert Settings().payload_format == "raw"
    assert Settings.from_env({"TIDINGS_PAYLOAD_FORMAT": "envelope"}).payload_format == "envelope"
    with pytest.raises(ConfigError, match="TIDINGS_PAYLOAD_FORMAT must be one of raw, envelope"):
        Settings.from_env({"TIDINGS_PAYLOAD_FORMAT": "json"})
