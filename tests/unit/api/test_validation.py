"""Checks made before the database sees a value: text, payloads, cursors, limits."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.logic.errors import InvalidInput, PayloadTooLarge
from tidings.logic.validation import (
    MAX_JSON_DEPTH,
    check_limit,
    clean_text,
    decode_cursor,
    encode_cursor,
    payload_json,
)


@given(st.integers(0, 2**63 - 1))
def test_cursor_round_trips(last_id: int) -> None:
    assert decode_cursor(encode_cursor(last_id)) == last_id


@given(st.text(max_size=40))
def test_any_other_cursor_is_refused_or_is_a_real_cursor(text: str) -> None:
    try:
        value = decode_cursor(text)
    except InvalidInput as exc:
        assert (exc.code, exc.field) == ("invalid_cursor", "cursor")
    else:
        assert decode_cursor(encode_cursor(value)) == value


@pytest.mark.parametrize("text", ["a\x00b", "\ud800", ""])
def test_text_postgres_cannot_store_is_refused(text: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        clean_text(text, "event_type", max_length=200)
    assert raised.value.field == "event_type"


def test_text_longer_than_allowed_is_refused() -> None:
    assert clean_text("x" * 200, "f", max_length=200) == "x" * 200
    with pytest.raises(InvalidInput):
        clean_text("x" * 201, "f", max_length=200)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=20,
)


@given(json_values.filter(lambda v: v is not None))
def test_storable_payloads_keep_their_value(payload: object) -> None:
    try:
        text = payload_json(payload, "payload", max_bytes=1 << 20)
    except InvalidInput as exc:
        assert "NUL" in exc.message or "surrogate" in exc.message
    else:
        assert json.loads(text) == payload


@pytest.mark.parametrize(
    "payload",
    [None, float("inf"), float("nan"), {"k": "\x00"}, {"\ud800": 1}, {1: 2}, {"s": {1, 2}}],
)
def test_payloads_jsonb_would_refuse_are_invalid(payload: object) -> None:
    with pytest.raises(InvalidInput) as raised:
        payload_json(payload, "events[2].payload", max_bytes=1000)
    assert raised.value.field == "events[2].payload"


def test_nesting_is_limited_without_recursion() -> None:
    deep: object = 1
    for _ in range(MAX_JSON_DEPTH - 1):
        deep = [deep]
    payload_json(deep, "payload", max_bytes=1 << 20)
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(InvalidInput, match="nested deeper"):
        payload_json(deep, "payload", max_bytes=1 << 30)


def test_size_limit_counts_utf8_bytes() -> None:
    assert payload_json("é" * 4, "payload", max_bytes=10) == '"éééé"'
    with pytest.raises(PayloadTooLarge) as raised:
        payload_json("é" * 5, "payload", max_bytes=11)
    assert raised.value.code == "payload_too_large"


@pytest.mark.parametrize("limit", [0, 101, True, 1.5])
def test_limits_outside_1_to_100_are_refused(limit: object) -> None:
    with pytest.raises(InvalidInput):
        check_limit(limit)  # type: ignore[arg-type]
