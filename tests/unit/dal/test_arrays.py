"""Array parameters as literals: what the server reads is the list that was given."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tidings.dal.arrays import array_literal


def test_elements_are_written_as_postgresql_reads_them() -> None:
    token = uuid.UUID("12345678-1234-5678-1234-567812345678")
    assert array_literal([1, -2, 2**63 - 1]) == "{1,-2,9223372036854775807}"
    assert array_literal([True, False]) == "{true,false}"
    assert array_literal([token, None]) == "{12345678-1234-5678-1234-567812345678,NULL}"
    assert array_literal([]) == "{}"


def test_a_generator_is_taken_as_its_elements() -> None:
    assert array_literal(n * 2 for n in range(3)) == "{0,2,4}"


@pytest.mark.parametrize(
    "element", ["a", "1}", 1.5, b"1", ("1",)], ids=["text", "brace", "float", "bytes", "tuple"]
)
def test_an_element_that_would_need_quoting_is_refused(element: object) -> None:
    with pytest.raises(TypeError, match=type(element).__name__):
        array_literal([1, element])  # type: ignore[list-item]


@given(st.lists(st.one_of(st.integers(), st.booleans(), st.uuids(), st.none())))
def test_the_literal_splits_back_into_the_elements(values: list[object]) -> None:
    inner = array_literal(values)[1:-1]  # type: ignore[arg-type]
    parts = inner.split(",") if inner else []
    assert len(parts) == len(values)
    for part, value in zip(parts, values, strict=True):
        if value is None:
            assert part == "NULL"
        elif isinstance(value, bool):
            assert part == str(value).lower()
        else:
            assert part == str(value)
