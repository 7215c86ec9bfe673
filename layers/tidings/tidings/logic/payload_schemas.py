"""JSON Schema (draft 2020-12) for event payloads, as pure rules: checking a schema against the
meta-schema, compiling it, finding the first failure of a payload, and a cache of compiled
validators keyed by the schema's digest.

The ``jsonschema`` library does the work. Three choices make a schema mean the same on every
instance and never reach out of the process:
- references resolve within the schema itself (``#/$defs/…``) only; any other (``https://…``,
  another file) is never fetched, and a payload that reaches one is refused, naming ``$ref``;
- references that lead back to where they started without looking into the payload (``{"$ref":
  "#"}``) would never end: a schema where every payload meets such a loop is refused on write,
  and a payload that reaches one further in (or that is nested deeper than its schema can be
  followed) is refused, naming ``$ref``, instead of failing the request;
- ``format`` is an annotation, as the draft's default vocabulary says: whether a library checks
  ``email`` or ``date-time`` depends on optional packages, so none is checked;
- the failure reported is the one ``jsonschema.exceptions.best_match`` ranks first (the deepest,
  most specific one), with its place in the payload as a JSON pointer and the keyword that
  failed.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError, best_match
from referencing import Registry
from referencing.exceptions import Unresolvable

from tidings.logic.errors import InvalidInput

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
# What a failure's message may hold of the payload: a value is quoted in it.
MAX_MESSAGE = 300
# Compiled validators an instance keeps (the least recently used goes first).
CACHE_SIZE = 512


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a payload does not match: where (a JSON pointer into the payload; "" is the whole
    payload), the keyword that failed, and a message for people."""

    pointer: str
    keyword: str
    message: str


def json_pointer(path: Any) -> str:
    """The RFC 6901 pointer of a path of keys and indexes."""
    return "".join("/" + str(part).replace("~", "~0").replace("/", "~1") for part in path)


def canonical_json(value: Any) -> str:
    """The JSON text two equal values share: keys sorted, no insignificant whitespace."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schema_digest(schema: Any) -> str:
    """The SHA-256 (hex) of the schema's canonical text: the key of its compiled validator."""
    return hashlib.sha256(canonical_json(schema).encode("utf-8")).hexdigest()


def check_schema(schema: Any, field: str = "schema") -> None:
    """Refuse (422) a value that is not a draft 2020-12 JSON Schema, naming where it breaks the
    meta-schema and the keyword it breaks."""
    if not isinstance(schema, dict | bool):
        raise InvalidInput("invalid_schema", f"{field} must be a JSON object (or a boolean)", field)
    declared = schema.get("$schema") if isinstance(schema, dict) else None
    if declared is not None and declared not in (DRAFT_2020_12, DRAFT_2020_12 + "#"):
        raise InvalidInput(
            "invalid_schema",
            f"{field} declares $schema {str(declared)[:100]!r}: only draft 2020-12 "
            f"({DRAFT_2020_12}) is supported",
            field,
        )
    try:
        Draft202012Validator.check_schema(schema)
    except RecursionError:
        raise InvalidInput(
            "invalid_schema",
            f"{field} is nested too deeply to be checked against the meta-schema",
            field,
        ) from None
    except SchemaError as exc:
        where = json_pointer(exc.absolute_path) or "/"
        raise InvalidInput(
            "invalid_schema",
            f"{field} is not a valid JSON Schema (draft 2020-12): at {where}, keyword "
            f"{exc.validator}: {_short(exc.message)}",
            field,
        ) from None
    validator = compile_schema(schema)
    for probe in _PROBES:
        failure = first_failure(validator, probe)
        if failure is not None and failure.message == _ENDLESS:
            raise InvalidInput(
                "invalid_schema",
                f"{field} is not a usable JSON Schema: its references ($ref) loop back to "
                "themselves without looking into the payload, so no payload could be checked",
                field,
            )


# One value of each JSON type: a reference loop met whatever the payload is met by one of them.
_PROBES: tuple[Any, ...] = (None, True, 0, "", [], {})
_ENDLESS = (
    "the schema's references ($ref) lead back to themselves, or the payload is nested deeper "
    "than the schema can be followed"
)


def compile_schema(schema: Any) -> Draft202012Validator:
    """A validator of ``schema`` (already checked), resolving nothing outside it."""
    # An empty registry that retrieves nothing: without it, the library would fetch remote
    # references over the network.
    return Draft202012Validator(schema, registry=Registry())


def first_failure(validator: Draft202012Validator, payload: Any) -> Failure | None:
    """Why ``payload`` does not match, or None when it does."""
    try:
        error: ValidationError | None = best_match(validator.iter_errors(payload))
    except Unresolvable as exc:
        return Failure("", "$ref", _short(f"the schema refers to what cannot be resolved: {exc}"))
    except RecursionError:
        return Failure("", "$ref", _ENDLESS)
    if error is None:
        return None
    return Failure(json_pointer(error.absolute_path), str(error.validator), _short(error.message))


def _short(text: str) -> str:
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


class ValidatorCache:
    """Compiled validators by schema digest, at most ``size`` of them. A digest names one schema
    for ever, so an entry is never stale: a changed schema has another digest. Safe to share
    between threads (the local API server answers on several)."""

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self._size = size
        self._found: OrderedDict[str, Draft202012Validator] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, digest: str, load: Callable[[], Any]) -> Draft202012Validator:
        """The validator of the schema of ``digest``, compiled from ``load()`` on a miss."""
        with self._lock:
            found = self._found.get(digest)
            if found is not None:
                self._found.move_to_end(digest)
                return found
        # Compiled outside the lock; two threads missing at once both compile, and keep one.
        compiled = compile_schema(load())
        with self._lock:
            self._found[digest] = compiled
            if len(self._found) > self._size:
                self._found.popitem(last=False)
        return compiled

    def __len__(self) -> int:
        return len(self._found)
