"""Speed lanes: which endpoints' deliveries travel apart, so that a slow one slows only itself.

A sender batch lasts as long as its slowest request. An endpoint whose attempt took at least the
slow-lane threshold, or ran out of time, is marked slow for a while (``mark_slow``); the claim
puts a slow endpoint's rows in the slow lane: a queue of its own whose senders take one message
at a time, under a concurrency of their own, with a cap on each endpoint's rows in flight.
Everything else shares the fast lane's batches; an endpoint that has never answered ("untried")
has one row at a time there, cut short at the threshold and recorded as soon as it answers.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tidings.delivery.retry_policy import AttemptError


class Lane(enum.StrEnum):
    FAST = "fast"
    SLOW = "slow"


def lane_of(slow: bool) -> Lane:
    return Lane.SLOW if slow else Lane.FAST


@dataclass(frozen=True, slots=True)
class Timing:
    """How long one attempt to an endpoint took, and how it ended."""

    endpoint_id: int
    elapsed_ms: int
    error: AttemptError | None


def slow_endpoints(timings: Iterable[Timing], threshold_ms: int) -> list[int]:
    """The endpoints (sorted, once each) with an attempt that took at least ``threshold_ms`` or
    timed out. An attempt that failed fast (refused, reset, blocked) says nothing of speed."""
    return sorted(
        {
            t.endpoint_id
            for t in timings
            if t.error is AttemptError.TIMEOUT or t.elapsed_ms >= threshold_ms
        }
    )
