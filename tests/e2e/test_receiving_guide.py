"""The receiving guide's examples (docs/receiving) against real deliveries of ``tidings dev``.

The Python and Node.js receivers run as they are written, each twice: behind an endpoint that is
sent the raw payload and behind one that is sent the envelope. Events of two types (one of them
not ASCII, so its header arrives percent-encoded) are sent through the API; every receiver must
verify every delivery with its Standard Webhooks library and print its webhook-id, its type and
its payload. A request whose signature does not match gets 400. The Go example is compiled where
Go is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from tests.e2e.conftest import wait_until
from tidings.delivery import signing

REPOSITORY = Path(__file__).resolve().parents[2]
GUIDE = REPOSITORY / "docs" / "receiving"
EVENTS = [
    ("order.created", {"id": 43, "lines": [{"sku": "A-1", "qty": 2}]}),
    ("facture.pay\u00e9e", {"id": 7, "total": 12.5, "note": "d\u00e9j\u00e0 r\u00e9gl\u00e9e"}),
]


@dataclass
class Example:
    name: str
    command: list[str]
    cwd: Path


@dataclass
class Running:
    label: str
    payload_format: str
    endpoint_id: int
    port: int
    process: subprocess.Popen[str]
    out: Path
    err: Path

    def verified(self) -> list[tuple[str, str, object]]:
        lines = []
        for line in self.out.read_text().splitlines():
            if line.startswith("verified "):
                _, msg_id, event_type, payload = line.split(" ", 3)
                lines.append((msg_id, event_type, json.loads(payload)))
        return lines


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def dev_api(database_url: str, tmp_path: Path) -> Iterator[str]:
    """``tidings dev`` on a free port, with short waits; its API's address."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(REPOSITORY / "layers" / "tidings"),
        "TIDINGS_CLAIM_IDLE_POLL_S": "0.2",
    }
    env.pop("AWS_ENDPOINT_URL", None)
    out, err = tmp_path / "dev.out", tmp_path / "dev.err"
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tidings.cli import main; sys.exit(main())",
            "dev",
            "--port",
            "0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        env=env,
        stdout=out.open("w"),
        stderr=err.open("w"),
    )
    ready = re.compile(r"tidings dev: ready\s+api=(http://127\.0\.0\.1:\d+)")
    try:
        wait_until(
            lambda: ready.search(out.read_text()) is not None,
            60,
            "the ready line of tidings dev",
            lambda: err.read_text()[-2000:],
        )
        match = ready.search(out.read_text())
        assert match is not None
        yield match.group(1)
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


def _python_example(_: Path) -> Example:
    return Example("python", [sys.executable, str(GUIDE / "python" / "receiver.py")], GUIDE)


def _node_example(tmp_path: Path) -> Example:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js (node and npm) is not installed")
    folder = tmp_path / "node"
    folder.mkdir()
    for name in ("package.json", "package-lock.json", "receiver.js"):
        shutil.copy(GUIDE / "node" / name, folder / name)
    # Exactly the versions the lock file pins; nothing of the package runs at install.
    installed = subprocess.run(
        [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
        check=False,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    return Example("node", [node, str(folder / "receiver.js")], folder)


def _start(api: str, example: Example, payload_format: str, tmp_path: Path) -> Running:
    port = _free_port()
    created = requests.post(
        f"{api}/v1/endpoints",
        json={
            "url": f"http://127.0.0.1:{port}/hook",
            "event_types": ["*"],
            "payload_format": payload_format,
        },
        timeout=30,
    )
    assert created.status_code == 201, created.text
    assert created.json()["payload_format"] == payload_format
    label = f"{example.name}-{payload_format}"
    out, err = tmp_path / f"{label}.out", tmp_path / f"{label}.err"
    process = subprocess.Popen(
        example.command,
        cwd=example.cwd,
        env={
            **os.environ,
            "WEBHOOK_SECRET": created.json()["secret"],
            "PAYLOAD_FORMAT": payload_format,
            "PORT": str(port),
        },
        stdout=out.open("w"),
        stderr=err.open("w"),
        text=True,
    )
    running = Running(label, payload_format, created.json()["id"], port, process, out, err)
    wait_until(
        lambda: "listening on" in err.read_text() or process.poll() is not None,
        60,
        f"the {label} receiver to listen",
    )
    assert process.poll() is None, err.read_text()[-2000:]
    return running


def test_the_python_and_node_examples_verify_deliveries_of_either_format(
    dev_api: str, tmp_path: Path
) -> None:
    examples = [_python_example(tmp_path), _node_example(tmp_path)]
    receivers: list[Running] = []
    try:
        for example in examples:
            for payload_format in ("raw", "envelope"):
                receivers.append(_start(dev_api, example, payload_format, tmp_path))
        sent: dict[int, tuple[str, object]] = {}
        for number, (event_type, payload) in enumerate(EVENTS):
            reply = requests.post(
                f"{dev_api}/v1/events",
                json={"event_type": event_type, "payload": payload, "event_id": f"e-{number}"},
                timeout=30,
            )
            assert reply.status_code in (200, 201, 202), reply.text
            for message_id in reply.json()["message_ids"]:
                sent[message_id] = (event_type, payload)
        assert len(sent) == len(EVENTS) * len(receivers)

        def all_verified() -> bool:
            return all(len(r.verified()) >= len(EVENTS) for r in receivers)

        wait_until(
            all_verified,
            60,
            "every receiver to verify every delivery",
            lambda: "\n".join(
                f"{r.label}: {r.out.read_text()[-500:]} {r.err.read_text()[-500:]}"
                for r in receivers
            ),
        )
        messages = requests.get(f"{dev_api}/v1/messages", params={"limit": "100"}, timeout=30)
        endpoint_of = {m["id"]: m["endpoint_id"] for m in messages.json()["items"]}
        for receiver in receivers:
            expected = sorted(
                (signing_id, event_type, payload)
                for message_id, (event_type, payload) in sent.items()
                if endpoint_of[message_id] == receiver.endpoint_id
                for signing_id in [f"msg_{message_id}"]
            )
            assert sorted(receiver.verified(), key=repr) == sorted(expected, key=repr), (
                receiver.label
            )

        # A body that is not what was signed is refused, and printed by no one.
        for receiver in receivers:
            forged = _signed_request(b'{"id": 43}', "whsec_" + "A" * 44)
            answer = requests.post(
                f"http://127.0.0.1:{receiver.port}/hook",
                data=forged[0],
                headers=forged[1],
                timeout=10,
            )
            assert answer.status_code == 400, receiver.label
            assert len(receiver.verified()) == len(EVENTS), receiver.label
    finally:
        for receiver in receivers:
            receiver.process.terminate()
            receiver.process.wait(10)


def _signed_request(body: bytes, secret: str) -> tuple[bytes, dict[str, str]]:
    headers = signing.webhook_headers("msg_forged", int(time.time()), body, [secret])
    headers["webhook-event-type"] = "order.created"
    return body, headers


def test_the_go_example_compiles(tmp_path: Path) -> None:
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed: the Go example is compile-checked only where it is")
    folder = tmp_path / "go"
    shutil.copytree(GUIDE / "go", folder)
    # go.sum is not committed (no Go where the example was written): resolve it here.
    for command in ([go, "mod", "tidy"], [go, "vet", "."], [go, "build", "-o", "receiver", "."]):
        done = subprocess.run(
            command, check=False, cwd=folder, capture_output=True, text=True, timeout=600
        )
        assert done.returncode == 0, f"{' '.join(command)}: {done.stderr[-2000:]}"
