"""The ordering invariant of FIFO lines, over generated events and answers: whatever the
receiver answers (delivered, failed for a retry, refused for a dead letter), in whatever batch
sizes, keys and pause settings, no request of a line carries a message while one accepted before
it is unsettled, and each key's deliveries arrive in the order its events were accepted.

The real claim, sender and SQL run against PostgreSQL; the receiver is a transport that answers
from the generated script, and the queue hands back retries at once (their backoff is the only
thing skipped), so an example runs in well under a second."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.delivery.delivery_harness import pipeline_settings
from tests.integration.delivery.fifo_harness import fifo_endpoint, send_events, statuses
from tests.support.fifo_receiver import message_ids_of
from tests.support.secrets import secrets_keyring
from tidings.dal.connection import Database, fetch_dicts
from tidings.delivery.claimer import Claimer
from tidings.delivery.http_transport import HttpResult
from tidings.delivery.sender import QueueRecord, Sender
from tidings.queue import OutgoingMessage, ReceivedMessage

KEYS = ("cus_a", "cus_b", None)


class ImmediateQueue:
    """A delivery queue whose messages are visible at once, whatever their delay."""

    def __init__(self) -> None:
        self.messages: list[OutgoingMessage] = []

    def send_batch(self, messages: Sequence[OutgoingMessage]) -> list[str]:
        self.messages.extend(messages)
        return []

    def receive(self, max_messages: int = 10, wait_s: float = 0) -> list[ReceivedMessage]:
        taken, self.messages = self.messages[:max_messages], self.messages[max_messages:]
        return [ReceivedMessage(m.id, m.id, m.body, 1) for m in taken]

    def delete(self, receipt_handles: Sequence[str]) -> None:
        pass

    def change_visibility(self, receipt_handle: str, timeout_s: int) -> None:
        pass

    def approximate_depth(self) -> int:
        return len(self.messages)


@dataclass(eq=False)
class ScriptedReceiver:
    """Answers each request with the next status of its script (200 once it runs out), and
    checks, as each request arrives, that every message of its line accepted before the ones
    it carries is settled."""

    db: Database
    endpoint_id: int
    answers: list[int]
    delivered: list[int] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)

    def post(
        self, url: str, body: bytes, headers: Mapping[str, str], timeout_s: float
    ) -> HttpResult:
        ids = message_ids_of(dict(headers), body)
        with self.db.cursor() as cur:
            cur.execute(
                "SELECT m.id, m.line_key, m.line_seq, m.status::text AS status"
                " FROM tidings.messages m WHERE m.endpoint_id = %s AND m.line_key ="
                " (SELECT line_key FROM tidings.messages WHERE id = %s) ORDER BY m.line_seq",
                (self.endpoint_id, ids[0]),
            )
            line = fetch_dicts(cur)
        position = {row["id"]: index for index, row in enumerate(line)}
        first = position[ids[0]]
        unsettled_before = [
            row["id"] for row in line[:first] if row["status"] not in ("delivered", "dead_letter")
        ]
        if unsettled_before:
            self.violations.append(f"{ids} sent while {unsettled_before} were unsettled")
        carried = [position[i] for i in ids]
        if carried != sorted(carried):
            self.violations.append(f"{ids} out of line order")
        status = self.answers.pop(0) if self.answers else 200
        if status == 200:
            self.delivered.extend(ids)
        return HttpResult(status, None, 1)


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, object]:
    count = draw(st.integers(1, 10))
    keys = draw(st.lists(st.sampled_from(KEYS), min_size=count, max_size=count))
    cuts = sorted(draw(st.sets(st.integers(1, count), max_size=2)) - {count})
    return {
        "keys": keys,
        "cuts": cuts,
        "batch_size": draw(st.integers(1, 4)),
        "pause": draw(st.booleans()),
        "answers": draw(st.lists(st.sampled_from((200, 200, 500, 400)), max_size=30)),
    }


def _drive(db: Database, claimer: Claimer, sender: Sender, queue: ImmediateQueue, ep: int) -> None:
    """Claim and send until every message is settled: failed rows are made due at once, and a
    line paused at a dead letter is resumed once nothing else can move."""
    for _ in range(400):
        claimer.claim_once()
        received = queue.receive()
        if received:
            sender.process([QueueRecord(m.message_id, m.body) for m in received])
            continue
        with db.cursor() as cur:
            cur.execute(
                "UPDATE tidings.messages SET next_attempt_at = now()"
                " WHERE endpoint_id = %s AND status = 'failed' AND lease_token IS NULL",
                (ep,),
            )
            moved = cur.rowcount
            if not moved:
                cur.execute("SELECT count(*) FROM tidings.resume_lines_v1(%s, NULL)", (ep,))
                row = cur.fetchone()
                moved = row[0] if row else 0
        if not moved and all(s in ("delivered", "dead_letter") for s in statuses(db, ep).values()):
            return
    raise AssertionError(f"not settled: {statuses(db, ep)}")


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(scenario=scenarios())
def test_no_message_of_a_line_is_sent_before_those_accepted_before_it_are_settled(
    db: Database, scenario: dict[str, object]
) -> None:
    keys: list[str | None] = scenario["keys"]  # type: ignore[assignment]
    cuts: list[int] = scenario["cuts"]  # type: ignore[assignment]
    ep = fifo_endpoint(
        db,
        "http://127.0.0.1:9/fifo",
        batch_size=scenario["batch_size"],  # type: ignore[arg-type]
        on_dead_letter="pause" if scenario["pause"] else "continue",
        retry_schedule=(1, 1),
    )
    with db.cursor() as cur:
        # Only this example's endpoint receives: earlier examples' endpoints stop subscribing.
        cur.execute("DELETE FROM tidings.subscriptions WHERE endpoint_id <> %s", (ep,))
    events = [(f"ep{ep}.e{i}", key) for i, key in enumerate(keys)]
    ids: list[int] = []
    for start, end in zip([0, *cuts], [*cuts, len(events)], strict=True):
        ids += send_events(db, events[start:end])
    receiver = ScriptedReceiver(db, ep, list(scenario["answers"]))  # type: ignore[arg-type]
    queue = ImmediateQueue()
    cfg = pipeline_settings(claim_idle_poll_s=0.0)
    claimer = Claimer(db, queue, cfg)  # type: ignore[arg-type]
    sender = Sender(db, queue, cfg, receiver, keyring=secrets_keyring())  # type: ignore[arg-type]

    _drive(db, claimer, sender, queue, ep)

    assert receiver.violations == []
    final = statuses(db, ep)
    for key in KEYS:
        line = [i for i, k in zip(ids, keys, strict=True) if k == key]
        delivered = [i for i in receiver.delivered if i in line]
        # Each key's deliveries in acceptance order, once each (a batch is answered once).
        assert delivered == [i for i in line if final[i] == "delivered"], json.dumps(
            {"key": key, "line": line, "delivered": delivered, "final": final}
        )
