"""``tidings demo``: the dev runtime delivering to receivers that behave well and badly.

Receivers on loopback (healthy, slow, flaky, rate limited, gone, dead, and four from the zoo of
hostile ones: unusable Retry-After headers, a 50 MB body, a redirect to a private address, 401)
each get an endpoint; a few thousand events are recorded through ``tidings.enqueue``; the table
shows each endpoint's progress until every message is delivered or dead-lettered; then the
dead-letter report.

The demo is quick because its settings are short (``DEMO_SETTINGS``: retry schedule, cooldowns,
lease),
not because any code path differs: any of them can be overridden from the environment.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TextIO

from tidings.config import Settings
from tidings.dal.connection import Database
from tidings.dal.operator import (
    DemoEvent,
    EndpointProgress,
    endpoint_progress,
    enqueue_events,
    unsettled_messages,
)
from tidings.local.embedded import embedded_postgres_package
from tidings.local.progress import LiveDisplay, render
from tidings.local.receivers import Kind, Receivers
from tidings.local.runtime import DevRuntime, RuntimeConfig, dev_settings
from tidings.logic.applications import DEFAULT_APP_ID, DEFAULT_APP_UID
from tidings.logic.portal import create_link
from tidings.observability import logger
from tidings.secrets.keyring import Keyring

# Short delays so that retries, circuit cooldowns and dead letters happen within two minutes.
DEMO_SETTINGS: Mapping[str, str] = {
    # Four attempts over 3.5 s (a deployment's default spans 27.6 hours).
    "TIDINGS_RETRY_SCHEDULE": "0.5,1,2",
    "TIDINGS_CIRCUIT_COOLDOWN_S": "1",
    "TIDINGS_CIRCUIT_MAX_COOLDOWN_S": "2",
    "TIDINGS_CLAIM_IDLE_POLL_S": "0.2",
    "TIDINGS_HTTP_TIMEOUT_S": "8",
    "TIDINGS_LEASE_S": "30",
}
# Share of the events for each receiver kind; gone and dead get a fixed handful (see below).
DEMO_MIX: Mapping[Kind, float] = {
    Kind.HEALTHY: 0.55,
    Kind.FLAKY: 0.2,
    Kind.RATE_LIMITED: 0.15,
    Kind.SLOW: 0.1,
}
# A dead endpoint's messages can only fail through one circuit probe at a time, so it gets few;
# so does the one that answers 429/503 with Retry-After headers no one could use. The other
# hostile receivers each show one thing: a 50 MB body costs the sender its first 65 KiB, a
# redirect is an answer and is not followed, a 401 reads as changed credentials in the report.
DEMO_FIXED: Mapping[Kind, int] = {
    Kind.GONE: 10,
    Kind.DEAD: 8,
    Kind.UNUSABLE_RETRY_AFTER: 5,
    Kind.HUGE_BODY: 10,
    Kind.REDIRECT_PRIVATE: 5,
    Kind.UNAUTHORIZED: 5,
}
DEMO_KINDS: tuple[Kind, ...] = (
    Kind.HEALTHY,
    Kind.SLOW,
    Kind.FLAKY,
    Kind.RATE_LIMITED,
    Kind.GONE,
    Kind.DEAD,
    Kind.UNUSABLE_RETRY_AFTER,
    Kind.HUGE_BODY,
    Kind.REDIRECT_PRIVATE,
    Kind.UNAUTHORIZED,
)
# Per-endpoint settings of the demo endpoints: the rate-limited receiver allows 20/s.
RATE_LIMITED_ENDPOINT_PER_S = 22.0
# Endpoints with a schedule of their own: three attempts over 2 s, so that what can never be
# delivered becomes a dead letter within the demo.
DEAD_ENDPOINT_RETRY_SCHEDULE = (1.0, 1.0)
DEMO_RETRY_SCHEDULES: Mapping[Kind, tuple[float, ...]] = {
    Kind.DEAD: DEAD_ENDPOINT_RETRY_SCHEDULE,
    Kind.UNUSABLE_RETRY_AFTER: DEAD_ENDPOINT_RETRY_SCHEDULE,
}
# The settings of the exponential formula of earlier releases, which also set the schedule.
_FORMULA_SETTINGS = ("TIDINGS_MAX_ATTEMPTS", "TIDINGS_BACKOFF_BASE_S", "TIDINGS_BACKOFF_MAX_S")
DEMO_INTERVALS_S = {
    "percentiles": 5.0,
    "health_monitor": 5.0,
    "dead_letter_report": 60.0,
    "pruner": 60.0,
}


@dataclass(frozen=True, slots=True)
class DemoOptions:
    events: int = 5000
    timeout_s: float = 170.0
    sender_environments: int = 8
    seed: int | None = None
    refresh_s: float = 0.5


@dataclass(frozen=True, slots=True)
class DemoOutcome:
    settled: bool
    elapsed_s: float
    endpoints: list[EndpointProgress]
    names: dict[int, str]
    alerts: list[str]
    report: str


def demo_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """The demo profile under the environment's own settings; never an outside database."""
    env = dict(os.environ if environ is None else environ)
    for name in (
        "DATABASE_URL",
        "TIDINGS_DATABASE_USER",
        "TIDINGS_DATABASE_SECRET_ARN",
        "TIDINGS_SECRETS_KMS_KEY_ID",
        "TIDINGS_SECRETS_KEY_FILE",
    ):
        env.pop(name, None)
    profile = dict(DEMO_SETTINGS)
    if any(name in env for name in _FORMULA_SETTINGS):
        # The environment sets the schedule through the formula: it wins over the demo's.
        profile.pop("TIDINGS_RETRY_SCHEDULE")
    return dev_settings({**profile, **env})


