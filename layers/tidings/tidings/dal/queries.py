"""Named SQL queries, loaded from the ``queries/*.sql`` files beside this module.

Each query in a file starts with ``-- name: <name>``, followed by one or more comment lines that
say what it is for, then the statement. Parameters use psycopg2's ``%(name)s`` style. Python code
never assembles SQL: it looks a query up by name and passes parameters.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    description: str
    sql: str


def parse(text: str, source: str) -> dict[str, Query]:
    """The queries of one file's text; ``source`` names the file in errors."""
    queries: dict[str, Query] = {}
    headers = list(_HEADER.finditer(text))
    if text[: headers[0].start() if headers else len(text)].strip():
        raise ValueError(f"{source}: text before the first '-- name:' header")
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = text[header.end() : end].strip()
        lines = body.splitlines()
        description = []
        while lines and lines[0].startswith("--"):
            description.append(lines.pop(0).removeprefix("--").strip())
        sql = "\n".join(lines).strip().rstrip(";")
        name = header[1]
        if not description:
            raise ValueError(f"{source}: query {name} has no description line")
        if not sql:
            raise ValueError(f"{source}: query {name} has no statement")
        if name in queries:
            raise ValueError(f"{source}: query {name} is defined twice")
        queries[name] = Query(name, " ".join(description), sql)
    return queries


@functools.cache
def all_queries() -> dict[str, Query]:
    """Every named query of the package; a name may be defined in one file only."""
    found: dict[str, Query] = {}
    folder = resources.files(__package__).joinpath("queries")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, query in parse(entry.read_text(encoding="utf-8"), entry.name).items():
            if name in found:
                raise ValueError(f"query {name} is defined in more than one file")
            found[name] = query
    return found


def sql(name: str) -> str:
    """The statement of the named query."""
    try:
        return all_queries()[name].sql
    except KeyError:
        raise KeyError(f"no query named {name!r}") from None
