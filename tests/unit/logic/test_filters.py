"""The content-filter dialect: what is refused (naming the clause and operator), what it compiles
to, and the reference evaluator's verdicts with the clause that failed."""

from __future__ import annotations

from typing import Any

import pytest

from tidings.logic import filters
from tidings.logic.channels import check_channels
from tidings.logic.errors import InvalidInput, PayloadTooLarge


@pytest.mark.parametrize(
    ("document", "code", "path", "operator"),
    [
        ([], "invalid_type", "", None),
        ({"a": {"$regex": "^x"}}, "unsupported_operator", "/a/$regex", "$regex"),
        ({"$nor": [{"a": 1}]}, "unknown_operator", "/$nor", "$nor"),
        ({"a": {"$gt": 1, "b": 2}}, "invalid_value", "/a", None),
        ({"a": {"b": 1}}, "invalid_value", "/a", "$eq"),
        ({"a": [1, 2]}, "invalid_value", "/a", "$eq"),
        ({"$and": []}, "invalid_value", "/$and", "$and"),
        ({"$or": [{"a": 1}, {"b": {"$in": []}}]}, "invalid_value", "/$or/1/b/$in", "$in"),
        ({"a": {"$gt": True}}, "invalid_value", "/a/$gt", "$gt"),
        ({"a": {"$gte": None}}, "invalid_value", "/a/$gte", "$gte"),
        ({"a": {"$exists": 1}}, "invalid_value", "/a/$exists", "$exists"),
        ({"a": {"$not": 1}}, "invalid_value", "/a/$not", "$not"),
        ({"a..b": 1}, "invalid_path", "/a..b", None),
        ({"a\\q": 1}, "invalid_path", "/a\\q", None),
        ({"a/b~": {"$eq": {"x": 1}}}, "invalid_value", "/a~1b~0/$eq", "$eq"),
        ({"a": float("nan")}, "invalid_value", "/a", "$eq"),
        ({"a": "nul\x00"}, "invalid_value", "/a", "$eq"),
        ({"$event_type": {"$gt": "a"}}, "invalid_operator", "/$event_type/$gt", "$gt"),
        ({"$event_type": 5}, "invalid_value", "/$event_type", "$eq"),
        ({"$event_type": {"$exists": True}}, "invalid_operator", "/$event_type/$exists", "$exists"),
    ],
)
def test_a_bad_filter_is_refused_naming_the_clause_and_operator(
    document: Any, code: str, path: str, operator: str | None
) -> None:
    with pytest.raises(filters.InvalidFilter) as refused:
        filters.parse(document)
    assert (refused.value.code, refused.value.path, refused.value.operator) == (
        code,
        path,
        operator,
    )
    assert refused.value.field == "filter"
    assert refused.value.message.startswith(f"filter{path}: ")


def test_regex_is_refused_with_the_reason() -> None:
    with pytest.raises(filters.InvalidFilter, match="PostgreSQL's regular expressions"):
        filters.parse({"a": {"$regex": "x"}})


def test_filters_have_limits() -> None:
    too_deep: dict[str, Any] = {"a": 1}
    for _ in range(filters.MAX_DEPTH):
        too_deep = {"$not": too_deep}
    with pytest.raises(filters.InvalidFilter) as deep:
        filters.parse(too_deep)
    assert deep.value.code == "too_deep"
    many = {"$and": [{f"k{i}": i} for i in range(filters.MAX_CONDITIONS + 1)]}
    with pytest.raises(filters.InvalidFilter) as counted:
        filters.parse(many)
    assert counted.value.code == "too_many_conditions"
    with pytest.raises(filters.InvalidFilter, match="bytes"):
        filters.parse({"a": "x" * filters.MAX_FILTER_BYTES})


def test_each_value_of_in_and_nin_counts_as_a_condition() -> None:
    # Every value is compared with every value the path reaches in each event's payload: a
    # filter of many long $in lists made the fan-out compare thousands of times per element.
    half = filters.MAX_CONDITIONS // 2
    filters.parse({"a": {"$in": list(range(half))}, "b": {"$nin": list(range(half))}})
    many = {"$or": [{"a": {"$in": list(range(half))}} for _ in range(3)]}
    with pytest.raises(filters.InvalidFilter) as counted:
        filters.parse(many)
    assert counted.value.code == "too_many_conditions"
    assert counted.value.path == "/$or/2/a/$in"


