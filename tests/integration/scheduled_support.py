"""Helpers for the scheduled jobs' tests: attempts at chosen times and handlers by file."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from types import ModuleType

from tidings.dal.connection import Cursor

ROOT = Path(__file__).resolve().parents[2]


def load_handler(function: str) -> ModuleType:
    """``functions/<function>/app.py`` as a module of its own name."""
    path = ROOT / "functions" / function / "app.py"
    spec = importlib.util.spec_from_file_location(f"function_{function}_app", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def insert_attempts(
    cur: Cursor,
    endpoint_id: int,
    attempted_at: Sequence[datetime],
    response_ms: Sequence[int | None],
    *,
    status_code: int | None = 200,
    error_class: str | None = None,
) -> None:
    """Attempts of one endpoint at the given times with the given latencies."""
    assert len(attempted_at) == len(response_ms)
    cur.execute(
        """
        INSERT INTO tidings.attempts (message_id, endpoint_id, attempt_number, attempted_at,
                                      status_code, response_ms, error_class)
        SELECT 0, %(endpoint_id)s, 1, t, %(status_code)s, ms, %(error_class)s
        FROM unnest(%(times)s::timestamptz[], %(ms)s::integer[]) AS a(t, ms)
        """,
        {
            "endpoint_id": endpoint_id,
            "times": list(attempted_at),
            "ms": list(response_ms),
            "status_code": status_code,
            "error_class": error_class,
        },
    )


class LambdaContext:
    """The parts of a Lambda context the Powertools decorators read."""

    function_name = "tidings-test"
    function_version = "$LATEST"
    memory_limit_in_mb = 256
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:tidings-test"
    aws_request_id = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return 60_000
