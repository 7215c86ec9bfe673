"""Ordered delivery in the client: the requests of ``list_lines``, ``iter_lines`` and
``resume_lines``, the ordering options of an endpoint and an event's ordering key as they are
sent, and the answers (lines, an endpoint's ordering, a message's key) as they are read."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.unit.client.test_client_follows_the_document import Sent, recording_client
from tidings.client import Endpoint, EventToSend, Line, LinePage, MessageDetail
from tidings.client.decoding import decode
from tidings.client.models import ResumedLines

ENDPOINT: dict[str, Any] = {
    "id": 7,
    "url": "https://receiver.example/hook",
    "description": "",
    "enabled": True,
    "disabled_reason": None,
    "disabled_at": None,
    "event_types": ["*"],
    "max_attempts": None,
    "retry_schedule": [5.0],
    "retry_schedule_source": "endpoint",
    "timeout_ms": None,
    "rate_limit_per_s": None,
    "payload_format": "raw",
    "max_in_flight": None,
    "lane": "fast",
    "slow_until": None,
    "in_flight_limit": None,
    "previous_secret_expires_at": None,
    "channels": [],
    "ordering": "fifo",
    "fifo_batch_size": 10,
    "fifo_on_dead_letter": "pause",
    "created_at": "2026-01-01T00:00:00Z",
    "updated_at": "2026-01-01T00:00:00Z",
}


def _sent(call: Any, app: str | None = None) -> tuple[str, str, dict[str, list[str]], Any]:
    """The one request ``call(client)`` sends: its method, path, query and JSON body."""
    client, recording = recording_client(app)
    with pytest.raises(Sent):
        result = call(client)
        next(iter(result))
    (request,) = recording.requests
    parts = urlsplit(str(request.url))
    body = None if request.body is None else json.loads(request.body)
    return str(request.method), parts.path, parse_qs(parts.query), body


def test_lines_are_listed_a_page_at_a_time() -> None:
    assert _sent(lambda c: c.list_lines(7)) == (
        "GET",
        "/prod/v1/endpoints/7/lines",
        {"limit": ["50"]},
        None,
    )
    method, path, query, _ = _sent(
        lambda c: c.list_lines(7, paused=True, cursor="abc", limit=5), app="acme"
    )
    assert (method, path) == ("GET", "/prod/v1/apps/acme/endpoints/7/lines")
    assert query == {"paused": ["true"], "cursor": ["abc"], "limit": ["5"]}
    _, _, query, _ = _sent(lambda c: c.iter_lines(7, paused=True))
    assert query == {"paused": ["true"], "limit": ["100"]}


def test_resume_names_the_lines_or_none_for_every_paused_one() -> None:
    assert _sent(lambda c: c.resume_lines(7)) == (
        "POST",
        "/prod/v1/endpoints/7/lines/resume",
        {},
        {},
    )
    _, path, _, body = _sent(lambda c: c.resume_lines(7, ordering_keys=("cus_1", None)), "acme")
    assert path == "/prod/v1/apps/acme/endpoints/7/lines/resume"
    # None names the line of events without a key.
    assert body == {"ordering_keys": ["cus_1", None]}


def test_an_empty_list_of_lines_is_refused_before_any_request() -> None:
    """An empty list is not "every line": nothing is sent."""
    client, recording = recording_client()
    with pytest.raises(ValueError, match="at least one ordering key"):
        client.resume_lines(7, ordering_keys=[])
    with pytest.raises(TypeError, match="not one key"):
        client.resume_lines(7, ordering_keys="cus_1")
    assert recording.requests == []


def test_an_events_ordering_key_is_sent_only_when_given() -> None:
    _, _, _, body = _sent(lambda c: c.send_event("t", {"a": 1}, ordering_key="cus_1"))
    assert body == {"event_type": "t", "payload": {"a": 1}, "ordering_key": "cus_1"}
    _, _, _, body = _sent(lambda c: c.send_event("t", {"a": 1}))
    assert "ordering_key" not in body
    events = [EventToSend("t", {}, "e-1", ordering_key="cus_1"), EventToSend("t", {}, "e-2")]
    _, path, _, body = _sent(lambda c: c.send_events(events))
    assert path == "/prod/v1/events/batch"
    assert [e.get("ordering_key") for e in body["events"]] == ["cus_1", None]


def test_an_endpoints_ordering_options_are_sent_as_given() -> None:
    _, _, _, body = _sent(
        lambda c: c.create_endpoint(
            "https://receiver.example/hook",
            ordering="fifo",
            fifo_batch_size=10,
            fifo_on_dead_letter="pause",
        )
    )
    assert body == {
        "url": "https://receiver.example/hook",
        "ordering": "fifo",
        "fifo_batch_size": 10,
        "fifo_on_dead_letter": "pause",
    }
    _, _, _, body = _sent(lambda c: c.create_endpoint("https://receiver.example/hook"))
    assert not {"ordering", "fifo_batch_size", "fifo_on_dead_letter"} & set(body)
    # On an update, None is the option's default (sent as null); what is left out stays.
    _, _, _, body = _sent(
        lambda c: c.update_endpoint(7, fifo_batch_size=None, fifo_on_dead_letter="continue")
    )
    assert body == {"fifo_batch_size": None, "fifo_on_dead_letter": "continue"}
    _, _, _, body = _sent(lambda c: c.update_endpoint(7, ordering="none"))
    assert body == {"ordering": "none"}


def test_lines_and_the_lines_resumed_are_read_typed() -> None:
    page = decode(
        LinePage,
        {
            "items": [
                {
                    "ordering_key": None,
                    "paused_at": "2026-01-01T00:00:00Z",
                    "head_message_id": 8,
                    "head_status": "dead_letter",
                    "head_attempts": 5,
                    "head_next_attempt_at": "2026-01-01T00:00:00Z",
                    "waiting": 3,
                },
                {
                    "ordering_key": "cus_1",
                    "paused_at": None,
                    "head_message_id": None,
                    "head_status": None,
                    "head_attempts": None,
                    "head_next_attempt_at": None,
                    "waiting": 0,
                },
            ],
            "next_cursor": "abc",
        },
    )
    first, second = page.items
    assert isinstance(first, Line) and first.ordering_key is None
    assert first.paused_at is not None and first.paused_at.tzinfo is not None
    assert (first.head_message_id, first.head_status, first.waiting) == (8, "dead_letter", 3)
    assert (second.ordering_key, second.paused_at, second.head_message_id) == ("cus_1", None, None)
    assert page.next_cursor == "abc"
    resumed = decode(ResumedLines, {"endpoint_id": 7, "resumed": ["cus_1", None]})
    assert (resumed.endpoint_id, resumed.resumed) == (7, ["cus_1", None])


def test_an_endpoints_ordering_is_read_and_its_paused_lines_default_to_none() -> None:
    endpoint = decode(Endpoint, ENDPOINT)
    assert (endpoint.ordering, endpoint.fifo_batch_size, endpoint.fifo_on_dead_letter) == (
        "fifo",
        10,
        "pause",
    )
    assert endpoint.paused_lines == 0
    assert decode(Endpoint, {**ENDPOINT, "paused_lines": 2}).paused_lines == 2


def test_a_messages_ordering_key_is_read_and_defaults_to_none() -> None:
    message: dict[str, Any] = {
        "id": 8,
        "endpoint_id": 7,
        "event_type": "t",
        "event_id": "e-1",
        "status": "waiting",
        "attempts": 0,
        "max_attempts": None,
        "created_at": "2026-01-01T00:00:00Z",
        "next_attempt_at": "2026-01-01T00:00:00Z",
        "delivered_at": None,
        "dead_lettered_at": None,
        "last_error": None,
        "last_status_code": None,
        "last_response_ms": None,
        "example": False,
        "payload": {},
        "channels": [],
        "attempt_history": [],
        "waiting_for": {"reason": "line", "until": None, "explanation": "its line"},
    }
    assert decode(MessageDetail, message).ordering_key is None
    keyed = decode(MessageDetail, {**message, "ordering_key": "cus_1"})
    assert (keyed.ordering_key, keyed.status) == ("cus_1", "waiting")
