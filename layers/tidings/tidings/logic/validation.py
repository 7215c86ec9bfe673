"""Checks on plain values that every entry point (API, CLI) makes before the database sees them."""

from __future__ import annotations

import base64
import binascii
import json
import math
from typing import Any

from tidings.dal.delivery import PayloadFormat
from tidings.logic.errors import InvalidInput, PayloadTooLarge

MAX_JSON_DEPTH = 64
MAX_TEXT = 200
PAYLOAD_FORMATS = tuple(f.value for f in PayloadFormat)


def clean_text(value: str, field: str, *, max_length: int, allow_empty: bool = False) -> str:
    """``value`` if PostgreSQL can store it as text within ``max_length`` characters."""
    if not isinstance(value, str):
        raise InvalidInput("invalid_type", f"{field} must be a string", field)
    if not value and not allow_empty:
        raise InvalidInput("invalid_value", f"{field} must not be empty", field)
    if len(value) > max_length:
        raise InvalidInput(
            "invalid_value", f"{field} is longer than {max_length} characters", field
        )
    problem = text_problem(value)
    if problem:
        raise InvalidInput("invalid_value", f"{field} {problem}", field)
    return value


def text_problem(value: str) -> str | None:
    """Why PostgreSQL would refuse ``value`` as text, or None."""
    if "\x00" in value:
        return "contains a NUL character"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (lone surrogate)"
    return None


def payload_json(payload: Any, field: str, *, max_bytes: int) -> str:
    """The payload's compact JSON text, after checking PostgreSQL's jsonb will take it whole."""
    if payload is None:
        raise InvalidInput("invalid_value", f"{field} must not be null", field)
    _check_json_value(payload, field)
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    size = len(text.encode("utf-8"))
    if size > max_bytes:
        raise PayloadTooLarge(
            "payload_too_large", f"{field} is {size} bytes; the limit is {max_bytes}", field
        )
    return text


def _check_json_value(root: Any, field: str) -> None:
    # Iterative, so a deeply nested value cannot exhaust the Python stack.
    stack: list[tuple[Any, int]] = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise InvalidInput(
                "invalid_value", f"{field} is nested deeper than {MAX_JSON_DEPTH} levels", field
            )
        if isinstance(value, str):
            _check_json_text(value, field)
        elif isinstance(value, bool) or value is None or isinstance(value, int):
            continue
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise InvalidInput("invalid_value", f"{field} holds a non-finite number", field)
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise InvalidInput("invalid_value", f"{field} has a non-string key", field)
                _check_json_text(key, field)
                stack.append((item, depth + 1))
        elif isinstance(value, list | tuple):
            stack.extend((item, depth + 1) for item in value)
        else:
            raise InvalidInput(
                "invalid_value", f"{field} holds a {type(value).__name__}, not JSON", field
            )


def _check_json_text(value: str, field: str) -> None:
    problem = text_problem(value)
    if problem:
        raise InvalidInput("invalid_value", f"{field} holds a string that {problem}", field)


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"id:{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The id a cursor stands for; a cursor not made by ``encode_cursor`` is refused."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        prefix, _, number = raw.partition(":")
        if prefix != "id" or not number.isascii() or not number.isdigit() or len(number) > 19:
            raise ValueError(raw)
        if int(number) >= 2**63:
            raise ValueError(raw)
        return int(number)
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise InvalidInput(
            "invalid_cursor", "the cursor is not one this API returned", "cursor"
        ) from None


def check_limit(limit: int, *, maximum: int = 100) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= maximum:
        raise InvalidInput("invalid_value", f"limit must be within 1..{maximum}", "limit")
    return limit


def check_id(value: int, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value < 2**63:
        raise InvalidInput("invalid_value", f"{field} must be a positive 64-bit integer", field)
    return value


def check_payload_format(value: Any, field: str) -> str:
    """``value`` if it names a payload format (raw, envelope)."""
    if not isinstance(value, str) or value not in PAYLOAD_FORMATS:
        raise InvalidInput(
            "invalid_value", f"{field} must be one of {', '.join(PAYLOAD_FORMATS)}", field
        )
    return value
