"""Content filters: which of the events of its types an endpoint receives, by payload and type.

A filter is a JSON document in a MongoDB-like dialect. ``parse`` checks it (refusing what it
cannot take with the JSON pointer of the clause at fault and its operator) and ``compile_filter``
turns it, once, into the PostgreSQL ``jsonpath`` predicate that is stored beside it and that
``tidings.enqueue_batch`` evaluates over each event's payload while it fans the event out, so
events sent over SQL and over HTTP are filtered by the same expression. ``explain`` is the
reference evaluator: the same rules in Python, saying which clause failed. A property test holds
the two equal over generated filters and payloads.

The rules follow jsonpath's lax mode, which is what PostgreSQL evaluates:

- ``"a.b"`` is a dotted path into objects (``\\.``, ``\\\\`` and a leading ``\\$`` stand for a
  key's own dot, backslash and dollar sign). A step into an array looks into its elements (one
  level), so ``"items.sku"`` reaches the ``sku`` of every object in ``items``.
- A comparison holds when any value the path reaches holds it; a value that is an array is
  looked into, up to two levels (``{"tags": "x"}`` matches ``"tags": ["x"]`` and
  ``[["x"]]``). A missing path holds no comparison.
- Values compare only with values of their own JSON type: numbers as exact decimals, strings by
  Unicode code point, ``true``/``false``/``null`` by equality. A string never equals a number.
- ``$ne``, ``$nin`` and ``$not`` are the negation of what they wrap, so ``{"a": {"$ne": 1}}``
  holds where ``a`` is missing; every clause is true or false, never unknown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from operator import eq, ge, gt, le, lt
from typing import Any

from tidings.logic.errors import InvalidInput
from tidings.logic.validation import payload_json, text_problem

# The reserved top-level key that tests the event's type instead of the payload.
EVENT_TYPE_KEY = "$event_type"
MAX_FILTER_BYTES = 16 * 1024
# Conditions, each value of $in and $nin counting as one: the fan-out's cost for one event is
# about the number of comparisons times the number of values the paths reach in the payload.
# Each comparison costs PostgreSQL about 100 bytes for every value its path reaches, kept until
# the evaluation ends: 20 over an array that fills the payload limit took 0.4 s and 240 MB.
MAX_CONDITIONS = 20
MAX_DEPTH = 10
MAX_PATH_STEPS = 32
MAX_IN_VALUES = MAX_CONDITIONS

_ORDER = {"$gt": ">", "$gte": ">=", "$lt": "<", "$lte": "<="}
_OPERATIONS = {
    "==": eq,
    "<": lt,
    "<=": le,
    ">": gt,
    ">=": ge,
}
_FIELD_OPERATORS = frozenset({"$eq", "$ne", "$neq", "$in", "$nin", "$exists", "$not", *_ORDER})
_EVENT_TYPE_OPERATORS = frozenset({"$eq", "$ne", "$neq", "$in", "$nin"})
_REFUSED = {
    "$regex": (
        "$regex is not supported: PostgreSQL's regular expressions (which the fan-out runs) and "
        "Python's (which the filter test runs) differ in syntax and meaning, so one pattern could "
        "match differently in the preview and in delivery"
    ),
}
# Characters a jsonpath string may hold as they are; every other one is written as an escape,
# so no key or value can close the string or change the expression.
_PLAIN = re.compile(r"[A-Za-z0-9 _\-]")

Scalar = str | int | Decimal | bool | None


class InvalidFilter(InvalidInput):
    """A filter that cannot be taken: ``path`` is the JSON pointer inside the filter of the
    clause at fault, ``operator`` the operator there (None when the fault is not one's)."""

    def __init__(
        self, code: str, message: str, path: str, operator: str | None, field: str = "filter"
    ) -> None:
        super().__init__(code, f"{field}{path or ''}: {message}", field)
        self.path = path
        self.operator = operator


@dataclass(frozen=True, slots=True)
class Compare:
    """Some value the path reaches (the event type when ``path`` is None) compares ``op``
    (==, <, <=, >, >=) with one of ``values``."""

    where: str
    operator: str
    path: tuple[str, ...] | None
    op: str
    values: tuple[Scalar, ...]


@dataclass(frozen=True, slots=True)
class Exists:
    where: str
    operator: str
    path: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Not:
    where: str
    operator: str
    clause: Clause


@dataclass(frozen=True, slots=True)
class All:
    """Every clause holds (an empty list: the empty filter, which matches everything)."""

    where: str
    operator: str | None
    clauses: tuple[Clause, ...]


@dataclass(frozen=True, slots=True)
class Any_:
    where: str
    operator: str
    clauses: tuple[Clause, ...]


Clause = Compare | Exists | Not | All | Any_


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a filter matched; when not, the JSON pointer and operator of the clause that
    failed first (an ``$or`` fails as a whole)."""

    matches: bool
    failed_path: str | None = None
    failed_operator: str | None = None


@dataclass(frozen=True, slots=True)
class CompiledFilter:
    document: Any
    jsonpath: str


def check_filter(document: Any, field: str = "filter") -> CompiledFilter:
    """The filter checked and compiled; refused with ``InvalidFilter`` naming where."""
    clause = parse(document, field)
    return CompiledFilter(document, compile_filter(clause))


# ---- parsing -------------------------------------------------------------------------------


def _pointer(where: str, key: str | int) -> str:
    text = str(key).replace("~", "~0").replace("/", "~1")
    return f"{where}/{text}"


class _Parser:
    def __init__(self, field: str) -> None:
        self.field = field
        self.conditions = 0

    def fail(self, code: str, message: str, where: str, operator: str | None) -> InvalidFilter:
        return InvalidFilter(code, message, where, operator, self.field)

    def document(self, doc: Any, where: str, depth: int) -> Clause:
        if depth > MAX_DEPTH:
            raise self.fail("too_deep", f"filters nest at most {MAX_DEPTH} levels", where, None)
        if not isinstance(doc, Mapping):
            raise self.fail("invalid_type", "a filter must be a JSON object", where, None)
        clauses: list[Clause] = []
        for key, value in doc.items():
            at = _pointer(where, key)
            if not isinstance(key, str):
                raise self.fail("invalid_type", "keys must be strings", where, None)
            if key in ("$and", "$or"):
                clauses.append(self.logical(key, value, at, depth))
            elif key == "$not":
                clauses.append(Not(at, key, self.document(value, at, depth + 1)))
            elif key == EVENT_TYPE_KEY:
                clauses.append(self.field_condition(None, value, at, _EVENT_TYPE_OPERATORS))
            elif key.startswith("$"):
                raise self.unknown_operator(key, at)
            else:
                path = self.path(key, at)
                clauses.append(self.field_condition(path, value, at, _FIELD_OPERATORS))
        if len(clauses) == 1:
            return clauses[0]
        return All(where, None, tuple(clauses))

    def logical(self, operator: str, value: Any, where: str, depth: int) -> Clause:
        if not isinstance(value, list) or not value:
            raise self.fail(
                "invalid_value", f"{operator} takes a non-empty array of filters", where, operator
            )
        parts = tuple(
            self.document(item, _pointer(where, i), depth + 1) for i, item in enumerate(value)
        )
        return All(where, operator, parts) if operator == "$and" else Any_(where, operator, parts)

    def unknown_operator(self, key: str, where: str) -> InvalidFilter:
        if key in _REFUSED:
            return self.fail("unsupported_operator", _REFUSED[key], where, key)
        return self.fail("unknown_operator", f"{key} is not an operator here", where, key)

    def path(self, key: str, where: str) -> tuple[str, ...]:
        problem = text_problem(key)
        if problem:
            raise self.fail("invalid_path", f"the path {problem}", where, None)
        steps: list[str] = []
        current: list[str] = []
        chars = iter(key)
        for char in chars:
            if char == "\\":
                escaped = next(chars, "")
                if escaped not in (".", "\\", "$"):
                    raise self.fail(
                        "invalid_path",
                        "a backslash in a path escapes only '.', '\\' or '$'",
                        where,
                        None,
                    )
                current.append(escaped)
            elif char == ".":
                steps.append("".join(current))
                current = []
            else:
                current.append(char)
        steps.append("".join(current))
        if any(step == "" for step in steps):
            raise self.fail("invalid_path", "a path has no empty step", where, None)
        if len(steps) > MAX_PATH_STEPS:
            raise self.fail(
                "invalid_path", f"a path has at most {MAX_PATH_STEPS} steps", where, None
            )
        return tuple(steps)

    def field_condition(
        self,
        path: tuple[str, ...] | None,
        value: Any,
        where: str,
        allowed: frozenset[str],
    ) -> Clause:
        if isinstance(value, Mapping) and any(str(k).startswith("$") for k in value):
            if not all(isinstance(k, str) and k.startswith("$") for k in value):
                raise self.fail(
                    "invalid_value",
                    "an object of operators holds operators only (use a dotted path to reach "
                    "deeper fields)",
                    where,
                    None,
                )
            parts = [
                self.operator(path, op, v, _pointer(where, op), allowed) for op, v in value.items()
            ]
            return parts[0] if len(parts) == 1 else All(where, None, tuple(parts))
        return self.operator(path, "$eq", value, where, allowed)

    def operator(
        self,
        path: tuple[str, ...] | None,
        op: str,
        value: Any,
        where: str,
        allowed: frozenset[str],
    ) -> Clause:
        if op not in allowed:
            if op in _FIELD_OPERATORS:
                raise self.fail(
                    "invalid_operator",
                    f"{op} cannot test the event type (it takes {', '.join(sorted(allowed))})",
                    where,
                    op,
                )
            raise self.unknown_operator(op, where)
        self.count(where, op)
        strings_only = path is None
        if op == "$eq":
            return Compare(where, op, path, "==", (self.scalar(value, where, op, strings_only),))
        if op in ("$ne", "$neq"):
            inner = Compare(where, op, path, "==", (self.scalar(value, where, op, strings_only),))
            return Not(where, op, inner)
        if op in ("$in", "$nin"):
            if not isinstance(value, list) or not 1 <= len(value) <= MAX_IN_VALUES:
                raise self.fail(
                    "invalid_value",
                    f"{op} takes an array of 1 to {MAX_IN_VALUES} values",
                    where,
                    op,
                )
            # Each value is a comparison the fan-out makes with every value the path reaches,
            # so each counts as a condition (the first one was counted above).
            self.count(where, op, len(value) - 1)
            values = tuple(self.scalar(v, where, op, strings_only) for v in value)
            compare = Compare(where, op, path, "==", values)
            return compare if op == "$in" else Not(where, op, compare)
        if op in _ORDER:
            if isinstance(value, bool) or not isinstance(value, str | int | float | Decimal):
                raise self.fail(
                    "invalid_value", f"{op} compares with a number or a string", where, op
                )
            return Compare(where, op, path, _ORDER[op], (self.scalar(value, where, op, False),))
        if op == "$exists":
            if not isinstance(value, bool) or path is None:
                raise self.fail("invalid_value", "$exists takes true or false", where, op)
            exists = Exists(where, op, path)
            return exists if value else Not(where, op, exists)
        # $not on a field: the negation of its operators.
        if not isinstance(value, Mapping) or not value:
            raise self.fail(
                "invalid_value", "$not on a field takes an object of operators", where, op
            )
        return Not(where, op, self.field_condition(path, value, where, allowed))

    def count(self, where: str, op: str, conditions: int = 1) -> None:
        self.conditions += conditions
        if self.conditions > MAX_CONDITIONS:
            raise self.fail(
                "too_many_conditions",
                f"a filter holds at most {MAX_CONDITIONS} conditions (each value of $in or "
                "$nin is one)",
                where,
                op,
            )

    def scalar(self, value: Any, where: str, op: str, strings_only: bool) -> Scalar:
        if strings_only and not isinstance(value, str):
            raise self.fail("invalid_value", "the event type is compared with strings", where, op)
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                raise self.fail("invalid_value", f"a string that {problem}", where, op)
            return value
        if value is None or isinstance(value, bool | int):
            return value
        if isinstance(value, float | Decimal):
            number = _number(value)
            if not number.is_finite():
                raise self.fail("invalid_value", "numbers must be finite", where, op)
            return number
        kind = "an array" if isinstance(value, list) else "an object"
        raise self.fail(
            "invalid_value",
            f"{op} compares with a string, number, true, false or null, not {kind}"
            + (" (use $in for a list of values)" if isinstance(value, list) else ""),
            where,
            op,
        )


def parse(document: Any, field: str = "filter") -> Clause:
    """The filter's clauses; refused with ``InvalidFilter`` naming the clause at fault."""
    try:
        size = len(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())
    except (TypeError, ValueError):
        raise InvalidFilter("invalid_type", "a filter must be JSON", "", None, field) from None
    if size > MAX_FILTER_BYTES:
        raise InvalidFilter(
            "invalid_value", f"a filter is at most {MAX_FILTER_BYTES} bytes", "", None, field
        )
    return _Parser(field).document(document, "", 1)


# ---- compiling to jsonpath -----------------------------------------------------------------


def _quoted(text: str) -> str:
    out = ['"']
    for char in text:
        if _PLAIN.fullmatch(char):
            out.append(char)
        elif ord(char) <= 0xFFFF:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(f"\\u{{{ord(char):x}}}")
    out.append('"')
    return "".join(out)


def _literal(value: Scalar) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _quoted(value)
    if isinstance(value, int):
        return str(value)
    # A decimal in plain or exponent notation, both of which jsonpath reads exactly.
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    text = "".join(map(str, digits)) + (f"e{exponent}" if exponent else "")
    return ("-" if sign else "") + text


def _path(steps: tuple[str, ...] | None) -> str:
    if steps is None:
        return '$"event_type"'
    return "$" + "".join("." + _quoted(step) for step in steps)


def compile_filter(clause: Clause) -> str:
    """The jsonpath predicate, for ``jsonb_path_match(payload, it, {"event_type": …})``.

    Every clause compiles to an ``exists(…)`` or a combination of them, which is never unknown:
    a comparison of values of different types drops that value instead of making the whole
    predicate unknown, and ``!`` then means "not", as in the reference evaluator."""
    if isinstance(clause, Compare):
        test = " || ".join(f"@ {clause.op} {_literal(v)}" for v in clause.values)
        return f"exists({_path(clause.path)} ? ({test}))"
    if isinstance(clause, Exists):
        return f"exists({_path(clause.path)})"
    if isinstance(clause, Not):
        return f"!({compile_filter(clause.clause)})"
    if isinstance(clause, All):
        if not clause.clauses:
            return "exists($)"
        return "(" + " && ".join(compile_filter(c) for c in clause.clauses) + ")"
    return "(" + " || ".join(compile_filter(c) for c in clause.clauses) + ")"


# ---- the reference evaluator ---------------------------------------------------------------


def _number(value: float | Decimal) -> Decimal:
    # A float stands for the decimal its JSON text spells (what PostgreSQL stores), not for its
    # binary value.
    return value if isinstance(value, Decimal) else Decimal(repr(value))


def _unwrapped(value: Any) -> Iterator[Any]:
    if isinstance(value, list):
        yield from value
    else:
        yield value


def _reached(payload: Any, steps: tuple[str, ...]) -> list[Any]:
    items = [payload]
    for step in steps:
        following: list[Any] = []
        for item in items:
            for inner in _unwrapped(item):
                if isinstance(inner, Mapping) and step in inner:
                    following.append(inner[step])
        items = following
    return items


def _holds(value: Any, op: str, literal: Scalar) -> bool:
    if isinstance(literal, bool) or literal is None:
        # Only equality is compiled for these; null equals null, a boolean its own value.
        if literal is None:
            return value is None
        return isinstance(value, bool) and value == literal
    if isinstance(literal, str):
        if not isinstance(value, str):
            return False
        left: Any = value
        right: Any = literal
    else:
        if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
            return False
        left = value if isinstance(value, int) else _number(value)
        right = literal
    return bool(_OPERATIONS[op](left, right))


def _compare(clause: Compare, payload: Any, event_type: str) -> bool:
    reached = [event_type] if clause.path is None else _reached(payload, clause.path)
    return any(
        _holds(value, clause.op, literal)
        for item in reached
        for element in _unwrapped(item)
        for value in _unwrapped(element)
        for literal in clause.values
    )


def _verdict(clause: Clause, payload: Any, event_type: str) -> Verdict:
    if isinstance(clause, Compare):
        matched = _compare(clause, payload, event_type)
    elif isinstance(clause, Exists):
        matched = bool(_reached(payload, clause.path))
    elif isinstance(clause, Not):
        matched = not _verdict(clause.clause, payload, event_type).matches
    elif isinstance(clause, All):
        for part in clause.clauses:
            verdict = _verdict(part, payload, event_type)
            if not verdict.matches:
                return verdict
        return Verdict(True)
    else:
        matched = any(_verdict(c, payload, event_type).matches for c in clause.clauses)
    if matched:
        return Verdict(True)
    return Verdict(False, clause.where or "", clause.operator)


def explain(clause: Clause, payload: Any, event_type: str) -> Verdict:
    """Whether the filter matches an event with this payload (JSON values; numbers as ``int``,
    ``float`` or ``Decimal``) and type, and which clause failed first when it does not."""
    return _verdict(clause, payload, event_type)


def matches(clause: Clause, payload: Any, event_type: str) -> bool:
    return _verdict(clause, payload, event_type).matches


def filter_from_json(text: str, field: str = "filter") -> Any:
    """A filter document from JSON text (the CLI's ``--filter``), read as the API reads it."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise InvalidInput("invalid_json", f"{field} is not valid JSON", field) from None


@dataclass(frozen=True, slots=True)
class FilterTrial:
    """What ``try_filter`` found: the verdict and the jsonpath the filter compiles to."""

    verdict: Verdict
    jsonpath: str


def try_filter(
    document: Any, payload: Any, event_type: str, *, max_payload_bytes: int
) -> FilterTrial:
    """Whether ``document`` matches an event of this payload and type, as the fan-out would
    decide; the filter is checked as on write (``InvalidFilter`` when it is refused), the payload
    as an event's (``PayloadTooLarge`` over ``max_payload_bytes``: no event could carry it, and
    the evaluator's time grows with the payload)."""
    clause = parse(document)
    payload_json(payload, "payload", max_bytes=max_payload_bytes)
    return FilterTrial(explain(clause, payload, event_type), compile_filter(clause))
