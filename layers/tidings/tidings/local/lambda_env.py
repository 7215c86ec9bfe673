"""What AWS hands a handler: the context object and the events of each trigger.

Handlers are the modules of ``tidings.handlers``, found in the installed package whatever the
working directory, and loaded the way Lambda loads an entry point: by file, once per execution
environment. ``--functions-dir`` / ``TIDINGS_FUNCTIONS_DIR`` name a folder of stand-in handlers
instead (``<folder>/<name>/app.py``, each a whole handler: the tests' fakes, say).
"""

from __future__ import annotations

import base64
import importlib.util
import os
import pkgutil
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import Any
from urllib.parse import parse_qsl

import tidings.handlers
from tidings.observability import logger

REGION = "us-east-1"
ACCOUNT = "000000000000"
STAGE = "local"
FUNCTIONS_DIR_ENV = "TIDINGS_FUNCTIONS_DIR"
HANDLERS_PACKAGE = "tidings.handlers"

Handler = Callable[[dict[str, Any], Any], Any]


class HandlerNotFound(LookupError):
    """A function's handler module or its ``handler`` is missing; the message names which."""


class LambdaContext:
    """The context object of one invocation, with a deadline that can be brought forward.

    ``expire`` ends the invocation early (shutdown): a handler that loops while
    ``get_remaining_time_in_millis`` is high stops at its next check.
    """

    def __init__(self, function_name: str, timeout_s: float, memory_limit_in_mb: int = 512):
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.memory_limit_in_mb = memory_limit_in_mb
        self.invoked_function_arn = f"arn:aws:lambda:{REGION}:{ACCOUNT}:function:{function_name}"
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = f"local/{threading.current_thread().name}"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))

    def expire(self) -> None:
        self._deadline = time.monotonic()


def scheduled_event(rule_name: str, now: datetime | None = None) -> dict[str, Any]:
    """The event EventBridge sends a function on a schedule."""
    moment = now or datetime.now(UTC)
    return {
        "version": "0",
        "id": str(uuid.uuid4()),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": ACCOUNT,
        "time": moment.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": REGION,
        "resources": [f"arn:aws:events:{REGION}:{ACCOUNT}:rule/{rule_name}"],
        "detail": {},
    }


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes
    source_ip: str = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes = field(repr=False)


def api_gateway_event(request: HttpRequest, stage: str = STAGE) -> dict[str, Any]:
    """The REST API (v1) proxy event API Gateway builds for ``request`` on ``/{proxy+}``."""
    path, _, query = request.target.partition("?")
    path = path or "/"
    pairs = parse_qsl(query, keep_blank_values=True)
    multi_query: dict[str, list[str]] = {}
    for name, value in pairs:
        multi_query.setdefault(name, []).append(value)
    multi_headers: dict[str, list[str]] = {}
    for name, value in request.headers:
        multi_headers.setdefault(name, []).append(value)
    body, is_base64 = _event_body(request.body)
    now_ms = int(time.time() * 1000)
    request_id = str(uuid.uuid4())
    user_agent = next((v for n, v in request.headers if n.lower() == "user-agent"), None)
    return {
        "resource": "/{proxy+}",
        "path": path,
        "httpMethod": request.method,
        "headers": {name: values[-1] for name, values in multi_headers.items()} or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": {name: values[-1] for name, values in multi_query.items()} or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": path.lstrip("/")} if path != "/" else None,
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT,
            "apiId": "local",
            "resourceId": "proxy",
            "resourcePath": "/{proxy+}",
            "httpMethod": request.method,
            "path": f"/{stage}{path}",
            "stage": stage,
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "extendedRequestId": request_id,
            "requestTime": datetime.fromtimestamp(now_ms / 1000, UTC).strftime(
                "%d/%b/%Y:%H:%M:%S +0000"
            ),
            "requestTimeEpoch": now_ms,
            "domainName": "127.0.0.1",
            "identity": {"sourceIp": request.source_ip, "userAgent": user_agent},
        },
        "body": body,
        "isBase64Encoded": is_base64,
    }


def _event_body(raw: bytes) -> tuple[str | None, bool]:
    if not raw:
        return None, False
    try:
        return raw.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), True


