"""The catalog as an OpenAPI 3.1 document's ``webhooks``, both ways, as pure rules.

One event type per operation. Its name is the operation's ``x-tidings-event-type`` when it has
one, else the webhook's key (then its path item may hold one operation only, or two would share
a name). The type's description is the operation's ``description`` (else its ``summary``), its
``deprecated`` the operation's; the schema is the request body's ``application/json`` schema,
its examples that media type's ``examples`` (their ``value``s, in order) or its single
``example``. ``#/components/schemas/…`` references are brought into the schema's ``$defs``, so
that each stored schema stands alone; ``#/components/requestBodies/…`` and
``#/components/examples/…`` are followed. ``x-tidings-archived`` and
``x-tidings-validate-payloads`` carry the two fields OpenAPI has no word for.

An export writes each type under its name with a ``post`` operation and these fields; importing
it gives back the same catalog, and exporting that the same document.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tidings.logic.errors import InvalidInput

NAME_FIELD = "x-tidings-event-type"
ARCHIVED_FIELD = "x-tidings-archived"
VALIDATE_FIELD = "x-tidings-validate-payloads"
JSON_MEDIA = "application/json"
OPERATIONS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_SCHEMAS = "#/components/schemas/"


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """An event type as a document describes it."""

    name: str
    description: str = ""
    schema: Any = None
    examples: list[Any] = field(default_factory=list)
    deprecated: bool = False
    archived: bool = False
    validate_payloads: bool = False


def read_document(document: Any) -> list[TypeSpec]:
    """The event types of an OpenAPI 3.1 document's ``webhooks``, in the document's order."""
    if not isinstance(document, Mapping):
        raise InvalidInput("invalid_document", "the document must be a JSON object", "document")
    version = document.get("openapi")
    if not isinstance(version, str) or not version.startswith("3.1"):
        raise InvalidInput(
            "invalid_document",
            "the document must be OpenAPI 3.1 (its 'openapi' field 3.1.x): webhooks and JSON "
            "Schema 2020-12 came with it",
            "openapi",
        )
    webhooks = document.get("webhooks", {})
    if not isinstance(webhooks, Mapping):
        raise InvalidInput("invalid_document", "webhooks must be an object", "webhooks")
    found: list[TypeSpec] = []
    seen: set[str] = set()
    for key, listed in webhooks.items():
        item = _resolved(document, listed, f"webhooks.{key}")
        if not isinstance(item, Mapping):
            raise InvalidInput("invalid_document", f"webhooks.{key} must be an object", "webhooks")
        operations = [(m, item[m]) for m in OPERATIONS if m in item]
        unnamed = [m for m, op in operations if not (isinstance(op, Mapping) and NAME_FIELD in op)]
        if len(unnamed) > 1:
            raise InvalidInput(
                "invalid_document",
                f"webhooks.{key} has {len(unnamed)} operations without {NAME_FIELD}: each would "
                "be named after the key",
                f"webhooks.{key}",
            )
        for method, operation in operations:
            where = f"webhooks.{key}.{method}"
            spec = _read_operation(document, str(key), operation, where)
            if spec.name in seen:
                raise InvalidInput(
                    "invalid_document", f"{where} names event type {spec.name} again", where
                )
            seen.add(spec.name)
            found.append(spec)
    return found


def _read_operation(document: Mapping[str, Any], key: str, operation: Any, where: str) -> TypeSpec:
    if not isinstance(operation, Mapping):
        raise InvalidInput("invalid_document", f"{where} must be an object", where)
    name = operation.get(NAME_FIELD, key)
    if not isinstance(name, str):
        raise InvalidInput("invalid_document", f"{where}.{NAME_FIELD} must be a string", where)
    description = operation.get("description", operation.get("summary", ""))
    schema, examples = _request_body(document, operation.get("requestBody"), where)
    flags = {}
    for name_of, key_of in (
        ("deprecated", "deprecated"),
        ("archived", ARCHIVED_FIELD),
        ("validate_payloads", VALIDATE_FIELD),
    ):
        value = operation.get(key_of, False)
        if not isinstance(value, bool):
            raise InvalidInput("invalid_document", f"{where}.{key_of} must be a boolean", where)
        flags[name_of] = value
    if not isinstance(description, str):
        raise InvalidInput("invalid_document", f"{where}.description must be a string", where)
    return TypeSpec(name, description, schema, examples, **flags)


def _request_body(document: Mapping[str, Any], body: Any, where: str) -> tuple[Any, list[Any]]:
    if body is None:
        return None, []
    body = _resolved(document, body, f"{where}.requestBody")
    content = body.get("content", {}) if isinstance(body, Mapping) else None
    if not isinstance(content, Mapping):
        raise InvalidInput(
            "invalid_document", f"{where}.requestBody.content must be an object", where
        )
    media = content.get(JSON_MEDIA)
    if media is None:
        return None, []
    if not isinstance(media, Mapping):
        raise InvalidInput("invalid_document", f"{where}: {JSON_MEDIA} must be an object", where)
    schema = media.get("schema")
    if schema is not None:
        schema = _standalone(document, schema, where)
    examples: list[Any] = []
    if "examples" in media:
        listed = media["examples"]
        if not isinstance(listed, Mapping):
            raise InvalidInput("invalid_document", f"{where}: examples must be an object", where)
        for label, given in listed.items():
            example = _resolved(document, given, f"{where}.examples.{label}")
            if not isinstance(example, Mapping) or "value" not in example:
                raise InvalidInput(
                    "invalid_document",
                    f"{where}: example {label} has no value (external examples are not read)",
                    where,
                )
            examples.append(example["value"])
    elif "example" in media:
        examples.append(media["example"])
    return schema, examples


def _resolved(document: Mapping[str, Any], value: Any, where: str) -> Any:
    """``value``, or what its ``$ref`` into the document points at (followed again if that is a
    reference too, a few times at most)."""
    for _ in range(8):
        if not (isinstance(value, Mapping) and isinstance(value.get("$ref"), str)):
            return value
        value = _pointed(document, value["$ref"], where)
    raise InvalidInput("invalid_document", f"{where}: references lead to references", where)


def _pointed(document: Mapping[str, Any], ref: str, where: str) -> Any:
    if not ref.startswith("#/"):
        raise InvalidInput(
            "invalid_document",
            f"{where}: only references inside the document are read ({ref})",
            where,
        )
    found: Any = document
    for part in ref[2:].split("/"):
        key = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(found, Mapping) or key not in found:
            raise InvalidInput("invalid_document", f"{where}: {ref} points at nothing", where)
        found = found[key]
    return found


def _standalone(document: Mapping[str, Any], schema: Any, where: str) -> Any:
    """``schema`` with the component schemas it reaches copied into its ``$defs`` and its
    references to them rewritten, so it needs nothing else."""
    schema = copy.deepcopy(schema)
    if isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str):
        ref = schema["$ref"]
        if ref.startswith(_SCHEMAS) and len(schema) == 1:
            # A bare reference: the component itself becomes the schema.
            schema = copy.deepcopy(_pointed(document, ref, where))
    needed: dict[str, Any] = {}
    pending = [schema]
    while pending:
        for name in _component_refs(pending.pop()):
            if name not in needed:
                needed[name] = copy.deepcopy(_pointed(document, _SCHEMAS + name, where))
                pending.append(needed[name])
    if not needed:
        return schema
    if not isinstance(schema, dict):
        raise InvalidInput("invalid_document", f"{where}: the schema must be an object", where)
    defs = schema.setdefault("$defs", {})
    for name, component in needed.items():
        if name in defs:
            raise InvalidInput(
                "invalid_document",
                f"{where}: $defs already holds {name}, which the component of that name would "
                "replace",
                where,
            )
        defs[name] = component
    _rewrite_refs(schema)
    return schema


def _component_refs(schema: Any) -> Iterable[str]:
    stack = [schema]
    while stack:
        value = stack.pop()
        if isinstance(value, Mapping):
            ref = value.get("$ref")
            if isinstance(ref, str) and ref.startswith(_SCHEMAS):
                yield ref[len(_SCHEMAS) :]
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def _rewrite_refs(schema: Any) -> None:
    stack = [schema]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            ref = value.get("$ref")
            if isinstance(ref, str) and ref.startswith(_SCHEMAS):
                value["$ref"] = "#/$defs/" + ref[len(_SCHEMAS) :]
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


def write_document(
    types: Iterable[Mapping[str, Any]], *, title: str, version: str
) -> dict[str, Any]:
    """The catalog (entries as the API answers them) as an OpenAPI 3.1 document."""
    webhooks: dict[str, Any] = {}
    for entry in types:
        operation: dict[str, Any] = {"operationId": entry["name"]}
        if entry["description"]:
            operation["description"] = entry["description"]
        media: dict[str, Any] = {}
        if entry["schema"] is not None:
            media["schema"] = entry["schema"]
        if entry["examples"]:
            media["examples"] = {
                f"example-{i}": {"value": value} for i, value in enumerate(entry["examples"], 1)
            }
        if media:
            operation["requestBody"] = {"required": True, "content": {JSON_MEDIA: media}}
        operation["responses"] = {"2XX": {"description": "The receiver accepted the event"}}
        if entry["deprecated"]:
            operation["deprecated"] = True
        if entry["archived"]:
            operation[ARCHIVED_FIELD] = True
        if entry["validate_payloads"]:
            operation[VALIDATE_FIELD] = True
        webhooks[entry["name"]] = {"post": operation}
    return {
        "openapi": "3.1.0",
        "info": {"title": title, "version": version},
        "webhooks": webhooks,
    }
