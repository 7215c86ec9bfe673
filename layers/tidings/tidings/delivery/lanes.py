"""Speed lanes: which endpoints' deliveries travel apart, so that a slow one slows only itself.

A sender batch lasts as long as its slowest request. An endpoint whose attempt took at least the
slow-lane threshold, or ran out of time, is marked slow for a while (``mark_slow``); the claim
puts a slow endpoint's rows in the slow lane: a queue of its own whose senders take one message
at a time, under a concurrency of their own, with a cap on each endpoint's rows in flight. An
endpoint that has never answered ("untried") travels there too, one row at a time, until its
first answer tells its speed: nothing of unknown speed shares a batch. Everything else shares the
fast lane's batches. A slow endpoint leaves the slow lane when its mark ends, or sooner, after
enough quick answers in a row there (``quick_endpoints``, ``mark_quick``): one slow answer must
not hold a quick receiver to the slow lane's pace for the whole hold.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass

from tidings.delivery.retry_policy import AttemptError


class Lane(enum.StrEnum):
    FAST = "fast"
    SLOW = "slow"


def lane_of(*, slow: bool, untried: bool) -> Lane:
    """The lane of a claimed row, from what the claim says of its endpoint."""
    return Lane.SLOW if slow or untried else Lane.FAST


def in_flight_cap(
    own: int | None, *, slow: bool, untried: bool, slow_cap: int, untried_cap: int
) -> int | None:
    """The cap the claim puts on an endpoint's rows in flight (``claim_due_v2`` states the same
    rule in SQL): the slow lane's while it is slow, the untried one's until it first answers,
    its ``own`` when lower (an application's token sets it, and may only lower a lane's cap);
    else its own; None for none."""
    lane_cap = slow_cap if slow else untried_cap if untried else None
    if lane_cap is None:
        return own
    return lane_cap if own is None else min(own, lane_cap)


@dataclass(frozen=True, slots=True)
class Timing:
    """How long one attempt to an endpoint took, and how it ended."""

    endpoint_id: int
    elapsed_ms: int
    error: AttemptError | None
    status_code: int | None = None


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


def quick_endpoints(timings: Iterable[Timing], threshold_ms: int) -> list[int]:
    """The endpoints (sorted, once each) all of whose attempts were accepted (2xx) in under half
    of ``threshold_ms``: what counts towards leaving the slow lane. Half, not all of it, so that
    an endpoint answering about the threshold stays in one lane instead of moving at every
    answer; accepted, because a receiver shedding load answers 429 or 503 at once; and an
    attempt without an answer (refused, reset, timed out) says nothing of speed."""
    timings = list(timings)
    not_quick = {
        t.endpoint_id
        for t in timings
        if t.error is not None
        or t.status_code is None
        or not 200 <= t.status_code <= 299
        or 2 * t.elapsed_ms >= threshold_ms
    }
    return sorted({t.endpoint_id for t in timings} - not_quick)
