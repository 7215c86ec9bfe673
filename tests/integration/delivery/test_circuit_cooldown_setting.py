"""A circuit that opens waits the configured cooldown, not the one its health row began with."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.support.seed import make_endpoint
from tidings.dal import delivery
from tidings.dal.connection import Database
from tidings.dal.delivery import CircuitSummary


def _fail(db: Database, endpoint_id: int, failures: int, base_cooldown_s: float) -> None:
    now = datetime.now(UTC)
    with db.cursor() as cur:
        delivery.record_outcomes(
            cur,
            [],
            [CircuitSummary(endpoint_id, False, failures, None, now)],
            base_cooldown_s=base_cooldown_s,
            max_cooldown_s=max(base_cooldown_s, 60.0),
        )


def _health(db: Database, endpoint_id: int) -> tuple[str, float]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT state::text, cooldown_s FROM tidings.endpoint_health WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        state, cooldown = cur.fetchone()
    return state, cooldown


def test_opening_from_closed_takes_the_configured_cooldown(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
    _fail(db, endpoint_id, 9, base_cooldown_s=1.5)
    assert _health(db, endpoint_id) == ("closed", 300.0)
    _fail(db, endpoint_id, 1, base_cooldown_s=1.5)
    assert _health(db, endpoint_id) == ("open", 1.5)


def test_failures_while_open_keep_the_cooldown(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
    _fail(db, endpoint_id, 10, base_cooldown_s=2.0)
    _fail(db, endpoint_id, 3, base_cooldown_s=5.0)
    assert _health(db, endpoint_id) == ("open", 2.0)
