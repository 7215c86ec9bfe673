"""Payload schemas as pure rules: the meta-schema check, the first failure with its pointer and
keyword, nothing fetched from outside a schema, and validators cached by digest."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.logic.errors import InvalidInput
from tidings.logic.payload_schemas import (
    ValidatorCache,
    check_schema,
    compile_schema,
    first_failure,
    json_pointer,
    schema_digest,
)

SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["id"],
    "properties": {
        "id": {"type": "string"},
        "items": {"type": "array", "items": {"$ref": "#/$defs/item"}},
    },
    "$defs": {"item": {"type": "object", "properties": {"qty": {"type": "integer"}}}},
}


def test_a_draft_2020_12_schema_passes_and_a_broken_one_is_named() -> None:
    check_schema(SCHEMA)
    check_schema(True)
    with pytest.raises(InvalidInput) as refused:
        check_schema({"type": "object", "properties": {"a": {"minimum": "3"}}})
    assert refused.value.code == "invalid_schema"
    assert "at /properties/a/minimum" in refused.value.message
    with pytest.raises(InvalidInput, match="must be a JSON object"):
        check_schema([{"type": "string"}])
    with pytest.raises(InvalidInput, match="only draft 2020-12"):
        check_schema({"$schema": "http://json-schema.org/draft-04/schema#"})
    # A pattern that is no regular expression would fail every payload later: refused now.
    with pytest.raises(InvalidInput, match="at /pattern"):
        check_schema({"type": "string", "pattern": "(unclosed"})


def test_the_first_failure_has_the_payloads_pointer_and_the_keyword() -> None:
    validator = compile_schema(SCHEMA)
    assert first_failure(validator, {"id": "a", "items": [{"qty": 2}]}) is None
    deep = first_failure(validator, {"id": "a", "items": [{"qty": 2}, {"qty": "x"}]})
    assert deep is not None
    assert (deep.pointer, deep.keyword) == ("/items/1/qty", "type")
    missing = first_failure(validator, {})
    assert missing is not None
    assert (missing.pointer, missing.keyword) == ("", "required")


def test_pointers_escape_slashes_and_tildes() -> None:
    assert json_pointer(["a/b", "c~d", 0]) == "/a~1b/c~0d/0"
    validator = compile_schema({"properties": {"a/b": {"type": "string"}}})
    failure = first_failure(validator, {"a/b": 1})
    assert failure is not None and failure.pointer == "/a~1b"


def test_a_reference_outside_the_schema_is_never_fetched() -> None:
    remote = {"properties": {"a": {"$ref": "https://schemas.example/a.json"}}}
    check_schema(remote)
    validator = compile_schema(remote)
    assert first_failure(validator, {"b": 1}) is None
    failure = first_failure(validator, {"a": 1})
    assert failure is not None and failure.keyword == "$ref"


@pytest.mark.parametrize(
    "schema",
    [
        {"$ref": "#"},
        {"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
        {"allOf": [{"$ref": "#"}]},
    ],
)
def test_references_that_loop_whatever_the_payload_are_refused_on_write(
    schema: dict[str, Any],
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_schema(schema)
    assert refused.value.code == "invalid_schema"
    assert "$ref" in refused.value.message


def test_a_schema_nested_too_deeply_to_check_is_refused_not_a_crash() -> None:
    schema: Any = True
    for _ in range(400):
        schema = {"not": schema}
    with pytest.raises(InvalidInput) as refused:
        check_schema(schema)
    assert refused.value.code == "invalid_schema"


def test_a_payload_that_reaches_a_reference_loop_is_refused_naming_ref() -> None:
    # Only payloads holding "a" meet the loop, so the schema itself is taken.
    schema = {
        "properties": {"a": {"$ref": "#/$defs/loop"}},
        "$defs": {"loop": {"$ref": "#/$defs/loop"}},
    }
    check_schema(schema)
    validator = compile_schema(schema)
    assert first_failure(validator, {"b": 1}) is None
    failure = first_failure(validator, {"a": 1})
    assert failure is not None and failure.keyword == "$ref" and failure.pointer == ""


def test_a_payload_nested_deeper_than_its_recursive_schema_can_be_followed_is_refused() -> None:
    schema = {"type": "object", "properties": {"child": {"$ref": "#"}}}
    check_schema(schema)
    payload: dict[str, Any] = {}
    for _ in range(2000):
        payload = {"child": payload}
    failure = first_failure(compile_schema(schema), payload)
    assert failure is not None and failure.keyword == "$ref"


@pytest.mark.xfail(
    strict=True,
    reason="patterns run on Python's backtracking re, which has no time limit: a pattern such "
    "as ^(a+)+$ takes exponential time on a payload string of a few dozen characters, holding "
    "the ingest call until its timeout (to fix: run pattern and patternProperties on an engine "
    "with linear time or a time limit)",
)
def test_a_pattern_cannot_hold_ingest_for_long() -> None:
    # Run apart, so that the test itself ends whatever the engine does.
    script = (
        "from tidings.logic.payload_schemas import check_schema, compile_schema, first_failure\n"
        "schema = {'type': 'string', 'pattern': '^(a+)+$'}\n"
        "check_schema(schema)\n"
        "first_failure(compile_schema(schema), 'a' * 40 + '!')\n"
    )
    try:
        subprocess.run([sys.executable, "-c", script], check=False, timeout=5)
    except subprocess.TimeoutExpired:
        pytest.fail("a payload of 41 characters was still being checked after 5 s")


def test_format_is_an_annotation_only() -> None:
    validator = compile_schema({"type": "string", "format": "email"})
    assert first_failure(validator, "not an address") is None


def test_a_long_value_is_cut_in_the_message() -> None:
    validator = compile_schema({"type": "integer"})
    failure = first_failure(validator, "x" * 5000)
    assert failure is not None and len(failure.message) <= 300


@given(st.dictionaries(st.text(max_size=5), st.integers(), max_size=5))
def test_equal_schemas_share_a_digest_whatever_their_key_order(properties: dict[str, int]) -> None:
    forward = {"properties": {k: {"const": v} for k, v in properties.items()}}
    backward = {"properties": {k: {"const": v} for k, v in reversed(properties.items())}}
    assert schema_digest(forward) == schema_digest(backward)
    assert schema_digest(forward) != schema_digest({**forward, "title": "other"})


def test_the_cache_compiles_once_per_digest_and_forgets_the_least_used() -> None:
    cache = ValidatorCache(size=2)
    loads: list[str] = []

    def loader(name: str, schema: Any) -> Any:
        def load() -> Any:
            loads.append(name)
            return schema

        return load

    first = cache.get("a", loader("a", {"type": "string"}))
    assert cache.get("a", loader("a", {"type": "string"})) is first
    cache.get("b", loader("b", {"type": "integer"}))
    cache.get("a", loader("a", {"type": "string"}))
    cache.get("c", loader("c", {"type": "boolean"}))
    assert len(cache) == 2
    cache.get("b", loader("b", {"type": "integer"}))
    assert loads == ["a", "b", "c", "b"]
