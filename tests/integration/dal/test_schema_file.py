"""docs/schema.sql is the schema the migrations leave: regenerate it when a migration changes."""

from __future__ import annotations

from pathlib import Path

from tidings.dal.connection import Database
from tidings.dal.schema import dump_schema

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "schema.sql"


def test_the_committed_schema_is_what_the_migrations_make(db: Database) -> None:
    with db.cursor() as cur:
        current = dump_schema(cur)
    committed = SCHEMA_FILE.read_text(encoding="utf-8")
    assert current == committed, (
        "docs/schema.sql is not the schema the migrations make; "
        "regenerate it with `tidings schema -o docs/schema.sql`"
    )


def test_the_schema_file_leaves_out_the_daily_partitions(db: Database) -> None:
    with db.cursor() as cur:
        cur.execute("SELECT tidings.create_attempt_partitions(current_date + 30, 2)")
        current = dump_schema(cur)
    assert "attempts_2" not in current.replace("attempts_default", "")
