"""LocalQueue details: exact timing under a test clock, redrive, handles, long polling, threads."""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest

from tidings.local.queue import LocalQueue
from tidings.queue import OutgoingMessage, QueueError


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_a_delayed_message_becomes_visible_exactly_when_due(clock: FakeClock) -> None:
    queue = LocalQueue(clock=clock)
    queue.send_batch([OutgoingMessage("a", "later", delay_s=900)])

    clock.advance(899.999)
    assert queue.receive() == []
    clock.advance(0.001)
    assert [m.body for m in queue.receive()] == ["later"]


def test_messages_come_out_in_the_order_they_become_visible(clock: FakeClock) -> None:
    queue = LocalQueue(clock=clock)
    queue.send_batch(
        [
            OutgoingMessage("five", "5", delay_s=5),
            OutgoingMessage("one", "1", delay_s=1),
            OutgoingMessage("three", "3", delay_s=3),
        ]
    )
    clock.advance(10)

    assert [m.body for m in queue.receive()] == ["1", "3", "5"]


def test_receive_returns_at_most_max_messages(clock: FakeClock) -> None:
    queue = LocalQueue(clock=clock)
    queue.send_batch([OutgoingMessage(f"m{i}", str(i)) for i in range(7)])

    assert len(queue.receive(max_messages=3)) == 3
    assert len(queue.receive(max_messages=10)) == 4
    assert queue.receive() == []


def test_visibility_timeout_is_exact(clock: FakeClock) -> None:
    queue = LocalQueue(visibility_timeout_s=30, clock=clock)
    queue.send_batch([OutgoingMessage("a", "x")])
    queue.receive()

    clock.advance(29.9)
    assert queue.receive() == []
    clock.advance(0.1)
    [again] = queue.receive()
    assert again.receive_count == 2


def test_a_stale_receipt_handle_deletes_nothing(clock: FakeClock) -> None:
    queue = LocalQueue(visibility_timeout_s=10, clock=clock)
    queue.send_batch([OutgoingMessage("a", "x")])
    [first] = queue.receive()
    clock.advance(10)
    [second] = queue.receive()

    queue.delete([first.receipt_handle])
    assert queue.approximate_depth() == 1

    queue.delete([second.receipt_handle])
    assert queue.approximate_depth() == 0
    # Deleting again, as a redelivered batch might, is harmless.
    queue.delete([second.receipt_handle])


def test_change_visibility_needs_the_current_handle(clock: FakeClock) -> None:
    queue = LocalQueue(visibility_timeout_s=10, clock=clock)
    queue.send_batch([OutgoingMessage("a", "x")])
    [first] = queue.receive()
    clock.advance(10)
    [second] = queue.receive()

    with pytest.raises(QueueError, match="not current"):
        queue.change_visibility(first.receipt_handle, 0)

    queue.change_visibility(second.receipt_handle, 100)
    clock.advance(99)
    assert queue.receive() == []
    clock.advance(1)
    assert [m.receive_count for m in queue.receive()] == [3]


def test_change_visibility_checks_its_timeout(clock: FakeClock) -> None:
    queue = LocalQueue(clock=clock)
    queue.send_batch([OutgoingMessage("a", "x")])
    [message] = queue.receive()
    for bad in (-1, 43_201):
        with pytest.raises(ValueError, match="timeout_s"):
            queue.change_visibility(message.receipt_handle, bad)


def test_redrive_moves_the_message_on_the_receive_after_the_limit(clock: FakeClock) -> None:
    dead_letter = LocalQueue(clock=clock)
    queue = LocalQueue(
        visibility_timeout_s=5, max_receive_count=3, dead_letter=dead_letter, clock=clock
    )
    queue.send_batch([OutgoingMessage("a", "poison"), OutgoingMessage("b", "fine")])

    for count in (1, 2, 3):
        batch = queue.receive()
        assert [m.receive_count for m in batch] == [count, count]
        queue.delete([m.receipt_handle for m in batch if m.body == "fine"] if count == 3 else [])
        clock.advance(5)

    assert dead_letter.approximate_depth() == 0
    assert queue.receive() == []
    assert queue.approximate_depth() == 0
    [dead] = dead_letter.receive()
    assert dead.body == "poison"
    assert dead.receive_count == 4


