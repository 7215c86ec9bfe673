"""``tidings demo --serve`` as a user runs it: the demo's results, then a portal link to its
application that opens the page and one session, served until SIGTERM."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import requests

from tests.e2e.conftest import wait_until

REPOSITORY = Path(__file__).resolve().parents[2]


def test_the_demo_ends_with_a_portal_link_that_opens_once(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPOSITORY / "layers" / "tidings"),
    }
    for name in ("DATABASE_URL", "AWS_ENDPOINT_URL"):
        env.pop(name, None)
    out_path = tmp_path / "out.log"
    out = out_path.open("w+")
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from tidings.cli import main; sys.exit(main())",
            "demo",
            "--serve",
            "--events",
            "60",
            "--seed",
            "3",
        ],
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
    )
    try:
        serving = re.compile(r"(http://127\.0\.0\.1:\d+)/portal#link=(tdg_[A-Za-z0-9_-]{43})\n")
        wait_until(
            lambda: "Serving until Ctrl-C." in out_path.read_text(),
            150,
            "the portal link",
            lambda: out_path.read_text()[-2000:],
        )
        text = out_path.read_text()
        found = serving.search(text)
        assert found is not None, text[-2000:]
        api, credential = found.groups()
        # The results come first, and the handlers' metric lines stay out of the terminal.
        assert text.index("Dead-letter report") < text.index("Consumer portal")
        assert '"_aws"' not in text
        page = requests.get(f"{api}/portal", timeout=30)
        assert page.status_code == 200
        assert "default-src 'none'" in page.headers["Content-Security-Policy"]
        opened = requests.post(
            f"{api}/v1/portal/sessions",
            json={},
            headers={"Authorization": f"Bearer {credential}"},
            timeout=30,
        )
        assert opened.status_code == 201, opened.text
        assert opened.json()["application"]["uid"] == "default"
        session = opened.json()["token"]
        messages = requests.get(
            f"{api}/v1/messages", headers={"Authorization": f"Bearer {session}"}, timeout=30
        )
        assert messages.status_code == 200 and messages.json()["items"]
        again = requests.post(
            f"{api}/v1/portal/sessions",
            json={},
            headers={"Authorization": f"Bearer {credential}"},
            timeout=30,
        )
        assert again.status_code == 401

        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
        assert out_path.read_text().rstrip().endswith("stopping")
        assert session not in out_path.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
