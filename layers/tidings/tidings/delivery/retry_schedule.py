"""Retry schedules: the waits between a message's attempts, with full jitter (DESIGN §4).

A schedule is a list of delays ``d1 … dn``: a message gets ``n + 1`` attempts, and the delays lay
out ``n`` slots after its first attempt, slot ``k`` running from ``d1 + … + d(k-1)`` to
``d1 + … + dk``. Full jitter, for a list: retry ``k`` falls at a uniformly drawn point of slot
``k``, as the formula's full jitter draws a delay from ``[0, cap]``; but the slots are measured
from the schedule, not from where the previous retry happened to fall, so draws never add up.
The last retry falls at the end of the last slot: whatever the draws, a message's last attempt
comes no sooner than the schedule's whole span after its first (waiting, a ``Retry-After``, an
open circuit only add to that), so an outage shorter than the span costs no message.

The draw for retry ``k`` of a message is a hash of its id and ``k``: spread evenly over messages,
and the same every time it is computed, so that the sender, which knows only how many attempts a
row has had, can tell where the previous retry fell without storing it.

The exponential formula (``base * 2**(k-1)`` capped at ``max``) generates a schedule too.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any, Protocol

from tidings.config import DEFAULT_RETRY_SCHEDULE, MAX_RETRY_DELAY_S, MAX_RETRY_DELAYS
from tidings.delivery.backoff import cap_s

Schedule = tuple[float, ...]

# The limits on a schedule given for an endpoint (API and CLI): whole seconds, 1 s to 24 h,
# 1 to 50 delays. The deployment's own schedule (a setting) may use shorter, fractional delays,
# so that tests and demos can run long schedules quickly.
MIN_DELAYS = 1
MAX_DELAYS = MAX_RETRY_DELAYS
MIN_DELAY_S = 1
MAX_DELAY_S = int(MAX_RETRY_DELAY_S)


class ScheduleSettings(Protocol):
    """What the deployment's default schedule is made from."""

    @property
    def retry_schedule(self) -> tuple[float, ...]: ...
    @property
    def max_attempts(self) -> int | None: ...
    @property
    def backoff_base_s(self) -> float | None: ...
    @property
    def backoff_max_s(self) -> float | None: ...


# The formula's values when only some of its settings are given.
FORMULA_BASE_S = 30.0
FORMULA_MAX_S = 3600.0
FORMULA_ATTEMPTS = 5


def exponential(*, base_s: float, max_s: float, attempts: int) -> Schedule:
    """The exponential formula's schedule: ``attempts - 1`` delays ``min(max, base * 2**k)``."""
    if attempts < 1:
        raise ValueError(f"attempts must be at least 1, got {attempts}")
    return tuple(cap_s(k, base_s=base_s, max_s=max_s) for k in range(1, attempts))


def deployment_default(settings: ScheduleSettings) -> Schedule:
    """The schedule of endpoints without their own: ``TIDINGS_RETRY_SCHEDULE`` or, when the
    formula's settings are given instead, the schedule they generate."""
    if settings.retry_schedule:
        return tuple(settings.retry_schedule)
    formula = (settings.max_attempts, settings.backoff_base_s, settings.backoff_max_s)
    if all(value is None for value in formula):
        return DEFAULT_RETRY_SCHEDULE
    return exponential(
        base_s=FORMULA_BASE_S if settings.backoff_base_s is None else settings.backoff_base_s,
        max_s=FORMULA_MAX_S if settings.backoff_max_s is None else settings.backoff_max_s,
        attempts=FORMULA_ATTEMPTS if settings.max_attempts is None else settings.max_attempts,
    )


def fitted(schedule: Sequence[float], max_attempts: int | None) -> Schedule:
    """``schedule`` for exactly ``max_attempts`` attempts (an endpoint's or a message's legacy
    limit): its first ``max_attempts - 1`` delays, the last one repeated when it is shorter."""
    if max_attempts is None:
        return tuple(schedule)
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be at least 1, got {max_attempts}")
    wanted = max_attempts - 1
    if wanted <= len(schedule) or not schedule:
        return tuple(schedule[:wanted])
    return tuple(schedule) + (schedule[-1],) * (wanted - len(schedule))


def effective(
    own: Sequence[float] | None, default: Sequence[float], max_attempts: int | None
) -> Schedule:
    """The schedule a message follows: its endpoint's own or else the default, fitted to a
    legacy attempt limit when one is set."""
    return fitted(default if own is None else own, max_attempts)


def attempts_allowed(schedule: Sequence[float]) -> int:
    """A schedule of n delays allows n + 1 attempts."""
    return len(schedule) + 1


def span_s(schedule: Sequence[float]) -> float:
    """From a message's first attempt to its last, at the least."""
    return math.fsum(schedule)


def jitter_fraction(message_id: int, retry: int) -> float:
    """Where retry ``retry`` of message ``message_id`` falls in its slot: in [0, 1)."""
    digest = hashlib.blake2b(f"{message_id}:{retry}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def retry_offset_s(schedule: Sequence[float], retry: int, message_id: int) -> float:
    """When retry ``retry`` (1 … n) falls, counted from the first attempt."""
    n = len(schedule)
    if not 1 <= retry <= n:
        raise ValueError(f"retry must be within 1..{n}, got {retry}")
    slot_start = math.fsum(schedule[: retry - 1])
    if retry == n:
        return slot_start + schedule[-1]
    return slot_start + jitter_fraction(message_id, retry) * schedule[retry - 1]


def wait_s(schedule: Sequence[float], failed_attempts: int, message_id: int) -> float:
    """How long to wait after the ``failed_attempts``-th attempt failed, before the next one.

    Only while the schedule has a retry left (``failed_attempts <= len(schedule)``).
    """
    if failed_attempts < 1:
        raise ValueError(f"failed_attempts must be at least 1, got {failed_attempts}")
    previous = (
        0.0 if failed_attempts == 1 else retry_offset_s(schedule, failed_attempts - 1, message_id)
    )
    return max(0.0, retry_offset_s(schedule, failed_attempts, message_id) - previous)


def parse_endpoint_schedule(value: Any) -> Schedule:
    """An endpoint's schedule as given through the API or the CLI: 1 to 50 whole seconds, each
    1 s to 24 h. Raises ``ValueError`` saying what is wrong."""
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise ValueError("must be a list of delays in seconds")
    if not MIN_DELAYS <= len(value) <= MAX_DELAYS:
        raise ValueError(f"must hold {MIN_DELAYS} to {MAX_DELAYS} delays, not {len(value)}")
    delays: list[float] = []
    for position, item in enumerate(value):
        whole = isinstance(item, int) or (isinstance(item, float) and item.is_integer())
        if isinstance(item, bool) or not whole:
            raise ValueError(f"delay {position + 1} ({item!r}) is not a whole number of seconds")
        if not MIN_DELAY_S <= item <= MAX_DELAY_S:
            raise ValueError(
                f"delay {position + 1} ({item}) must be {MIN_DELAY_S} to {MAX_DELAY_S} seconds"
            )
        delays.append(float(item))
    return tuple(delays)