def test_without_a_dead_letter_queue_the_message_stays(clock: FakeClock) -> None:
    queue = LocalQueue(visibility_timeout_s=1, max_receive_count=2, clock=clock)
    queue.send_batch([OutgoingMessage("a", "x")])
    for _ in range(4):
        assert len(queue.receive()) == 1
        clock.advance(1)
    assert queue.approximate_depth() == 1


def test_constructor_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="max_receive_count"):
        LocalQueue(max_receive_count=0)
    with pytest.raises(ValueError, match="visibility_timeout_s"):
        LocalQueue(visibility_timeout_s=-1)


def test_a_malformed_receipt_handle_is_refused(clock: FakeClock) -> None:
    queue = LocalQueue(clock=clock)
    with pytest.raises(QueueError, match="not a receipt handle"):
        queue.change_visibility("garbage", 0)


def test_a_receive_does_not_scan_delayed_messages(clock: FakeClock) -> None:
    queue = LocalQueue(clock=clock)
    for start in range(0, 100_000, 1000):
        queue.send_batch(
            [OutgoingMessage(f"m{i}", "x", delay_s=900) for i in range(start, start + 1000)]
        )
    queue.send_batch([OutgoingMessage("due", "now")])

    started = time.perf_counter()
    first = queue.receive()
    empties = [queue.receive() for _ in range(2000)]
    elapsed = time.perf_counter() - started

    assert [m.body for m in first] == ["now"]
    assert all(batch == [] for batch in empties)
    # A scan of 100,000 messages per receive would take minutes here, not milliseconds.
    assert elapsed < 1.0


class CountingClock:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        return time.monotonic()


def test_long_polling_waits_without_spinning() -> None:
    clock = CountingClock()
    queue = LocalQueue(clock=clock)

    started = time.monotonic()
    assert queue.receive(wait_s=0.3) == []
    waited = time.monotonic() - started

    assert 0.3 <= waited < 1.0
    assert clock.calls < 10


def test_long_polling_returns_as_soon_as_a_message_is_sent() -> None:
    queue = LocalQueue()
    sender = threading.Timer(0.1, queue.send_batch, args=([OutgoingMessage("a", "x")],))
    sender.start()

    started = time.monotonic()
    batch = queue.receive(wait_s=10)
    waited = time.monotonic() - started
    sender.join()

    assert [m.body for m in batch] == ["x"]
    assert waited < 2.0


def test_long_polling_wakes_when_an_in_flight_message_reappears() -> None:
    queue = LocalQueue(visibility_timeout_s=0.2)
    queue.send_batch([OutgoingMessage("a", "x")])
    queue.receive()

    started = time.monotonic()
    [again] = queue.receive(wait_s=10)
    waited = time.monotonic() - started

    assert again.receive_count == 2
    assert 0.15 <= waited < 2.0


def test_eight_consumers_each_message_exactly_once() -> None:
    total = 20_000
    queue = LocalQueue(visibility_timeout_s=300)
    seen: list[list[str]] = [[] for _ in range(8)]
    producers_done = threading.Event()

    def produce(offset: int) -> None:
        for start in range(offset, offset + total // 2, 100):
            queue.send_batch(
                [OutgoingMessage(f"m{i}", f"body-{i}") for i in range(start, start + 100)]
            )

    def consume(mine: list[str]) -> None:
        while True:
            batch = queue.receive(max_messages=10, wait_s=0.05)
            if not batch:
                if producers_done.is_set() and queue.approximate_depth() == 0:
                    return
                continue
            mine.extend(m.body for m in batch)
            queue.delete([m.receipt_handle for m in batch])

    consumers = [threading.Thread(target=consume, args=(mine,)) for mine in seen]
    producers = [threading.Thread(target=produce, args=(offset,)) for offset in (0, total // 2)]
    started = time.monotonic()
    for thread in consumers + producers:
        thread.start()
    for thread in producers:
        thread.join()
    producers_done.set()
    for thread in consumers:
        thread.join(timeout=60)
    elapsed = time.monotonic() - started

    assert not any(thread.is_alive() for thread in consumers)
    counts = Counter(body for mine in seen for body in mine)
    assert len(counts) == total
    assert set(counts.values()) == {1}
    assert counts.keys() == {f"body-{i}" for i in range(total)}
    assert sum(1 for mine in seen if mine) > 1
    assert queue.approximate_depth() == 0
    # Thousands of messages a second, with generous room for a loaded machine.
    assert total / elapsed > 1000
