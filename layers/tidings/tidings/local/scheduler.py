"""EventBridge schedules on one machine: each scheduled handler fired at its interval."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from tidings.deployment import FUNCTIONS_BY_NAME, SCHEDULED_INTERVALS_S
from tidings.local.lambda_env import Handler, LambdaContext, scheduled_event
from tidings.observability import logger

# The deployed schedules of the functions EventBridge starts at intervals (the claimer, which
# the runtime invokes back to back, aside).
DEFAULT_INTERVALS_S = dict(SCHEDULED_INTERVALS_S)


@dataclass(frozen=True, slots=True)
class Job:
    name: str
    interval_s: float
    handler: Handler

    @property
    def timeout_s(self) -> float:
        """What the deployed function of this name may run for."""
        return float(FUNCTIONS_BY_NAME[self.name].timeout_s)

    def __post_init__(self) -> None:
        if self.name not in FUNCTIONS_BY_NAME:
            raise ValueError(f"no deployed function is named {self.name!r}")
        if self.interval_s <= 0:
            raise ValueError(f"the interval of {self.name} must be positive, got {self.interval_s}")


def next_runs(
    jobs: list[Job], due: dict[str, float], now: float
) -> tuple[list[Job], dict[str, float]]:
    """The jobs due at ``now`` and the next due time of every job.

    A job that fell behind (its handler ran long) runs once, then counts its interval from now:
    missed runs are not replayed in a burst, as EventBridge does not replay them either.
    """
    ready = [job for job in jobs if due[job.name] <= now]
    updated = dict(due)
    for job in ready:
        updated[job.name] = max(due[job.name] + job.interval_s, now + job.interval_s / 2)
    return ready, updated


class Scheduler:
    """Fires each job's handler on its own interval, first one interval after ``start``."""

    def __init__(self, jobs: list[Job], clock: Callable[[], float] = time.monotonic) -> None:
        names = [job.name for job in jobs]
        if len(set(names)) != len(names):
            raise ValueError(f"a job is scheduled twice: {names}")
        self.jobs = jobs
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._current: LambdaContext | None = None
        self.runs: dict[str, int] = {job.name: 0 for job in jobs}
        self.failures: dict[str, int] = {job.name: 0 for job in jobs}

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="scheduler", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop firing; a handler running now is asked to finish (its deadline is brought in)."""
        self._stop.set()
        current = self._current
        if current is not None:
            current.expire()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def fire(self, job: Job) -> None:
        """Run one job now, on the calling thread; its failure is logged and counted."""
        context = LambdaContext(f"tidings-{job.name.replace('_', '-')}", job.timeout_s)
        self._current = context
        try:
            job.handler(scheduled_event(f"tidings-{job.name}"), context)
            self.runs[job.name] += 1
        except Exception:
            from tidings import wiring

            self.failures[job.name] += 1
            logger.exception("scheduled handler failed", extra={"function": job.name})
            # A lost connection must not outlive the failed invocation.
            wiring.reset_database()
        finally:
            self._current = None

    def _loop(self) -> None:
        from tidings import wiring

        start = self._clock()
        due = {job.name: start + job.interval_s for job in self.jobs}
        while not self._stop.is_set():
            ready, due = next_runs(self.jobs, due, self._clock())
            for job in ready:
                if self._stop.is_set():
                    break
                self.fire(job)
            wait = min(due.values(), default=start + 1.0) - self._clock()
            self._stop.wait(max(0.05, wait))
        wiring.reset_database()
