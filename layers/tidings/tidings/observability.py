"""The one Logger, Tracer and Metrics that every module and handler shares.

Service name and metric namespace come from the standard Powertools variables
(``POWERTOOLS_SERVICE_NAME``, ``POWERTOOLS_METRICS_NAMESPACE``); the defaults keep local runs quiet
about missing configuration.

The Tracer is made on first use (``from tidings.observability import tracer``): making it imports
the X-Ray SDK, which the Lambda handlers need and the ``tidings`` command line does not.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from typing import TYPE_CHECKING, TextIO

from aws_lambda_powertools import Logger, Metrics

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "tidings")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Tidings")

logger = Logger(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=NAMESPACE)


@functools.cache
def _tracer() -> Tracer:
    from aws_lambda_powertools import Tracer

    return Tracer(service=SERVICE)


def __getattr__(name: str) -> Tracer:
    if name == "tracer":
        return _tracer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def send_logs_to(stream: TextIO) -> TextIO | None:
    """Write the structured logs to ``stream`` (on Lambda they go to standard output); returns
    the stream they went to before."""
    handler = logger.registered_handler
    if not isinstance(handler, logging.StreamHandler):
        return None
    previous: TextIO = handler.stream
    if getattr(previous, "closed", False):
        # setStream flushes the stream it replaces, which fails on a closed one (a command that
        # sent the logs to a file of its own and closed it).
        with handler.lock or contextlib.nullcontext():
            handler.stream = stream
        return previous
    return handler.setStream(stream)