def http_response(result: Mapping[str, Any]) -> HttpResponse:
    """The HTTP answer API Gateway makes of a proxy integration's result."""
    if not isinstance(result, Mapping) or "statusCode" not in result:
        raise ValueError("a proxy integration must return a mapping with statusCode")
    status = int(result["statusCode"])
    headers: list[tuple[str, str]] = []
    for name, value in (result.get("headers") or {}).items():
        headers.append((str(name), str(value)))
    single = {name.lower() for name, _ in headers}
    for name, values in (result.get("multiValueHeaders") or {}).items():
        if name.lower() in single:
            continue
        headers.extend((str(name), str(value)) for value in values)
    raw_body = result.get("body") or ""
    if result.get("isBase64Encoded"):
        body = base64.b64decode(raw_body)
    else:
        body = str(raw_body).encode("utf-8")
    return HttpResponse(status=status, headers=tuple(headers), body=body)


def configured_functions_dir() -> Path | None:
    """The folder of stand-in handlers named by ``TIDINGS_FUNCTIONS_DIR``, if any."""
    configured = os.environ.get(FUNCTIONS_DIR_ENV)
    return Path(configured) if configured else None


def handler_names() -> list[str]:
    """The functions whose handlers the package holds (``tidings.handlers.<name>``)."""
    return sorted(found.name for found in pkgutil.iter_modules(tidings.handlers.__path__))


def handler_path(name: str, functions_dir: Path | None = None) -> Path:
    """The file that holds the handler of function ``name``: ``<functions_dir>/<name>/app.py``
    when a folder of stand-ins is given (or configured), else the package's own module."""
    folder = functions_dir or configured_functions_dir()
    if folder is not None:
        path = folder / name / "app.py"
        if not path.is_file():
            raise HandlerNotFound(
                f"no Lambda entry point at {path} (the folder of stand-in handlers comes from "
                f"--functions-dir or {FUNCTIONS_DIR_ENV}; without either, the package's own "
                "handlers run)"
            )
        return path
    known = handler_names()
    if name not in known:
        raise HandlerNotFound(f"no function is named {name!r} (the functions: {', '.join(known)})")
    spec = importlib.util.find_spec(f"{HANDLERS_PACKAGE}.{name}")
    if spec is None or spec.origin is None or not Path(spec.origin).is_file():
        # Lambda loads an entry point from a file, and so does this (a zipped install has none).
        raise HandlerNotFound(
            f"{HANDLERS_PACKAGE}.{name} is not a file of the installed tidings package; "
            "install tidings as a wheel (pip install tidings) to run its handlers"
        )
    return Path(spec.origin)


def handler_module(
    name: str, functions_dir: Path | None = None, *, module_name: str | None = None
) -> ModuleType:
    """The handler module of function ``name``, loaded from its file as a new module (named
    ``module_name``), as a Lambda execution environment imports its entry point: its top level
    runs now (reading the settings), and its module-level state is its own."""
    path = handler_path(name, functions_dir)
    spec = importlib.util.spec_from_file_location(module_name or f"tidings_function_{name}", path)
    if spec is None or spec.loader is None:
        raise HandlerNotFound(f"cannot load {path} as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_handler(name: str, functions_dir: Path | None = None, *, environment: int = 0) -> Handler:
    """``handler`` of function ``name`` (see ``handler_path``), loaded as Lambda loads it.

    Each ``environment`` number gets a module of its own, as each Lambda execution environment
    imports the entry point once: module-level state (a batch processor, say) is never shared
    between simulated environments running on different threads.
    """
    module = handler_module(
        name, functions_dir, module_name=f"tidings_function_{name}_{environment}"
    )
    handler = getattr(module, "handler", None)
    if not callable(handler):
        raise HandlerNotFound(f"{module.__file__} defines no callable 'handler'")
    return _with_own_log_keys(handler)


def _with_own_log_keys(handler: Handler) -> Handler:
    """``handler``, naming its own invocation in the log lines its thread writes.

    Powertools' ``inject_lambda_context`` puts the function's name and request id on the one
    logger every function shares; on Lambda a process runs one function, here several run on
    threads at once, and a line would carry whichever function was invoked last. Keys of the
    thread's own context take precedence over those.
    """

    def invoke(event: Any, context: Any) -> Any:
        keys = {
            "function_name": context.function_name,
            "function_request_id": context.aws_request_id,
            "function_arn": context.invoked_function_arn,
            "function_memory_size": context.memory_limit_in_mb,
        }
        logger.thread_safe_append_keys(**keys)
        try:
            return handler(event, context)
        finally:
            logger.thread_safe_remove_keys(list(keys))

    return invoke