def event_plan(total: int, rng: random.Random) -> list[DemoEvent]:
    """``total`` events, shuffled, for the receiver kinds in the demo's proportions."""
    if total < sum(DEMO_FIXED.values()) + len(DEMO_MIX):
        raise ValueError(
            f"the demo needs at least {sum(DEMO_FIXED.values()) + len(DEMO_MIX)} events"
        )
    counts = dict(DEMO_FIXED)
    rest = total - sum(DEMO_FIXED.values())
    kinds = list(DEMO_MIX)
    for kind in kinds[1:]:
        counts[kind] = int(rest * DEMO_MIX[kind])
    counts[kinds[0]] = rest - sum(counts[k] for k in kinds[1:])
    plan = [
        DemoEvent(
            event_type=f"demo.{kind.value}",
            event_id=str(uuid.UUID(int=rng.getrandbits(128))),
            payload={"kind": kind.value, "n": n, "note": "a demo event"},
        )
        for kind, count in counts.items()
        for n in range(count)
    ]
    rng.shuffle(plan)
    return plan


def run_demo(
    options: DemoOptions,
    out: TextIO,
    report: Callable[[Database, Settings], str],
    functions_dir: Path | None = None,
    serve: Callable[[DemoOutcome, str, TextIO], None] | None = None,
) -> DemoOutcome:
    """Run the demo, drawing progress on ``out``; ``report`` renders the dead-letter report
    from the demo's database before it goes away. Returns how it ended. With ``serve``, the
    runtime is still up when it is called with the outcome and a portal link for the demo's
    application (and ``out``, to write to: the handlers' own output stays in the log), and stops
    when it returns."""
    # The demo's database is always embedded: without the local extra, stop before anything starts.
    embedded_postgres_package()
    workdir = Path(tempfile.mkdtemp(prefix="tidings-demo-"))
    log_stream = (workdir / "runtime.log").open("a", encoding="utf-8")
    quiet_handlers(log_stream)
    receivers = Receivers(DEMO_KINDS, seed=options.seed).start()
    runtime = DevRuntime(
        demo_settings(),
        RuntimeConfig(
            data_dir=workdir,
            port=0,
            sender_environments=options.sender_environments,
            intervals_s=DEMO_INTERVALS_S,
            alerts_stream=None,
            functions_dir=functions_dir,
            drain_timeout_s=5.0,
        ),
    )
    # What the handlers print (EMF metrics, as on Lambda) goes to the log, not over the table.
    redirect = contextlib.redirect_stdout(log_stream)
    redirect.__enter__()
    try:
        out.write(f"starting: embedded PostgreSQL, local queue, receivers, handlers ({workdir})\n")
        out.flush()
        runtime.start()
        db = runtime_database(runtime)
        assert runtime.keyring is not None  # made by start()
        names = create_demo_endpoints(db, receivers, runtime.settings, runtime.keyring)
        plan = event_plan(options.events, random.Random(options.seed))  # noqa: S311
        started = time.monotonic()
        since = datetime.now(UTC)
        for begin in range(0, len(plan), 200):
            send_batch(db, plan[begin : begin + 200])
        api = runtime.api.url if runtime.api is not None else "-"
        out.write(f"sent {len(plan):,} events to {len(names)} endpoints; API at {api}\n\n")
        settled, endpoints = watch(
            db,
            LiveDisplay(out),
            expected=len(plan),
            names=names,
            started=started,
            since=since,
            options=options,
        )
        elapsed = time.monotonic() - started
        report_text = report(db, runtime.settings)
        if serve is not None:
            link = create_link(
                db, DEFAULT_APP_ID, DEFAULT_APP_UID, base_url=runtime.settings.portal_url
            )
            alerts_so_far = read_alerts(runtime.config.alerts_path)
            serve(
                DemoOutcome(settled, elapsed, endpoints, names, alerts_so_far, report_text),
                link.url,
                out,
            )
        db.close()
    finally:
        runtime.stop()
        receivers.stop()
        redirect.__exit__(None, None, None)
        log_stream.close()
    alerts = read_alerts(runtime.config.alerts_path)
    if settled:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        out.write(f"the handlers' logs are kept in {workdir / 'runtime.log'}\n")
    return DemoOutcome(settled, elapsed, endpoints, names, alerts, report_text)


