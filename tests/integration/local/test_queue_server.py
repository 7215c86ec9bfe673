"""The queue server as an attacker and a killed runtime meet it: it answers only those who hold
its key, over a socket no other user reaches, and it ends, socket and all, with its runtime."""

from __future__ import annotations

import multiprocessing
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import running
from tidings.local.queue_server import QueueAddress, QueueServer, connect_queues
from tidings.queue import OutgoingMessage

REPOSITORY = Path(__file__).resolve().parents[3]

_RUNTIME = """
import time
from tidings.local.queue_server import QueueServer

if __name__ == "__main__":
    server = QueueServer().start()
    print(server.pid, server.address.address, flush=True)
    time.sleep(600)
"""


def test_the_queue_server_refuses_a_caller_without_its_key() -> None:
    server = QueueServer().start()
    where = server.address
    try:
        forged = QueueAddress(where.address, os.urandom(32))
        with pytest.raises(multiprocessing.AuthenticationError):
            connect_queues(forged)
        # Only this user reaches the socket at all.
        assert stat.S_IMODE(Path(where.address).parent.stat().st_mode) == 0o700
        # The key stays out of what gets logged.
        assert where.authkey.hex() not in repr(where)
        assert repr(where.authkey) not in repr(where)
        # The rightful caller is served.
        queues = server.connect()
        assert queues["fast"].send_batch([OutgoingMessage(id="a", body="hello")]) == []
        assert [m.body for m in queues["fast"].receive()] == ["hello"]
    finally:
        server.stop()
    assert not Path(where.address).parent.exists()


def test_a_killed_runtime_takes_its_queue_server_and_socket_with_it(tmp_path: Path) -> None:
    script = tmp_path / "runtime.py"
    script.write_text(_RUNTIME)
    runtime = subprocess.Popen(
        [sys.executable, str(script)],
        env={**os.environ, "PYTHONPATH": str(REPOSITORY / "layers" / "tidings")},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert runtime.stdout is not None
        pid_text, address = runtime.stdout.readline().split()
        server_pid = int(pid_text)
        assert running(server_pid) and Path(address).exists()
        runtime.send_signal(signal.SIGKILL)
        runtime.wait(10)
        deadline = time.monotonic() + 10
        while running(server_pid) or Path(address).parent.exists():
            assert time.monotonic() < deadline, "the queue server outlived its runtime"
            time.sleep(0.05)
    finally:
        if runtime.poll() is None:
            runtime.kill()
