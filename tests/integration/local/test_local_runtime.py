"""The local runtime's plumbing with stand-in handlers: invocations, queue, API, schedules."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.fake_functions import write_fake_functions
from tests.support.processes import running
from tidings import wiring
from tidings.config import Settings
from tidings.local.runtime import LOOPBACK_NETWORKS, DevRuntime, RuntimeConfig, dev_settings
from tidings.local.sender_environments import EnvironmentNotReady
from tidings.queue import OutgoingMessage, QueueError


def _calls(folder: Path) -> list[dict[str, Any]]:
    log = folder / "calls.jsonl"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line]


def _wait_for(condition: Callable[[], bool], timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def _runtime(tmp_path: Path, database_url: str, **config: Any) -> DevRuntime:
    functions = write_fake_functions(tmp_path / "functions")
    settings = Settings(database_url=database_url, claim_stop_before_timeout_s=0.1)
    options = {
        "data_dir": tmp_path / "data",
        "port": 0,
        "sender_environments": 2,
        "claimer_slice_s": 0.3,
        "intervals_s": {"percentiles": 0.2, "health_monitor": 0.2},
        "alerts_stream": None,
        "functions_dir": functions,
        "drain_timeout_s": 2.0,
    }
    options.update(config)
    return DevRuntime(settings, RuntimeConfig(**options))


def test_claimer_invocations_feed_senders_through_the_queue(
    tmp_path: Path, database_url: str
) -> None:
    runtime = _runtime(tmp_path, database_url)
    runtime.start()
    try:
        folder = tmp_path / "functions"
        _wait_for(lambda: sum(c["function"] == "sender" for c in _calls(folder)) >= 3)
        calls = _calls(folder)
        claimed = [c for c in calls if c["function"] == "claimer"]
        sent = [c for c in calls if c["function"] == "sender"]
        # Each claimer invocation starts with its slice plus the claimer's stop margin.
        assert all(0 < c["remaining"] <= 400 for c in claimed)
        assert {c["body"] for c in sent} <= {c["body"] for c in claimed}
        assert {c["source"] for c in sent} == {runtime.queue_arn}
        assert {c["function_name"] for c in sent} == {"tidings-sender"}
    finally:
        runtime.stop()
    assert runtime.claimer_invocations >= 2
    assert runtime.claimer_failures == 0


@pytest.mark.parametrize("sender_processes", [False, True], ids=["threads", "processes"])
def test_failed_records_return_to_the_queue(
    tmp_path: Path, database_url: str, sender_processes: bool
) -> None:
    runtime = _runtime(
        tmp_path, database_url, claimer_slice_s=30.0, sender_processes=sender_processes
    )
    runtime.start()
    try:
        assert runtime.queue is not None
        runtime.queue.send_batch([OutgoingMessage(id="f", body="fail-once")])
        # The local queue's visibility timeout is long; bring the message back at once.
        folder = tmp_path / "functions"
        _wait_for(lambda: any(c["body"] == "fail-once" for c in _calls(folder) if "body" in c))
        assert runtime.queue.approximate_depth() >= 1
    finally:
        runtime.stop()


def _sender_pids(folder: Path) -> set[int]:
    return {c["pid"] for c in _calls(folder) if c["function"] == "sender"}


def _children() -> set[int]:
    """This process's children that run."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def test_sender_processes_take_the_claimers_messages_through_the_served_queue(
    tmp_path: Path, database_url: str
) -> None:
    runtime = _runtime(tmp_path, database_url, sender_processes=True)
    runtime.start()
    folder = tmp_path / "functions"
    try:
        children = runtime.child_pids()
        # Two fast-lane environments, four slow-lane ones and the queue server: each a process.
        assert len(set(children)) == 2 + 4 + 1
        assert os.getpid() not in children
        _wait_for(lambda: sum(c["function"] == "sender" for c in _calls(folder)) >= 3)
        claimed = {c["body"] for c in _calls(folder) if c["function"] == "claimer"}
        sent = [c for c in _calls(folder) if c["function"] == "sender"]
        assert {c["body"] for c in sent} <= claimed
        assert {c["source"] for c in sent} == {runtime.queue_arn}
        assert _sender_pids(folder) <= set(children)
    finally:
        runtime.stop()
    assert runtime.sender_invocations >= 3
    assert runtime.sender_failures == 0
    # Stopped, the runtime has ended every process it started: none is left behind.
    assert not any(running(pid) for pid in children)


def test_a_sender_process_that_dies_is_started_again(tmp_path: Path, database_url: str) -> None:
    runtime = _runtime(tmp_path, database_url, sender_processes=True, sender_environments=1)
    runtime.start()
    folder = tmp_path / "functions"
    try:
        _wait_for(lambda: len(_sender_pids(folder)) >= 1)
        [first] = _sender_pids(folder)
        os.kill(first, signal.SIGKILL)
        # The one fast-lane environment is gone; the claimer's next messages still arrive.
        _wait_for(lambda: len(_sender_pids(folder)) >= 2)
        assert not running(first)
        assert set(_sender_pids(folder)) - {first} <= set(runtime.child_pids())
    finally:
        runtime.stop()


def test_a_sender_process_that_cannot_start_stops_the_start(
    tmp_path: Path, database_url: str
) -> None:
    runtime = _runtime(tmp_path, database_url, sender_processes=True)
    sender = tmp_path / "functions" / "sender" / "app.py"
    sender.write_text("raise RuntimeError('the sender cannot load')\n")
    before = _children()
    try:
        with pytest.raises(EnvironmentNotReady, match=r"sender process sender-1 ended"):
            runtime.start()
    finally:
        runtime.stop()
    # The environments that did start, and the queue server, ended with the stop.
    _wait_for(lambda: not _children() - before, timeout_s=10)