def create_demo_endpoints(
    db: Database, receivers: Receivers, settings: Settings, keyring: Keyring
) -> dict[int, str]:
    """One endpoint per receiver kind, subscribed to ``demo.<kind>``; their names by id."""
    from tidings.logic.endpoints import create_endpoint

    names: dict[int, str] = {}
    for kind in DEMO_KINDS:
        created = create_endpoint(
            db,
            keyring=keyring,
            url=receivers.url(kind),
            description=f"demo {kind.value} receiver",
            event_types=[f"demo.{kind.value}"],
            rate_limit_per_s=RATE_LIMITED_ENDPOINT_PER_S if kind is Kind.RATE_LIMITED else None,
            retry_schedule=DEMO_RETRY_SCHEDULES.get(kind),
            settings=settings,
        )
        receivers.register_secret(kind, created.secret)
        names[created.id] = kind.value
    return names


def watch(
    db: Database,
    display: LiveDisplay,
    *,
    expected: int,
    names: dict[int, str],
    started: float,
    since: datetime,
    options: DemoOptions,
) -> tuple[bool, list[EndpointProgress]]:
    """Draw progress until nothing is left to settle or the timeout passes; latency figures
    cover the attempts made since ``since``."""
    while True:
        elapsed = time.monotonic() - started
        endpoints = db.run(lambda cur: endpoint_progress(cur, since))
        settled = db.run(unsettled_messages) == 0
        if settled or elapsed > options.timeout_s:
            display.show(render(endpoints, expected, elapsed, names), final=True)
            return settled, endpoints
        display.show(render(endpoints, expected, elapsed, names))
        time.sleep(options.refresh_s)


def send_batch(db: Database, events: list[DemoEvent]) -> int:
    return db.run(lambda cur: enqueue_events(cur, events), transaction=True)


def runtime_database(runtime: DevRuntime) -> Database:
    return Database(runtime.settings.database_url)


def quiet_handlers(stream: TextIO) -> None:
    """Send the handlers' structured logs to ``stream`` (their EMF metrics are printed to
    standard output, which the demo redirects while it runs)."""
    handler = logger.registered_handler
    if isinstance(handler, logging.StreamHandler):
        handler.setStream(stream)


def read_alerts(path: Path) -> list[str]:
    import json

    if not path.exists():
        return []
    return [
        json.loads(line)["subject"]
        for line in path.read_text(encoding="utf-8").splitlines()
        if line
    ]
