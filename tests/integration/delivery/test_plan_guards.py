"""The delivery statements read only what has work, whatever plan the session caches.

Each hot statement is a PL/pgSQL function whose plans PostgreSQL caches for the session: after
five runs it may switch to a generic plan, which ignores the values passed. So every guard runs
both with the default plan cache and with ``plan_cache_mode = force_generic_plan``, on a queue
that looks like a real one: many idle endpoints, a long history of delivered messages and logged
attempts, and a few endpoints with due work. What the plans read comes from PostgreSQL's
statistics counters (see ``tests.support.scans``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from tests.support.scans import Reads, reads_during, scanned
from tests.support.seed import COOLDOWNS, add_secret, seed_messages
from tidings.dal import delivery
from tidings.dal.connection import Cursor, Database
from tidings.dal.delivery import AttemptOutcome, AttemptRequest, CircuitSummary, MessageStatus

IDLE_ENDPOINTS = 20_000
SMALL_DEPLOYMENT = 100
BUSY = (17, 9_000, 19_999)
QUEUE_TABLES = {"queue", "message_rows", "events", "endpoints", "endpoint_health"}


@pytest.fixture(params=["auto", "force_generic_plan"])
def queue(request: pytest.FixtureRequest, db: Database) -> Iterator[Database]:
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url)"
            " SELECT 'https://r.example/' || g FROM generate_series(1, %s) g",
            (IDLE_ENDPOINTS,),
        )
        # History: delivered messages, outside the queue, each with a failed attempt logged
        # before the one that delivered it.
        seed_messages(cur, 5, 30_000, status="delivered")
        cur.execute(
            "INSERT INTO tidings.attempt_log (message_id, endpoint_id, attempt_number,"
            " attempted_at, status_code, response_ms)"
            " SELECT id, endpoint_id, 1, delivered_at - interval '1 minute', 503, 5"
            " FROM tidings.message_rows"
        )
        for endpoint_id in BUSY:
            seed_messages(cur, endpoint_id, 300)
    with db.connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
        cur.execute("SET plan_cache_mode = %s", (request.param,))
    for _ in range(6):  # past the plan cache's five custom plans
        _deliver(db, _claim(db))
    yield db


def _claim(db: Database) -> list[delivery.ClaimedMessage]:
    return db.run(lambda cur: delivery.claim_due(cur, batch_size=10, lease_s=60))


def _begin(cur: Cursor, rows: list[delivery.ClaimedMessage]) -> list[delivery.StartedAttempt]:
    return delivery.begin_attempts(
        cur, [AttemptRequest(r.lease, r.attempts + 1) for r in rows], lease_s=60
    )


def _record(cur: Cursor, started: list[delivery.StartedAttempt]) -> None:
    now = datetime.now(UTC)
    delivery.record_outcomes(
        cur,
        [
            AttemptOutcome(s.lease, s.endpoint_id, MessageStatus.DELIVERED, 1, now, 200, 5)
            for s in started
        ],
        [CircuitSummary(e, True, 0, now, None) for e in sorted({s.endpoint_id for s in started})],
        **COOLDOWNS,
    )


def _deliver(db: Database, rows: list[delivery.ClaimedMessage]) -> None:
    started = db.run(lambda cur: _begin(cur, rows))
    db.run(lambda cur: _record(cur, started))


def test_the_claim_visits_only_endpoints_with_queued_work(queue: Database) -> None:
    found: list[delivery.ClaimedMessage] = []
    reads = reads_during(
        queue, lambda cur: found.extend(delivery.claim_due(cur, batch_size=10, lease_s=60))
    )
    assert len(found) == 10
    assert not scanned(reads) & QUEUE_TABLES, reads
    # The busy endpoints and nothing of the 20,000 idle ones.
    assert reads["endpoints"].index_rows <= len(BUSY), reads["endpoints"]
    assert reads["endpoint_health"].index_rows <= len(BUSY), reads["endpoint_health"]


def test_beginning_reads_the_batch_by_key(queue: Database) -> None:
    rows = _claim(queue)
    started: list[delivery.StartedAttempt] = []
    reads = reads_during(queue, lambda cur: started.extend(_begin(cur, rows)))
    assert len(started) == 10
    assert not scanned(reads) & QUEUE_TABLES, reads


def test_beginning_reads_each_endpoint_by_key_in_a_small_deployment(db: Database) -> None:
    """A hundred endpoints, their health and their secrets fit in a few pages each. A plan that
    expects one row where the batch brings a hundred takes a scan of such a table for cheaper than
    a look-up by key, and then runs it once per row; the begin reads them by key all the same."""
    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url)"
            " SELECT 'https://r.example/' || g FROM generate_series(1, %s) g RETURNING id",
            (SMALL_DEPLOYMENT,),
        )
        endpoint_ids = [row[0] for row in cur.fetchall()]
        for endpoint_id in endpoint_ids:
            add_secret(cur, endpoint_id, f"whsec_{endpoint_id:032d}")
            seed_messages(cur, endpoint_id, 2)
    with db.connection.cursor() as cur:
        cur.execute("VACUUM ANALYZE")
    rows = db.run(lambda cur: delivery.claim_due(cur, batch_size=SMALL_DEPLOYMENT, lease_s=60))
    assert len({row.endpoint_id for row in rows}) == SMALL_DEPLOYMENT
    started: list[delivery.StartedAttempt] = []
    reads = reads_during(db, lambda cur: started.extend(_begin(cur, rows)))
    assert len(started) == len(rows) and all(s.permitted and s.secrets for s in started)
    endpoint_tables = {"endpoints", "endpoint_health", "endpoint_secrets", "endpoint_credentials"}
    assert not scanned(reads) & (QUEUE_TABLES | endpoint_tables), reads
    # By key: a row's endpoint and health once each, an endpoint's one secret once.
    for table in ("endpoints", "endpoint_health", "endpoint_secrets"):
        assert reads[table].index_rows <= len(rows), (table, reads[table])


def test_recording_never_reads_through_the_queue_or_the_attempt_log(queue: Database) -> None:
    started = queue.run(lambda cur: _begin(cur, _claim(queue)))
    reads = reads_during(queue, lambda cur: _record(cur, started))
    assert not scanned(reads) & QUEUE_TABLES, reads
    attempts = {name: r for name, r in reads.items() if name.startswith("attempts")}
    assert not scanned(attempts), attempts
    assert sum(r.index_rows for r in attempts.values()) <= len(started), attempts


def test_recording_finds_its_rows_by_key_among_many_leases(queue: Database) -> None:
    """The statistics saw no row in flight; now hundreds are. The record still reads its own
    rows by their primary key, not every lease of queue_in_flight."""
    leased = _claim_many(queue, 300)
    assert len(leased) >= 300
    started = queue.run(lambda cur: _begin(cur, leased[:10]))
    reads = reads_during(queue, lambda cur: _record(cur, started))
    assert reads["queue"].index_rows <= 2 * len(started), reads["queue"]


def _claim_many(db: Database, at_least: int) -> list[delivery.ClaimedMessage]:
    leased: list[delivery.ClaimedMessage] = []
    while len(leased) < at_least:
        batch = db.run(lambda cur: delivery.claim_due(cur, batch_size=100, lease_s=60))
        assert batch, f"only {len(leased)} rows could be leased"
        leased.extend(batch)
    return leased


def test_the_guard_sees_a_sequential_scan(queue: Database) -> None:
    """The counters are read after the work, not before it: a scan does show. (The condition on
    the payload, which no index holds, keeps the planner from counting through an index.)"""
    reads = reads_during(
        queue,
        lambda cur: cur.execute("SELECT count(*) FROM tidings.events WHERE payload IS NOT NULL"),
    )
    assert reads["events"] == Reads(1, reads["events"].seq_rows, 0, 0)
    assert reads["events"].seq_rows >= 30_000


def _fifo_backlog(db: Database, lines: int, per_line: int) -> int:
    """A FIFO endpoint with ``lines`` lines of ``per_line`` waiting messages each, the claimer's
    part done (each line's head is due)."""
    import json

    with db.cursor() as cur:
        cur.execute(
            "INSERT INTO tidings.endpoints (url, ordering)"
            " VALUES ('https://r.example/fifo', 'fifo') RETURNING id"
        )
        endpoint_id = int(cur.fetchone()[0])  # type: ignore[index]
        cur.execute(
            "UPDATE tidings.endpoint_health SET last_success_at = now() WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        events = [
            {
                "event_type": "fifo.backlog",
                "event_id": f"b{line}.{n}",
                "payload": {"n": n},
                "ordering_key": f"k{line}",
                "endpoint_ids": [endpoint_id],
            }
            for line in range(lines)
            for n in range(per_line)
        ]
        for start in range(0, len(events), 1000):
            cur.execute(
                "SELECT count(*) FROM tidings.enqueue_batch(%s::jsonb)",
                (json.dumps(events[start : start + 1000]),),
            )
        cur.execute("SELECT tidings.advance_noted_lines_v1(100000)")
    with db.connection.cursor() as cur:
        cur.execute("ANALYZE tidings.queue, tidings.message_rows")
    return endpoint_id


def test_a_fifo_backlog_costs_the_claim_its_heads_only(queue: Database) -> None:
    endpoint_id = _fifo_backlog(queue, lines=40, per_line=150)
    found: list[delivery.ClaimedMessage] = []
    reads = reads_during(
        queue, lambda cur: found.extend(delivery.claim_due(cur, batch_size=10, lease_s=60))
    )
    assert len(found) == 10
    assert not scanned(reads) & QUEUE_TABLES, reads
    # Of the queue, a probe per endpoint with queued rows (in each of the claim's two indexes),
    # the rows picked (each endpoint's part and one past it) and the rows leased, by id; of the
    # message rows, those picked (locked) and those leased (read): the 40 lines' 5,960 waiting
    # messages are not in the claim's indexes at all.
    endpoints = len(BUSY) + 1
    assert reads["queue"].index_rows <= 2 * endpoints + (10 + endpoints) + 10, reads["queue"]
    assert reads["message_rows"].index_rows <= 2 * (10 + endpoints), reads["message_rows"]
    mine = [row for row in found if row.endpoint_id == endpoint_id]
    assert mine and all(row.attempts == 0 for row in mine)


def test_moving_a_line_on_reads_its_next_message_only(queue: Database) -> None:
    endpoint_id = _fifo_backlog(queue, lines=1, per_line=3000)
    with queue.cursor() as cur:
        cur.execute(
            "UPDATE tidings.messages SET status = 'delivered', delivered_at = now()"
            " WHERE endpoint_id = %s AND status = 'pending'",
            (endpoint_id,),
        )
    reads = reads_during(
        queue,
        lambda cur: delivery.advance_lines(cur, [delivery.Line(endpoint_id, "k0")], lease_s=60),
    )
    assert not scanned(reads) & QUEUE_TABLES, reads
    assert reads["queue"].index_rows + reads["message_rows"].index_rows <= 5, reads
