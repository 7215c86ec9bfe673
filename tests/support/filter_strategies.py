"""Hypothesis strategies for content filters and the payloads they are tried on.

Keys and values come from small pools, so that generated filters often reach and match
generated payloads; the pools hold keys that a careless jsonpath quoting would break (quotes,
dots, backslashes, a leading dollar sign, non-ASCII and astral characters) and values of every
JSON type, so comparisons across types are tried too."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from tidings.logic.filters import InvalidFilter, parse

HOSTILE_KEYS = [
    'say "hi"',
    "a.b",
    "back\\slash",
    "$dollar",
    "é",
    "😀",
    "' || true || '",
    ") || exists($) || (",
    "\n",
    "",
]
KEYS = ["a", "b", "c", *HOSTILE_KEYS]
STRINGS = ["", "a", "b", "B", "é", "z", "😀", "10", 'q"', "\\"]
EVENT_TYPES = ["order.paid", "order.refunded"]

numbers = st.one_of(
    st.integers(min_value=-3, max_value=3),
    st.sampled_from([10, 10**20, -(10**20), 0.5, -0.5, 1.0, 2.5, 1e-7, 1e300, 0.1]),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
strings = st.one_of(
    st.sampled_from(STRINGS),
    st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), max_size=4),
)
# A few common values (so that filters and payloads meet), then anything.
COMMON = [0, 1, 2, 1.5, "a", "b", True, False, None]
scalars = st.one_of(
    st.sampled_from(COMMON), st.sampled_from(COMMON), numbers, strings, st.booleans(), st.none()
)

# Half the keys drawn are "a" or "b", so that paths often reach something.
keys = st.one_of(st.sampled_from(["a", "b"]), st.sampled_from(KEYS))


def _wrapped(value: Any, depth: int) -> Any:
    for _ in range(depth):
        value = [value]
    return value


# A scalar inside 0 to 3 arrays: how deep comparisons look into arrays must agree.
nested_scalars = st.builds(_wrapped, scalars, st.integers(min_value=0, max_value=3))

payloads: st.SearchStrategy[Any] = st.recursive(
    st.one_of(scalars, nested_scalars),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(keys, inner, max_size=4),
    ),
    max_leaves=12,
)
# Most payloads are objects, as events' are.
object_payloads = st.dictionaries(keys, payloads, max_size=5)


def escaped(key: str) -> str:
    """``key`` as one step of a dotted path."""
    text = key.replace("\\", "\\\\").replace(".", "\\.")
    return "\\" + text if text.startswith("$") else text


paths = st.lists(keys.filter(bool), min_size=1, max_size=3).map(
    lambda steps: ".".join(escaped(s) for s in steps)
)
ordered = st.one_of(numbers, strings)


@st.composite
def conditions(draw: st.DrawFn) -> Any:
    """The right-hand side of a field: a plain value or an object of operators."""
    kind = draw(st.sampled_from(["plain", "ops", "not"]))
    if kind == "plain":
        return draw(scalars)
    ops: dict[str, Any] = {}
    for op in draw(
        st.lists(
            st.sampled_from(
                ["$eq", "$ne", "$neq", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists"]
            ),
            min_size=1,
            max_size=2,
            unique=True,
        )
    ):
        if op in ("$gt", "$gte", "$lt", "$lte"):
            ops[op] = draw(ordered)
        elif op in ("$in", "$nin"):
            ops[op] = draw(st.lists(scalars, min_size=1, max_size=3))
        elif op == "$exists":
            ops[op] = draw(st.booleans())
        else:
            ops[op] = draw(scalars)
    return {"$not": ops} if kind == "not" else ops


event_type_conditions = st.one_of(
    st.sampled_from(EVENT_TYPES),
    st.builds(lambda v: {"$ne": v}, st.sampled_from(EVENT_TYPES)),
    st.builds(lambda v: {"$in": v}, st.lists(st.sampled_from(EVENT_TYPES), min_size=1, max_size=4)),
    st.builds(
        lambda v: {"$nin": v}, st.lists(st.sampled_from(EVENT_TYPES), min_size=1, max_size=4)
    ),
)

leaves = st.one_of(
    st.dictionaries(paths, conditions(), min_size=1, max_size=2),
    st.builds(lambda c: {"$event_type": c}, event_type_conditions),
)


def _within_the_limits(document: Any) -> bool:
    """Whether a filter keeps to the limits on its size (its count of comparisons above all),
    which a few large draws pass."""
    try:
        parse(document)
    except InvalidFilter:
        return False
    return True


filters: st.SearchStrategy[Any] = st.recursive(
    leaves,
    lambda inner: st.one_of(
        st.builds(lambda fs: {"$and": fs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda fs: {"$or": fs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda f: {"$not": f}, inner),
    ),
    max_leaves=6,
).filter(_within_the_limits)