@pytest.mark.parametrize(
    ("document", "jsonpath"),
    [
        ({}, "exists($)"),
        ({"a": 1}, 'exists($."a" ? (@ == 1))'),
        ({"a.b": {"$gte": 2.5}}, 'exists($."a"."b" ? (@ >= 25e-1))'),
        ({"a": {"$ne": "x"}}, '!(exists($."a" ? (@ == "x")))'),
        ({"a": {"$in": [1, None, True]}}, 'exists($."a" ? (@ == 1 || @ == null || @ == true))'),
        ({"a": {"$exists": False}}, '!(exists($."a"))'),
        ({"$event_type": "t.x"}, 'exists($"event_type" ? (@ == "t\\u002ex"))'),
        ({"a\\.b": 1}, 'exists($."a\\u002eb" ? (@ == 1))'),
        ({"\\$k": 1}, 'exists($."\\u0024k" ? (@ == 1))'),
        ({'q"': "\\"}, 'exists($."q\\u0022" ? (@ == "\\u005c"))'),
        ({"😀": "é"}, 'exists($."\\u{1f600}" ? (@ == "\\u00e9"))'),
        (
            {"$or": [{"a": 1}, {"$not": {"b": 2}}], "c": 3},
            '((exists($."a" ? (@ == 1)) || !(exists($."b" ? (@ == 2)))) && '
            'exists($."c" ? (@ == 3)))',
        ),
    ],
)
def test_what_a_filter_compiles_to(document: Any, jsonpath: str) -> None:
    assert filters.compile_filter(filters.parse(document)) == jsonpath


def test_the_verdict_names_the_first_clause_that_failed() -> None:
    clause = filters.parse(
        {"$event_type": "order.paid", "total": {"$gte": 100}, "$or": [{"a": 1}, {"b": 1}]}
    )
    assert filters.explain(clause, {"total": 150, "b": 1}, "order.paid") == filters.Verdict(True)
    assert filters.explain(clause, {"total": 150}, "order.refunded") == filters.Verdict(
        False, "/$event_type", "$eq"
    )
    assert filters.explain(clause, {"total": 50}, "order.paid") == filters.Verdict(
        False, "/total/$gte", "$gte"
    )
    assert filters.explain(clause, {"total": 100}, "order.paid") == filters.Verdict(
        False, "/$or", "$or"
    )


@pytest.mark.parametrize(
    ("document", "payload", "matches"),
    [
        ({"tags": "x"}, {"tags": ["y", "x"]}, True),
        ({"tags": "x"}, {"tags": [["x"]]}, True),
        ({"tags": "x"}, {"tags": [[["x"]]]}, False),
        ({"items.sku": "A"}, {"items": [{"sku": "B"}, {"sku": "A"}]}, True),
        ({"n": 1}, {"n": 1.0}, True),
        ({"n": 1}, {"n": "1"}, False),
        ({"n": 1}, {"n": True}, False),
        ({"n": {"$ne": 1}}, {}, True),
        ({"n": {"$ne": 1}}, {"n": [1, 2]}, False),
        ({"n": {"$nin": [1, 2]}}, {"n": 3}, True),
        ({"n": None}, {}, False),
        ({"n": {"$exists": True}}, {"n": None}, True),
        ({"s": {"$gt": "z"}}, {"s": "é"}, True),
        ({"s": {"$lt": "a"}}, {"s": "Z"}, True),
        ({"n": {"$gt": 0.1}}, {"n": 0.1}, False),
        ({"n": {"$lt": 10**20}}, {"n": 10**20 - 1}, True),
        ({"a\\.b": 1}, {"a.b": 1, "a": {"b": 2}}, True),
    ],
)
def test_the_reference_rules(document: Any, payload: Any, matches: bool) -> None:
    assert filters.matches(filters.parse(document), payload, "t") is matches


def test_trying_a_filter_gives_the_verdict_and_the_compiled_predicate() -> None:
    trial = filters.try_filter({"a": {"$lt": 3}}, {"a": 5}, "t", max_payload_bytes=100)
    assert trial.verdict == filters.Verdict(False, "/a/$lt", "$lt")
    assert trial.jsonpath == 'exists($."a" ? (@ < 3))'
    with pytest.raises(PayloadTooLarge):
        filters.try_filter({"a": 1}, {"a": "x" * 100}, "t", max_payload_bytes=100)


@pytest.mark.parametrize(
    "bad", ["eu", ["-eu"], [""], ["a b"], ["é"], [1], ["x" * 201], [f"c{i}" for i in range(11)]]
)
def test_bad_channels_are_refused_naming_the_field(bad: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_channels(bad, "events[3].channels")
    assert refused.value.field == "events[3].channels"


def test_channels_take_the_application_uid_syntax() -> None:
    assert check_channels(["acme", "A.b_c:d-1", "x" * 200], "channels") == [
        "acme",
        "A.b_c:d-1",
        "x" * 200,
    ]
    assert check_channels([], "channels") is None
    assert check_channels(None, "channels") is None
