"""What the claimer and sender tests share: a recording queue, settings, and SQL look-ups."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from tests.support.secrets import secrets_keyring
from tidings.config import Settings
from tidings.dal.connection import Database, fetch_dicts
from tidings.delivery.claimer import Claimer
from tidings.delivery.envelope import DeliveryEnvelope, envelopes_of
from tidings.delivery.http_transport import HttpTransport
from tidings.delivery.sender import BatchReport, QueueRecord, Sender
from tidings.delivery.ssrf import parse_allowed_networks
from tidings.local.queue import LocalQueue
from tidings.queue import OutgoingMessage, ReceivedMessage

LOOPBACK = ("127.0.0.0/8",)


def pipeline_settings(**changes: Any) -> Settings:
    base = Settings(
        allowed_networks=LOOPBACK,
        http_timeout_s=5.0,
        claim_idle_poll_s=0.05,
        claim_stop_before_timeout_s=1.0,
        # An endpoint that has never answered gets untried_max_in_flight rows at a time, and a
        # slow one slow_lane_max_in_flight (tests/integration/delivery/test_lanes.py); the
        # pipelines here claim new endpoints' backlogs whole.
        slow_lane_max_in_flight=1000,
        untried_max_in_flight=1000,
        # Nor is an endpoint marked slow at the timeouts these tests use; test_lanes.py sets its
        # own threshold.
        slow_lane_threshold_ms=60_000,
    )
    return base.replace(**changes)


class RecordingQueue:
    """A ``LocalQueue`` that remembers what was sent and can refuse chosen entry ids."""

    def __init__(self) -> None:
        self.inner = LocalQueue(visibility_timeout_s=30)
        self.sent: list[OutgoingMessage] = []
        self.refuse: set[str] = set()

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        self.sent.extend(messages)
        refused = [m.id for m in messages if m.id in self.refuse]
        self.inner.send_batch([m for m in messages if m.id not in self.refuse])
        return refused

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        return self.inner.receive(max_messages, wait_s)

    def delete(self, receipt_handles: Sequence[str]) -> None:
        self.inner.delete(receipt_handles)

    def change_visibility(self, receipt_handle: str, timeout_s: int) -> None:
        self.inner.change_visibility(receipt_handle, timeout_s)

    def approximate_depth(self) -> int:
        return self.inner.approximate_depth()


@dataclass
class Pipeline:
    """A claimer and a sender on one database and one recording queue."""

    db: Database
    queue: RecordingQueue
    settings: Settings
    transport: HttpTransport

    @property
    def claimer(self) -> Claimer:
        return Claimer(self.db, self.queue, self.settings)

    @property
    def sender(self) -> Sender:
        return Sender(self.db, self.queue, self.settings, self.transport, keyring=secrets_keyring())

    def deliver_queued(self) -> BatchReport:
        """Receive one batch of visible messages and hand it to the sender, acking like Lambda."""
        received = self.queue.receive(max_messages=10)
        report = self.sender.process([QueueRecord(m.message_id, m.body) for m in received])
        self.queue.delete(
            [m.receipt_handle for m in received if m.message_id not in report.failed_record_ids]
        )
        return report

    def claim_and_deliver(self) -> BatchReport:
        self.claimer.claim_once()
        return self.deliver_queued()


def make_pipeline(db: Database, **settings_changes: Any) -> Pipeline:
    settings = pipeline_settings(**settings_changes)
    transport = HttpTransport(
        allowed_networks=parse_allowed_networks(settings.allowed_networks),
        excerpt_bytes=settings.response_excerpt_bytes,
    )
    return Pipeline(db, RecordingQueue(), settings, transport)


def envelopes(messages: Sequence[OutgoingMessage]) -> list[DeliveryEnvelope]:
    """Every envelope the messages carry, in order (a message may carry several)."""
    return [envelope for m in messages for envelope in envelopes_of(m.body)]


def message_row(db: Database, message_id: int) -> dict[str, Any]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT id, status::text AS status, attempts, next_attempt_at, lease_token,"
            " last_error, last_status_code, last_response_ms, delivered_at, dead_lettered_at,"
            " now() AS db_now"
            " FROM tidings.messages WHERE id = %s",
            (message_id,),
        )
        rows = fetch_dicts(cur)
    assert rows, f"message {message_id} does not exist"
    return rows[0]


def attempt_rows(db: Database, message_id: int) -> list[dict[str, Any]]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT attempt_number, status_code, response_ms, error_class, response_excerpt"
            " FROM tidings.attempts WHERE message_id = %s ORDER BY attempt_number, id",
            (message_id,),
        )
        return fetch_dicts(cur)


def health_row(db: Database, endpoint_id: int) -> dict[str, Any]:
    with db.cursor() as cur:
        cur.execute(
            "SELECT state::text AS state, consecutive_failures, cooldown_s, opened_at"
            " FROM tidings.endpoint_health WHERE endpoint_id = %s",
            (endpoint_id,),
        )
        return fetch_dicts(cur)[0]


def only_message_id(db: Database) -> int:
    with db.cursor() as cur:
        cur.execute("SELECT id FROM tidings.messages")
        rows = cur.fetchall()
    assert len(rows) == 1, f"expected one message, found {len(rows)}"
    return int(rows[0][0])


def seconds_until(row: dict[str, Any], field: str = "next_attempt_at") -> float:
    value: datetime = row[field]
    now: datetime = row["db_now"]
    return (value - now).total_seconds()
