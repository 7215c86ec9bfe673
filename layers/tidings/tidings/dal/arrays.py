"""Array parameters sent as one literal each, for the statements that take a batch's arrays.

psycopg2 sends a Python list as an ``ARRAY[...]`` constructor: one expression per element,
which the server parses, analyses and folds into a constant on every call, and which the client
builds element by element. A literal (``'{1,2,3}'``) is one string, which the server reads with
the array type's own input function; the statement casts the parameter (``%(ids)s::bigint[]``),
so it is read as the array it names. A begin call of a hundred rows (its four arrays) then
costs about half a millisecond less of the server's CPU and nearly a millisecond less of the
sender's (``bench/statements.py``: ``begin_call_*``).

Only elements whose text needs no quoting inside an array literal are taken (integers, booleans,
UUIDs, and None as NULL); any other element is refused with ``TypeError`` rather than quoted
here: lists of text and timestamps stay with psycopg2's own adaptation.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

ArrayElement = int | bool | uuid.UUID | None


def array_literal(values: Iterable[ArrayElement]) -> str:
    """The array literal of ``values`` (``'{1,2,NULL}'``), for a parameter the statement casts
    to its array type."""
    return "{" + ",".join(_element(value) for value in values) + "}"


def _element(value: ArrayElement) -> str:
    if value is None:
        return "NULL"
    # bool before int: a bool is an int to isinstance, and PostgreSQL reads true/false.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(
        f"array_literal takes integers, booleans, UUIDs and None, not {type(value).__name__}"
    )
