"""The operational events' payload schemas: one per event type, each a valid JSON Schema, and the
README's sample of each valid against it; a field outside the schema (a secret, a payload) is
refused."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from tidings.logic.operational import EVENT_TYPES, payload_schema

README = Path(__file__).resolve().parents[3] / "README.md"
SAMPLE = re.compile(r"^#### `([a-z.]+)`\n```json\n(.*?)\n```$", re.MULTILINE | re.DOTALL)


def readme_samples() -> dict[str, dict[str, Any]]:
    text = README.read_text(encoding="utf-8")
    start = text.index("## Operational events")
    section = text[start : text.index("\n## ", start + 1)]
    return {name: json.loads(body) for name, body in SAMPLE.findall(section)}


def validator(event_type: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(
        payload_schema(event_type), format_checker=jsonschema.FormatChecker()
    )


def test_every_event_type_has_a_schema_file_and_no_file_is_left_over() -> None:
    folder = resources.files("tidings.logic").joinpath("operational_events")
    files = {entry.name for entry in folder.iterdir() if entry.name.endswith(".json")}
    assert files == {f"{name}.json" for name in EVENT_TYPES}


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_each_schema_is_a_json_schema_titled_by_its_type(event_type: str) -> None:
    schema = payload_schema(event_type)
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["title"] == event_type
    assert {"application_id", "application_uid", "endpoint_id", "endpoint_url"} <= set(
        schema["required"]
    )


def test_the_readme_has_a_sample_of_every_event_type() -> None:
    assert sorted(readme_samples()) == sorted(EVENT_TYPES)


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_the_readmes_sample_is_valid_against_its_schema(event_type: str) -> None:
    validator(event_type).validate(readme_samples()[event_type])


@pytest.mark.parametrize("event_type", EVENT_TYPES)
def test_a_field_outside_the_schema_is_refused(event_type: str) -> None:
    sample = {**readme_samples()[event_type], "secret": "whsec_x"}
    with pytest.raises(jsonschema.ValidationError):
        validator(event_type).validate(sample)


def test_a_disabling_reason_outside_the_three_is_refused() -> None:
    sample = {**readme_samples()["endpoint.disabled"], "reason": "bored"}
    with pytest.raises(jsonschema.ValidationError):
        validator("endpoint.disabled").validate(sample)


def test_an_unknown_event_type_has_no_schema() -> None:
    with pytest.raises(KeyError):
        payload_schema("endpoint.renamed")
