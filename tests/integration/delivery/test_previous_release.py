"""During a deploy, the previous release's claimers and senders run beside the new ones on the
migrated schema: its statements (kept in ``previous_release/delivery.sql`` as that release ran
them) still work, and rows pass between the two releases without being lost or sent twice.

Delete the folder, and this test, once the release after this one no longer needs it.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.seed import make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Cursor, Database, fetch_dicts
from tidings.dal.delivery import AttemptOutcome, AttemptRequest, Lease, MessageStatus
from tidings.dal.queries import parse

PREVIOUS = parse(
    (Path(__file__).parent / "previous_release" / "delivery.sql").read_text(encoding="utf-8"),
    "previous_release/delivery.sql",
)
COOLDOWNS = {"base_cooldown_s": 300.0, "max_cooldown_s": 3600.0}


def old_claim(cur: Cursor, batch_size: int) -> list[dict[str, Any]]:
    cur.execute(
        PREVIOUS["claim_due"].sql,
        {
            "batch_size": batch_size,
            "max_in_flight": 10_000,
            "lease_s": 60,
            "inline_payload_bytes": 0,
        },
    )
    return fetch_dicts(cur)


def old_begin(cur: Cursor, leases: list[Lease], attempt: int = 1) -> list[dict[str, Any]]:
    cur.execute(
        PREVIOUS["begin_attempts"].sql,
        {
            "ids": [lease.message_id for lease in leases],
            "tokens": [lease.token for lease in leases],
            "attempts": [attempt] * len(leases),
            "want_payload": [True] * len(leases),
            "lease_s": 60,
            "hold_back_s": 1.0,
        },
    )
    return fetch_dicts(cur)


def old_record(cur: Cursor, leases: list[Lease], endpoint_id: int) -> list[int]:
    now = datetime.now(UTC).isoformat()
    outcomes = [
        {
            "id": lease.message_id,
            "token": str(lease.token),
            "endpoint_id": endpoint_id,
            "outcome": "delivered",
            "retry_at": None,
            "keep_lease": False,
            "attempt_number": 1,
            "attempted_at": now,
            "status_code": 200,
            "response_ms": 4,
            "error_class": None,
            "excerpt": None,
        }
        for lease in leases
    ]
    cur.execute(
        PREVIOUS["record_outcomes"].sql,
        {
            "ids": [lease.message_id for lease in leases],
            "outcomes": json.dumps(outcomes),
            "health_endpoint_ids": [endpoint_id],
            "has_success": [True],
            "trailing_failures": [0],
            "last_success_at": [datetime.now(UTC)],
            "last_failure_at": [None],
            "disable_ids": [],
            "disable_reasons": [],
            **COOLDOWNS,
        },
    )
    (written, _, _) = cur.fetchone()
    return list(written)


def statuses(cur: Cursor) -> dict[str, int]:
    cur.execute("SELECT status::text, count(*) FROM tidings.messages GROUP BY 1")
    return dict(cur.fetchall())


def test_an_old_claimer_feeds_new_senders(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 5)
        claimed = old_claim(cur, 5)
        started = delivery.begin_attempts(
            cur,
            [AttemptRequest(Lease(r["id"], r["lease_token"]), r["attempts"] + 1) for r in claimed],
            lease_s=60,
        )
        assert [s.permitted for s in started] == [True] * 5
        now = datetime.now(UTC)
        recorded = delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(s.lease, endpoint_id, MessageStatus.DELIVERED, 1, now, 200, 3)
                for s in started
            ],
            **COOLDOWNS,
        )
        assert len(recorded.written_ids) == 5
        assert statuses(cur) == {"delivered": 5}


def test_a_new_claimer_feeds_old_senders(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 5)
        claimed = delivery.claim_due(cur, batch_size=5, lease_s=60)
        leases = [row.lease for row in claimed]
        began = old_begin(cur, leases)
        assert [row["permitted"] for row in began] == [True] * 5
        assert len(old_record(cur, leases, endpoint_id)) == 5
        assert statuses(cur) == {"delivered": 5}


def test_the_old_release_gives_back_what_the_new_claim_leased(db: Database) -> None:
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 3)
        claimed = delivery.claim_due(cur, batch_size=3, lease_s=60)
        cur.execute(
            PREVIOUS["release_leases"].sql,
            {
                "ids": [r.message_id for r in claimed],
                "tokens": [r.lease_token for r in claimed],
                "delay_s": 0,
            },
        )
        assert len(cur.fetchall()) == 3
        assert statuses(cur) == {"pending": 3}
        # And the new claim takes them again.
        assert len(delivery.claim_due(cur, batch_size=3, lease_s=60)) == 3


def test_a_copy_begun_by_an_old_sender_after_a_new_one_is_refused(db: Database) -> None:
    """The new begin gives the row a fresh token: an old sender holding the queue message's
    token (a second copy of it) finds the row no longer its own."""
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 1)
        (row,) = delivery.claim_due(cur, batch_size=1, lease_s=60)
        (started,) = delivery.begin_attempts(cur, [AttemptRequest(row.lease, 1)], lease_s=60)
        assert started.permitted
        assert old_begin(cur, [row.lease]) == []
