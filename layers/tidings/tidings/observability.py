"""The one Logger, Tracer and Metrics that every module and handler shares.

Service name and metric namespace come from the standard Powertools variables
(``POWERTOOLS_SERVICE_NAME``, ``POWERTOOLS_METRICS_NAMESPACE``); the defaults keep local runs quiet
about missing configuration.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Metrics, Tracer

SERVICE = os.environ.get("POWERTOOLS_SERVICE_NAME", "tidings")
NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "Tidings")

logger = Logger(service=SERVICE)
tracer = Tracer(service=SERVICE)
metrics = Metrics(service=SERVICE, namespace=NAMESPACE)
