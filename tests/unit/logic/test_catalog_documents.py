"""The catalog as an OpenAPI 3.1 document: how names, schemas and examples are read, and that
writing then reading gives back the same types."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.logic import operational
from tidings.logic.catalog_documents import TypeSpec, read_document, write_document
from tidings.logic.errors import InvalidInput
from tidings.logic.event_types import check_name
from tidings.logic.payload_schemas import check_schema


def _document(webhooks: dict[str, Any], **more: Any) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "t", "version": "1"},
        "webhooks": webhooks,
        **more,
    }


def _body(schema: Any = None, **media: Any) -> dict[str, Any]:
    content = {"schema": schema, **media} if schema is not None else media
    return {"content": {"application/json": content}}


def test_the_name_is_the_extension_field_else_the_key() -> None:
    found = read_document(
        _document(
            {
                "order.paid": {"post": {"description": "Paid"}},
                "refunds": {"post": {"x-tidings-event-type": "order.refunded", "summary": "R"}},
            }
        )
    )
    assert [(t.name, t.description) for t in found] == [
        ("order.paid", "Paid"),
        ("order.refunded", "R"),
    ]


def test_two_operations_under_one_key_need_names_of_their_own() -> None:
    with pytest.raises(InvalidInput, match="2 operations without x-tidings-event-type"):
        read_document(_document({"order": {"post": {}, "put": {}}}))
    found = read_document(
        _document({"order": {"post": {}, "put": {"x-tidings-event-type": "order.changed"}}})
    )
    assert [t.name for t in found] == ["order.changed", "order"]
    with pytest.raises(InvalidInput, match="names event type a again"):
        read_document(_document({"a": {"post": {}}, "b": {"post": {"x-tidings-event-type": "a"}}}))


def test_component_schemas_are_brought_into_defs() -> None:
    components = {
        "schemas": {
            "Order": {
                "type": "object",
                "properties": {"who": {"$ref": "#/components/schemas/Who"}},
            },
            "Who": {"type": "string"},
        }
    }
    found = read_document(
        _document(
            {
                "order.paid": {
                    "post": {"requestBody": _body({"$ref": "#/components/schemas/Order"})}
                }
            },
            components=components,
        )
    )
    assert found[0].schema == {
        "type": "object",
        "properties": {"who": {"$ref": "#/$defs/Who"}},
        "$defs": {"Who": {"type": "string"}},
    }


def test_examples_come_in_order_from_either_spelling() -> None:
    many = _body({"type": "object"}, examples={"b": {"value": {"n": 2}}, "a": {"value": {"n": 1}}})
    one = _body({"type": "object"}, example={"n": 3})
    found = read_document(
        _document({"x": {"post": {"requestBody": many}}, "y": {"post": {"requestBody": one}}})
    )
    assert [t.examples for t in found] == [[{"n": 2}, {"n": 1}], [{"n": 3}]]
    external = _body({}, examples={"a": {"externalValue": "https://x.example/a.json"}})
    with pytest.raises(InvalidInput, match="has no value"):
        read_document(_document({"x": {"post": {"requestBody": external}}}))


def test_only_openapi_3_1_is_read() -> None:
    with pytest.raises(InvalidInput, match=r"OpenAPI 3\.1"):
        read_document({"openapi": "3.0.3", "webhooks": {}})
    with pytest.raises(InvalidInput, match="inside the document"):
        read_document(
            _document({"x": {"post": {"requestBody": {"$ref": "other.json#/requestBodies/X"}}}})
        )


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
specs = st.builds(
    TypeSpec,
    name=st.from_regex(r"[a-z][a-z0-9._:~-]{0,15}", fullmatch=True),
    description=st.text(max_size=20),
    schema=st.none() | st.just({"type": "object"}) | st.just(True),
    examples=st.lists(json_values.filter(lambda v: v is not None), max_size=3),
    deprecated=st.booleans(),
    archived=st.booleans(),
    validate_payloads=st.booleans(),
)


@given(st.lists(specs, max_size=5, unique_by=lambda s: s.name))
def test_writing_then_reading_gives_back_the_same_types(types: list[TypeSpec]) -> None:
    entries = [
        {
            "name": t.name,
            "description": t.description,
            "schema": t.schema,
            "examples": t.examples,
            "deprecated": t.deprecated,
            "archived": t.archived,
            "validate_payloads": t.validate_payloads,
        }
        for t in types
    ]
    document = write_document(entries, title="t", version="1")
    assert read_document(document) == types


def test_the_operational_event_types_fit_the_catalog() -> None:
    # Their names and payload schemas can be catalogued as they are.
    for event_type in operational.EVENT_TYPES:
        assert check_name(event_type) == event_type
        check_schema(operational.payload_schema(event_type))
