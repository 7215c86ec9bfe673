"""Reading migration files: which run outside a transaction, and their statements."""

from __future__ import annotations

import pytest

from tidings.migrations import LockPolicy, Migration, MigrationError, available


def test_a_file_runs_in_a_transaction_unless_it_says_otherwise() -> None:
    assert Migration(1, "a", "CREATE TABLE t (i int);").transactional
    # The marker must be a line of its own, not text inside a statement or comment.
    assert Migration(1, "a", "-- not tidings:no-transaction here\nSELECT 1;").transactional
    assert not Migration(1, "a", "-- tidings:no-transaction\nSELECT 1;").transactional


def test_statements_outside_a_transaction_are_split_at_line_ends() -> None:
    migration = Migration(
        1,
        "a",
        "-- tidings:no-transaction\n"
        "-- What a failed run left goes first.\n"
        "DROP INDEX CONCURRENTLY IF EXISTS tidings.x;\n"
        "CREATE INDEX CONCURRENTLY x\n"
        "    ON tidings.messages (created_at);  -- the new one\n"
        "\n",
    )
    assert migration.statements() == [
        "-- tidings:no-transaction\n-- What a failed run left goes first.\n"
        "DROP INDEX CONCURRENTLY IF EXISTS tidings.x",
        "CREATE INDEX CONCURRENTLY x\n    ON tidings.messages (created_at)",
    ]


def test_dollar_quoting_is_refused_outside_a_transaction() -> None:
    migration = Migration(7, "fn", "-- tidings:no-transaction\nDO $$ BEGIN END $$;")
    with pytest.raises(MigrationError, match="0007_fn runs outside a transaction"):
        migration.statements()


def test_shipped_migrations_outside_a_transaction_can_be_split() -> None:
    for migration in available():
        if not migration.transactional:
            assert migration.statements(), migration.label


def test_the_lock_policy_waits_longer_each_time_up_to_its_ceiling() -> None:
    policy = LockPolicy(first_wait_s=1.0, max_wait_s=4.0)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (9, 4.0)):
        for _ in range(20):
            assert ceiling / 2 <= policy.wait_s(attempt) <= ceiling


def test_the_migrations_of_applications_change_the_catalog_of_events_only() -> None:
    shipped = {m.version: m for m in available()}
    # The key of events is built concurrently, on its own.
    assert not shipped[51].transactional
    dropped, built = shipped[51].statements()
    assert dropped.endswith("\nDROP INDEX CONCURRENTLY IF EXISTS tidings.events_app_key")
    assert built.startswith("CREATE UNIQUE INDEX CONCURRENTLY events_app_key ON tidings.events")
    # Adding the column changes the catalog only: a constant default, a foreign key not validated.
    events = shipped[50].sql
    assert "ALTER TABLE tidings.events ADD COLUMN app_id bigint NOT NULL DEFAULT 1;" in events
    assert "REFERENCES tidings.applications (id) NOT VALID;" in events
    assert "ALTER TABLE tidings.events VALIDATE CONSTRAINT" in shipped[52].sql
