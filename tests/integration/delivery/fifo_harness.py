"""What the ordered-delivery tests share: FIFO endpoints, events with ordering keys, and
claimers and senders run on threads of their own, each with its own connection."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from typing import Any

from tests.integration.delivery.delivery_harness import Pipeline, RecordingQueue, make_pipeline
from tests.support.seed import make_endpoint, mark_answered
from tidings.dal.connection import Database, fetch_dicts


def fifo_endpoint(
    db: Database,
    url: str,
    *,
    batch_size: int = 1,
    on_dead_letter: str = "continue",
    retry_schedule: Sequence[int] | None = (1, 1, 1, 1),
    answered: bool = True,
) -> int:
    """A FIFO endpoint subscribed to every type, with a short retry schedule."""
    with db.cursor() as cur:
        endpoint_id = make_endpoint(cur, url)
        if answered:
            mark_answered(cur, endpoint_id)
        cur.execute(
            "UPDATE tidings.endpoints SET ordering = 'fifo', fifo_batch_size = %s,"
            " fifo_on_dead_letter = %s, retry_schedule = %s WHERE id = %s",
            (
                batch_size,
                on_dead_letter,
                list(retry_schedule) if retry_schedule else None,
                endpoint_id,
            ),
        )
    return endpoint_id


def send_events(
    db: Database, events: Sequence[tuple[str, str | None]], *, event_type: str = "ledger.entry"
) -> list[int]:
    """Record events (event id, ordering key) in one call, in this order; their message ids, in
    the events' order (one endpoint subscribed)."""
    batch: list[dict[str, Any]] = []
    for event_id, key in events:
        event: dict[str, Any] = {
            "event_type": event_type,
            "event_id": event_id,
            "payload": {"entry": event_id, "key": key},
        }
        if key is not None:
            event["ordering_key"] = key
        batch.append(event)
    with db.cursor() as cur:
        cur.execute(
            "SELECT item, message_ids FROM tidings.enqueue_batch(%s::jsonb) ORDER BY item",
            (json.dumps(batch),),
        )
        rows = cur.fetchall()
    return [int(ids[0]) for _, ids in rows if ids]


def statuses(db: Database, endpoint_id: int) -> dict[int, str]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT id, status::text FROM tidings.messages WHERE endpoint_id = %s", (endpoint_id,)
        )
        return {int(i): s for i, s in cur.fetchall()}


def line_of(db: Database, endpoint_id: int, key: str = "") -> dict[str, Any] | None:
    with db.cursor() as cur:
        cur.execute(
            "SELECT head_seq, paused_at FROM tidings.fifo_lines"
            " WHERE endpoint_id = %s AND ordering_key = %s",
            (endpoint_id, key),
        )
        rows = fetch_dicts(cur)
    return rows[0] if rows else None


def settled(db: Database, endpoint_id: int) -> bool:
    return all(s in ("delivered", "dead_letter") for s in statuses(db, endpoint_id).values())


def run_pipelines(
    database_url: str,
    queue: RecordingQueue,
    done: Any,
    *,
    workers: int = 1,
    timeout_s: float = 60.0,
    **settings: Any,
) -> float:
    """Run ``workers`` threads, each a claimer and a sender on its own connection sharing one
    queue, until ``done()`` (checked on a connection of its own) or the timeout; the seconds it
    took. Raises what a worker raised."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def work() -> None:
        db = Database(database_url)
        try:
            pipeline = make_pipeline(db, **settings)
            pipeline = Pipeline(db, queue, pipeline.settings, pipeline.transport)
            while not stop.is_set():
                round_ = pipeline.claimer.claim_once()
                report = pipeline.deliver_queued()
                if not round_.claimed and not (report.delivered or report.retried):
                    time.sleep(0.01)
        except BaseException as exc:
            errors.append(exc)
        finally:
            db.close()

    threads = [threading.Thread(target=work, daemon=True) for _ in range(workers)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    watcher = Database(database_url)
    try:
        while time.monotonic() - started < timeout_s and not errors:
            if done(watcher):
                break
            time.sleep(0.05)
        took = time.monotonic() - started
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=30)
        watcher.close()
    if errors:
        raise errors[0]
    return took
