"""The migration files: which run in a transaction, how the others split into statements, and
that the ones of applications keep to the rules (0050-0059, catalog-only changes on events)."""

from __future__ import annotations

from tidings.migrations import Migration, available


def test_a_migration_runs_in_a_transaction_unless_its_first_line_says_otherwise() -> None:
    assert Migration(1, "a", "CREATE TABLE t (id int);").in_transaction
    assert Migration(1, "a", "-- outside a transaction\nSELECT 1;").in_transaction
    outside = Migration(
        2,
        "b",
        "-- tidings: outside a transaction\n-- why\nSELECT 1;\n"
        "-- tidings: next statement\n\nCREATE INDEX CONCURRENTLY i ON t (id);\n",
    )
    assert not outside.in_transaction
    assert outside.statements() == [
        "-- tidings: outside a transaction\n-- why\nSELECT 1;",
        "CREATE INDEX CONCURRENTLY i ON t (id);",
    ]


def test_the_shipped_migrations() -> None:
    shipped = {m.version: m for m in available()}
    outside = [v for v, m in shipped.items() if not m.in_transaction]
    assert outside == [51]
    assert len(shipped[51].statements()) == 2
    assert "CONCURRENTLY" in shipped[51].statements()[1]
    # Adding the column changes the catalog only: a constant default, a foreign key not validated.
    events = shipped[50].sql
    assert "ALTER TABLE tidings.events ADD COLUMN app_id bigint NOT NULL DEFAULT 1;" in events
    assert "REFERENCES tidings.applications (id) NOT VALID;" in events
    assert "ALTER TABLE tidings.events VALIDATE CONSTRAINT" in shipped[52].sql
