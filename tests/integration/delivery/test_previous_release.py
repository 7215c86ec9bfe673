"""During a deploy, the previous release's senders run beside the new ones on the migrated schema.
0.2.0's sender calls begin_attempts_v3 (its claim, record and release are the same functions as
this release's, replaced in place), which now begins rows as begin_attempts_v4 does. Rows pass
between the two releases without being lost or sent twice.

Delete this test, and begin_attempts_v3, in the release after this one.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.support.seed import COOLDOWNS, make_endpoint, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Cursor, Database, fetch_dicts
from tidings.dal.delivery import AttemptOutcome, AttemptRequest, Lease, MessageStatus


def old_begin(cur: Cursor, leases: list[Lease], attempt: int = 1) -> list[dict[str, Any]]:
    cur.execute(
        "SELECT * FROM tidings.begin_attempts_v3(%s::bigint[], %s::uuid[], %s::integer[],"
        " %s::boolean[], 60, 1)",
        (
            [lease.message_id for lease in leases],
            [lease.token for lease in leases],
            [attempt] * len(leases),
            [True] * len(leases),
        ),
    )
    return fetch_dicts(cur)


def statuses(cur: Cursor) -> dict[str, int]:
    cur.execute("SELECT status::text, count(*) FROM tidings.messages GROUP BY 1")
    return dict(cur.fetchall())


def test_an_old_sender_begins_what_the_new_claim_leased_and_records_it(db: Database) -> None:
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur)
        seed_messages(cur, endpoint_id, 5)
        claimed = delivery.claim_due(cur, batch_size=5, lease_s=60)
        began = old_begin(cur, [row.lease for row in claimed])
        assert [row["permitted"] for row in began] == [True] * 5
        assert {row["lease_token"] for row in began}.isdisjoint(r.lease_token for r in claimed)
        assert statuses(cur) == {"in_flight": 5}
        now = datetime.now(UTC)
        recorded = delivery.record_outcomes(
            cur,
            [
                AttemptOutcome(
                    Lease(row["message_id"], row["lease_token"]),
                    endpoint_id,
                    MessageStatus.DELIVERED,
                    1,
                    now,
                    200,
                    3,
                )
                for row in began
            ],
            **COOLDOWNS,
        )
        assert len(recorded.written_ids) == 5
        assert statuses(cur) == {"delivered": 5}
        cur.execute("SELECT count(*) FROM tidings.queue")
        assert cur.fetchone() == (0,)


def test_a_copy_begun_by_an_old_sender_after_a_new_one_is_refused(db: Database) -> None:
    """The new begin gives the row a fresh token: an old sender holding the queue message's
    token (a second copy of it) finds the row no longer its own, and the other way round."""
    with db.cursor() as cur:
        seed_messages(cur, make_endpoint(cur), 2)
        first, second = delivery.claim_due(cur, batch_size=2, lease_s=60)
        (started,) = delivery.begin_attempts(cur, [AttemptRequest(first.lease, 1)], lease_s=60)
        assert started.permitted
        assert old_begin(cur, [first.lease]) == []
        (old,) = old_begin(cur, [second.lease])
        assert old["permitted"]
        assert delivery.begin_attempts(cur, [AttemptRequest(second.lease, 1)], lease_s=60) == []
