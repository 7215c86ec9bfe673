"""The application's own log lines, as Powertools writes them (JSON with every extra field)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

from tidings.observability import logger


@contextmanager
def captured_app_log() -> Iterator[io.StringIO]:
    """Everything the shared logger writes while the block runs, formatted as on Lambda."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logger.registered_formatter)
    logger.addHandler(handler)
    try:
        yield stream
    finally:
        logger.removeHandler(handler)
