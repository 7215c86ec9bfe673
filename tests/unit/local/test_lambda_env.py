"""The events and context the local runtime hands handlers, shaped as AWS shapes them."""

from __future__ import annotations

import base64
import io
import json
import logging
import threading
import time
from pathlib import Path

import pytest

import tidings.handlers
from tidings.local.lambda_env import (
    HandlerNotFound,
    HttpRequest,
    LambdaContext,
    api_gateway_event,
    handler_module,
    handler_path,
    http_response,
    load_handler,
    scheduled_event,
)
from tidings.observability import logger


def test_context_counts_down_and_can_be_cut_short() -> None:
    context = LambdaContext("tidings-claimer", 5.0)
    assert 4000 < context.get_remaining_time_in_millis() <= 5000
    assert context.invoked_function_arn.endswith(":function:tidings-claimer")
    assert context.memory_limit_in_mb == 512
    assert context.aws_request_id != LambdaContext("x", 1).aws_request_id
    context.expire()
    assert context.get_remaining_time_in_millis() == 0


def test_context_never_reports_negative_time() -> None:
    context = LambdaContext("f", 0.001)
    time.sleep(0.01)
    assert context.get_remaining_time_in_millis() == 0


def test_scheduled_event_is_an_eventbridge_event() -> None:
    event = scheduled_event("tidings-pruner")
    assert event["detail-type"] == "Scheduled Event"
    assert event["source"] == "aws.events"
    assert event["resources"][0].endswith(":rule/tidings-pruner")
    assert event["time"].endswith("Z")


def test_proxy_event_from_a_request_with_query_and_repeated_headers() -> None:
    request = HttpRequest(
        method="POST",
        target="/v1/events?limit=5&tag=a&tag=b&empty=",
        headers=(("Content-Type", "application/json"), ("X-Tag", "1"), ("X-Tag", "2")),
        body=b'{"a": 1}',
    )
    event = api_gateway_event(request, stage="dev")
    assert event["httpMethod"] == "POST"
    assert event["path"] == "/v1/events"
    assert event["queryStringParameters"] == {"limit": "5", "tag": "b", "empty": ""}
    assert event["multiValueQueryStringParameters"]["tag"] == ["a", "b"]
    assert event["headers"]["X-Tag"] == "2"
    assert event["multiValueHeaders"]["X-Tag"] == ["1", "2"]
    assert event["pathParameters"] == {"proxy": "v1/events"}
    assert event["body"] == '{"a": 1}'
    assert event["isBase64Encoded"] is False
    assert event["requestContext"]["stage"] == "dev"
    assert event["requestContext"]["path"] == "/dev/v1/events"
    assert event["requestContext"]["identity"]["sourceIp"] == "127.0.0.1"


def test_proxy_event_without_body_or_query() -> None:
    event = api_gateway_event(HttpRequest("GET", "/", (), b""))
    assert event["body"] is None
    assert event["queryStringParameters"] is None
    assert event["headers"] is None
    assert event["pathParameters"] is None


def test_binary_bodies_travel_base64_encoded() -> None:
    raw = b"\xff\xfe\x00binary"
    event = api_gateway_event(HttpRequest("PUT", "/blob", (), raw))
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == raw


def test_response_headers_body_and_base64() -> None:
    response = http_response(
        {
            "statusCode": 202,
            "headers": {"Content-Type": "text/plain"},
            "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"], "content-type": ["x"]},
            "body": base64.b64encode(b"\x00\x01").decode(),
            "isBase64Encoded": True,
        }
    )
    assert response.status == 202
    assert response.body == b"\x00\x01"
    assert ("Set-Cookie", "a=1") in response.headers
    assert ("Set-Cookie", "b=2") in response.headers
    # A single-value header wins over the multi-value one of the same name.
    assert [v for n, v in response.headers if n.lower() == "content-type"] == ["text/plain"]


def test_response_without_status_code_is_refused() -> None:
    with pytest.raises(ValueError, match="statusCode"):
        http_response({"body": "x"})


def test_handlers_load_from_their_files(tmp_path: Path) -> None:
    (tmp_path / "echo").mkdir()
    (tmp_path / "echo" / "app.py").write_text("def handler(event, context):\n    return event\n")
    handler = load_handler("echo", tmp_path)
    assert handler({"a": 1}, LambdaContext("echo", 1)) == {"a": 1}


def test_missing_handler_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(HandlerNotFound, match=r"nothing/app\.py"):
        load_handler("nothing", tmp_path)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "app.py").write_text("x = 1\n")
    with pytest.raises(HandlerNotFound, match="no callable 'handler'"):
        load_handler("empty", tmp_path)


def test_handlers_come_from_the_package_whatever_the_working_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("TIDINGS_FUNCTIONS_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    package = Path(tidings.handlers.__file__).parent
    assert handler_path("sender") == package / "sender.py"
    page = load_handler("portal")({"path": "/portal"}, LambdaContext("tidings-portal", 3))
    assert page["statusCode"] == 200 and "<html" in page["body"].lower()


def test_each_execution_environment_loads_a_module_of_its_own() -> None:
    first = handler_module("portal", module_name="portal_environment_1")
    second = handler_module("portal", module_name="portal_environment_2")
    assert first is not second and first.handler is not second.handler
    assert first.__file__ == second.__file__


def test_a_folder_of_stand_ins_replaces_the_packages_handlers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    configured, given = tmp_path / "configured", tmp_path / "given"
    for folder in (configured, given):
        (folder / "sender").mkdir(parents=True)
        (folder / "sender" / "app.py").write_text("def handler(event, context):\n    return 1\n")
    monkeypatch.setenv("TIDINGS_FUNCTIONS_DIR", str(configured))
    assert handler_path("sender") == configured / "sender" / "app.py"
    assert handler_path("sender", given) == given / "sender" / "app.py"


def test_an_unknown_function_is_refused_with_the_known_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("TIDINGS_FUNCTIONS_DIR", raising=False)
    with pytest.raises(HandlerNotFound, match=r"no function is named 'sendr' \(the functions: "):
        load_handler("sendr")


def test_functions_running_at_once_each_name_themselves_in_their_log_lines(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "speaker"
    folder.mkdir()
    (folder / "app.py").write_text(
        "from tidings.observability import logger\n"
        "\n"
        "@logger.inject_lambda_context\n"
        "def handler(event, context):\n"
        "    event['entered'].set()\n"
        "    event['go_on'].wait(5)\n"
        "    logger.info('spoke')\n"
    )
    handler = load_handler("speaker", tmp_path)
    lines = io.StringIO()
    capture = logging.StreamHandler(lines)
    capture.setFormatter(logger.registered_formatter)
    logger.addHandler(capture)
    try:
        first = {"entered": threading.Event(), "go_on": threading.Event()}
        worker = threading.Thread(target=handler, args=(first, LambdaContext("fn-first", 10)))
        worker.start()
        assert first["entered"].wait(5)
        # Another function is invoked while the first one is still running; it finishes first.
        second = {"entered": threading.Event(), "go_on": threading.Event()}
        second["go_on"].set()
        handler(second, LambdaContext("fn-second", 10))
        first["go_on"].set()
        worker.join(5)
    finally:
        logger.removeHandler(capture)
    spoken = [json.loads(line) for line in lines.getvalue().splitlines() if "spoke" in line]
    assert [entry["function_name"] for entry in spoken] == ["fn-second", "fn-first"]