def test_a_runtime_whose_queue_server_ends_says_it_cannot_go_on(
    tmp_path: Path, database_url: str
) -> None:
    runtime = _runtime(tmp_path, database_url, sender_processes=True, claimer_slice_s=30.0)
    runtime.start()
    try:
        assert runtime.queue_server is not None and runtime.queue is not None
        server_pid = runtime.queue_server.pid
        assert server_pid is not None
        os.kill(server_pid, signal.SIGKILL)
        _wait_for(lambda: runtime.failure is not None)
        assert "the queue server process ended" in (runtime.failure or "")
        # What the queue contract says of a queue that cannot be reached.
        with pytest.raises(QueueError, match="cannot be reached"):
            runtime.queue.approximate_depth()
        assert runtime.queue.send_batch([OutgoingMessage(id="m", body="b")]) == ["m"]
    finally:
        runtime.stop()


def test_api_requests_reach_the_ingest_handler_as_proxy_events(
    tmp_path: Path, database_url: str
) -> None:
    runtime = _runtime(tmp_path, database_url)
    runtime.start()
    try:
        assert runtime.api is not None
        # No token exists yet: a loopback request without one goes through as an admin's.
        reply = requests.post(runtime.api.url + "/events?dry=1", json={"type": "a"}, timeout=10)
        assert reply.status_code == 201
        assert reply.headers["X-Echo"] == "1"
        assert reply.json() == {
            "method": "POST",
            "path": "/events",
            "query": {"dry": "1"},
            "body": '{"type": "a"}',
            "stage": "local",
            "authorizer": {"principalId": "local-loopback", "scope": "admin"},
        }
        # A token presented is checked by the authorizer, whose context reaches the handler.
        good = requests.get(
            runtime.api.url + "/v1/x", headers={"Authorization": "Bearer good"}, timeout=10
        )
        assert good.json()["authorizer"] == {
            "principalId": "token-7",
            "scope": "producer",
            "token_id": "7",
        }
        bad = requests.get(
            runtime.api.url + "/v1/x", headers={"Authorization": "Bearer bad"}, timeout=10
        )
        assert bad.status_code == 401
        assert bad.json()["error"]["code"] == "unauthorized"
        checked = [c for c in _calls(tmp_path / "functions") if c["function"] == "authorizer"]
        assert [c["type"] for c in checked] == ["TOKEN", "TOKEN"]
        assert checked[0]["method_arn"].endswith("/local/GET/v1/x")
        failing = requests.get(runtime.api.url + "/boom", timeout=10)
        assert failing.status_code == 502
        assert failing.json()["error"]["code"] == "bad_gateway"
        traced = requests.request("TRACE", runtime.api.url + "/v1/x", timeout=10)
        assert traced.status_code == 405
        assert traced.json()["error"]["code"] == "method_not_allowed"
        # The portal's page goes to its own function, past the authorizer, even with a bad token;
        # links made here point at this address.
        page = requests.get(
            runtime.api.url + "/portal/portal.js",
            headers={"Authorization": "Bearer bad"},
            timeout=10,
        )
        assert (page.status_code, page.text) == (200, "portal")
        portal_calls = [c for c in _calls(tmp_path / "functions") if c["function"] == "portal"]
        assert [c["path"] for c in portal_calls] == ["/portal/portal.js"]
        assert runtime.settings.portal_url == runtime.api.url + "/portal"
        assert requests.post(runtime.api.url + "/portal", timeout=10).status_code == 405
    finally:
        runtime.stop()


def test_scheduled_handlers_fire_on_their_intervals(tmp_path: Path, database_url: str) -> None:
    runtime = _runtime(tmp_path, database_url)
    runtime.start()
    try:
        folder = tmp_path / "functions"
        _wait_for(
            lambda: sum(c["function"] == "tidings-health-monitor" for c in _calls(folder)) >= 3
        )
    finally:
        runtime.stop()
    names = {c["function"] for c in _calls(tmp_path / "functions")}
    assert {"tidings-percentiles", "tidings-health-monitor"} <= names
    # Not scheduled faster, so not due within the test.
    assert "tidings-pruner" not in names


def test_stop_returns_promptly_and_unwires(tmp_path: Path, database_url: str) -> None:
    runtime = _runtime(tmp_path, database_url, claimer_slice_s=60.0)
    runtime.start()
    time.sleep(0.5)
    started = time.monotonic()
    runtime.stop()
    # The claimer's long invocation is cut short rather than waited out.
    assert time.monotonic() - started < 10
    assert wiring.settings() is not runtime.settings


def test_dev_settings_allow_loopback_only() -> None:
    settings = dev_settings({"TIDINGS_ALLOWED_NETWORKS": "10.0.0.0/8"})
    assert settings.allowed_networks == LOOPBACK_NETWORKS
    # Local receivers listen on any port: no security group stands in between.
    assert all(settings.allows_port(port) for port in (1, 80, 6379, 54321, 65535))
    assert settings.lease_s == 60.0
    assert dev_settings({"TIDINGS_LEASE_S": "90"}).lease_s == 90.0


def test_loopback_access_without_a_token_ends_with_the_first_token(database_url: str) -> None:
    from tidings.dal.connection import Database
    from tidings.local.runtime import OpenAccess
    from tidings.logic import tokens

    db = Database(database_url)
    with wiring.overridden(database_factory=lambda: Database(database_url)):
        open_access = OpenAccess()
        assert open_access() is True
        assert open_access() is True
        made = tokens.create_token(db, scope="producer")
        assert open_access() is False
        # Revoked, the token still ended it: the API never opens again.
        tokens.revoke_token(db, made.id)
        assert open_access() is False
        assert OpenAccess()() is False
    db.close()
