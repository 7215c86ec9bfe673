"""``tidings dev`` as a user runs it: ready line, the real ingest API over HTTP (open on loopback
until the first token exists, then asking for one as on AWS), clean SIGINT."""

from __future__ import annotations

import os
import re
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import requests

from tests.e2e.conftest import count_where, wait_until
from tests.support.secrets import stored_secrets
from tidings.dal.connection import Database
from tidings.secrets.keyring import Keyring
from tidings.secrets.master_keys import local_master_key

REPOSITORY = Path(__file__).resolve().parents[2]


def test_dev_serves_the_api_and_stops_cleanly_on_sigint(database_url: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PYTHONPATH": str(REPOSITORY / "layers" / "tidings"),
    }
    env.pop("AWS_ENDPOINT_URL", None)
    # No key given: the runtime makes its key file in the data directory and says so.
    env.pop("TIDINGS_SECRETS_KEY", None)
    out = (tmp_path / "out.log").open("w+")
    err = (tmp_path / "err.log").open("w+")
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
        stdout=out,
        stderr=err,
    )
    try:
        ready = re.compile(r"tidings dev: ready\s+api=(http://127\.0\.0\.1:\d+)")
        wait_until(
            lambda: ready.search((tmp_path / "out.log").read_text()) is not None,
            60,
            "the ready line",
            lambda: (tmp_path / "err.log").read_text()[-2000:],
        )
        match = ready.search((tmp_path / "out.log").read_text())
        assert match is not None
        api = match.group(1)

        created = requests.post(
            f"{api}/v1/endpoints",
            json={"url": "http://127.0.0.1:9/hook", "event_types": ["order.created"]},
            timeout=30,
        )
        assert created.status_code == 201, created.text
        assert created.json()["secret"].startswith("whsec_")
        key_file = tmp_path / "data" / "secrets.key"
        assert (
            f"encrypted with the key in {key_file}: keep a copy"
            in (tmp_path / "out.log").read_text()
        )
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        keyring = Keyring(local_master_key({}, key_file, create=False), data_key_max_age_s=86400)
        db = Database(database_url)
        with db.cursor() as cur:
            stored = stored_secrets(cur, created.json()["id"], keyring)
        db.close()
        assert stored == [created.json()["secret"]]
        sent = requests.post(
            f"{api}/v1/events",
            json={"event_type": "order.created", "payload": {"id": 1}, "event_id": "o-1"},
            timeout=30,
        )
        assert sent.status_code in (200, 201, 202), sent.text
        db = Database(database_url)
        assert count_where(db, "true") == 1
        db.close()
        out_text = (tmp_path / "out.log").read_text()
        assert "no API token exists yet, so requests from loopback are accepted" in out_text

        # The first token ends the open access: from then on every request needs one.
        made = requests.post(f"{api}/v1/tokens", json={"scope": "producer"}, timeout=30)
        assert made.status_code == 201, made.text
        token = made.json()["token"]
        refused = requests.get(f"{api}/v1/messages", timeout=30)
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "unauthorized"
        allowed = requests.get(
            f"{api}/v1/messages", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert allowed.status_code == 200
        assert len(allowed.json()["items"]) == 1
        forbidden = requests.get(
            f"{api}/v1/endpoints", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        assert forbidden.status_code == 403

        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
        assert time.monotonic() - started < 60
        assert "tidings dev: stopped" in (tmp_path / "err.log").read_text()
        everything = (tmp_path / "out.log").read_text() + (tmp_path / "err.log").read_text()
        assert token not in everything
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
