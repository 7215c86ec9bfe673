"""When the local scheduler fires scheduled handlers."""

from __future__ import annotations

from typing import Any

import pytest

from tidings.local.scheduler import Job, Scheduler, next_runs


def _noop(event: dict[str, Any], context: Any) -> None:
    return None


def test_nothing_runs_before_its_time() -> None:
    jobs = [Job("percentiles", 300, _noop)]
    ready, due = next_runs(jobs, {"percentiles": 300.0}, now=299.0)
    assert ready == []
    assert due == {"percentiles": 300.0}


def test_each_job_runs_on_its_own_interval() -> None:
    jobs = [Job("percentiles", 10, _noop), Job("pruner", 60, _noop)]
    due = {"percentiles": 10.0, "pruner": 60.0}
    fired: list[str] = []
    for now in range(1, 121):
        ready, due = next_runs(jobs, due, float(now))
        fired += [job.name for job in ready]
    assert fired.count("percentiles") == 12
    assert fired.count("pruner") == 2


def test_a_job_that_fell_behind_runs_once_not_in_a_burst() -> None:
    jobs = [Job("health_monitor", 5, _noop)]
    ready, due = next_runs(jobs, {"health_monitor": 5.0}, now=100.0)
    assert [job.name for job in ready] == ["health_monitor"]
    assert due["health_monitor"] > 100.0
    ready, _ = next_runs(jobs, due, now=100.5)
    assert ready == []


def test_bad_schedules_are_refused() -> None:
    with pytest.raises(ValueError, match="interval of pruner must be positive"):
        Job("pruner", 0, _noop)
    with pytest.raises(ValueError, match="scheduled twice"):
        Scheduler([Job("pruner", 1, _noop), Job("pruner", 2, _noop)])


def test_a_failing_handler_is_counted_and_does_not_stop_the_scheduler() -> None:
    def boom(event: dict[str, Any], context: Any) -> None:
        raise RuntimeError("boom")

    job = Job("pruner", 1, boom)
    scheduler = Scheduler([job])
    scheduler.fire(job)
    assert scheduler.failures["pruner"] == 1
    assert scheduler.runs["pruner"] == 0
