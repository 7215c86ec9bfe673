"""docs/schema.sql is the schema the migrations leave: regenerate it when a migration changes."""

from __future__ import annotations

import re
from pathlib import Path

from tidings.dal.connection import Database
from tidings.dal.schema import dump_schema

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "schema.sql"


VIEWS_AS = re.compile(r"^-- Views as PostgreSQL (\d+) prints them\.\n", re.MULTILINE)
VIEW_QUERY = re.compile(r"^(CREATE VIEW \S+ AS\n).*?;$", re.MULTILINE | re.DOTALL)


def views_printed_by(schema: str) -> str:
    match = VIEWS_AS.search(schema)
    assert match is not None, "the schema says whose printing of views it shows"
    return match.group(1)


def without_view_queries(schema: str) -> str:
    return VIEW_QUERY.sub(r"\1...;", VIEWS_AS.sub("", schema))


def test_the_committed_schema_is_what_the_migrations_make(db: Database) -> None:
    with db.cursor() as cur:
        current = dump_schema(cur)
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    if views_printed_by(committed) != views_printed_by(current):
        # The file is made on the embedded server; a server of another major version prints
        # views' queries its own way, and every other line must still agree (views' names and
        # their columns' defaults included).
        current, committed = without_view_queries(current), without_view_queries(committed)
    assert current == committed, (
        "docs/schema.sql is not the schema the migrations make; "
        "regenerate it with `tidings schema -o docs/schema.sql`"
    )


def test_the_schema_file_leaves_out_the_daily_partitions(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT tidings.create_attempt_partitions(current_date + 30, 2)")
        cur.execute("SELECT tidings.create_day_partitions('attempt_tallies', current_date + 30, 2)")
        current = dump_schema(cur)
    assert "attempts_2" not in current
    assert "attempt_tallies_2" not in current
    assert "CREATE VIEW tidings.messages AS" in current
