"""The client is written by hand and held to ``openapi.json``: every operation of the document
has a client method, every request a method sends is an operation of the document (its method,
path, query parameters and body fields), and every answer type has the fields of its schema.
Also: the client imports nothing but ``requests`` (the standard library aside)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from requests.adapters import BaseAdapter

from tidings import client as package
from tidings.client import Client, EventToSend, models

ROOT = Path(__file__).resolve().parents[3]
DOCUMENT = json.loads((ROOT / "openapi.json").read_text(encoding="utf-8"))
API = "https://api.example/prod"
# A value for each parameter a method requires, by its name.
SAMPLES: dict[str, Any] = {
    "endpoint_id": 7,
    "message_id": 8,
    "token_id": 9,
    "app": "acme",
    "uid": "acme",
    "event_type": "order.paid",
    "payload": {"id": 1},
    "filter": {"id": {"$gt": 0}},
    "events": [EventToSend("order.paid", {"id": 1}, "order-1", ordering_key="cus_1")],
    "url": "https://receiver.example/hook",
    "scope": "producer",
    "since": datetime(2026, 1, 1, tzinfo=UTC),
    "name": "order.paid",
    "version": 2,
    "document": {"openapi": "3.1.0", "webhooks": {}},
}
# Optional arguments too, so that every query parameter and body field is sent once.
EVERYTHING: dict[str, dict[str, Any]] = {
    "list_messages": {
        "status": "dead_letter",
        "endpoint_id": 7,
        "event_type": "order.paid",
        "since": datetime(2026, 1, 1, tzinfo=UTC),
        "until": datetime(2026, 1, 2, tzinfo=UTC),
        "cursor": "abc",
        "limit": 10,
    },
    "send_event": {
        "event_id": "e-1",
        "endpoint_ids": [7],
        "channels": ["eu"],
        "ordering_key": "cus_1",
    },
    "create_endpoint": {
        "event_types": ["*"],
        "description": "d",
        "rate_limit_per_s": 2.0,
        "retry_schedule": [5, 60],
        "timeout_ms": 1000,
        "payload_format": "raw",
        "max_in_flight": 3,
        "headers": {"X-Key": "v"},
        "auth": {"type": "bearer", "token": "t"},
        "tls_client_certificate": {"certificate_pem": "c", "private_key_pem": "k"},
        "tls_server_ca_pem": "ca",
        "max_attempts": 3,
        "filter": {"a": 1},
        "channels": ["eu"],
        "ordering": "fifo",
        "fifo_batch_size": 10,
        "fifo_on_dead_letter": "pause",
    },
    "update_endpoint": {
        "url": "https://receiver.example/other",
        "description": "d",
        "event_types": ["a"],
        "enabled": False,
        "rate_limit_per_s": None,
        "retry_schedule": None,
        "timeout_ms": None,
        "payload_format": "envelope",
        "max_in_flight": None,
        "headers": None,
        "auth": None,
        "tls_client_certificate": None,
        "tls_server_ca_pem": None,
        "max_attempts": None,
        "filter": None,
        "channels": ["eu"],
        "ordering": "fifo",
        "fifo_batch_size": None,
        "fifo_on_dead_letter": "continue",
    },
    "recover_endpoint": {"until": datetime(2026, 1, 2, tzinfo=UTC)},
    "list_lines": {"paused": True, "cursor": "abc", "limit": 10},
    "iter_lines": {"paused": True},
    "resume_lines": {"ordering_keys": ["cus_1", None]},
    "replay_dead_letters": {
        "message_ids": [8],
        "endpoint_id": 7,
        "since": datetime(2026, 1, 1, tzinfo=UTC),
        "until": datetime(2026, 1, 2, tzinfo=UTC),
    },
    "create_portal_link": {"read_only": True, "expires_in_s": 60},
    "create_application": {"name": "Acme", "metadata": {"plan": "pro"}},
    "update_application": {"name": "A", "metadata": {}, "default_payload_format": None},
    "create_token": {
        "application": "acme",
        "description": "d",
        "expires_at": datetime(2030, 1, 1, tzinfo=UTC),
    },
    "list_endpoints": {"cursor": "abc", "limit": 5},
    "list_applications": {"cursor": "abc", "limit": 5},
    "list_tokens": {"cursor": "abc", "limit": 5},
    "create_event_type": {
        "description": "d",
        "schema": {"type": "object"},
        "examples": [{}],
        "deprecated": False,
        "archived": False,
        "validate_payloads": False,
    },
    "list_event_types": {"cursor": "abc", "limit": 5, "include_archived": True},
    "update_event_type": {
        "description": "d",
        "schema": None,
        "examples": [],
        "deprecated": True,
        "archived": True,
        "validate_payloads": False,
    },
    "deployment_dead_letters": {"window_s": 600},
    "application_dead_letters": {"window_s": 600},
}


class Sent(Exception):
    """Raised by the recording transport once it has seen a request."""


class Recording(BaseAdapter):
    """A transport that records each request and answers none."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[requests.PreparedRequest] = []

    def send(self, request: requests.PreparedRequest, **kwargs: Any) -> requests.Response:
        self.requests.append(request)
        raise Sent

    def close(self) -> None:
        pass


def recording_client(app: str | None = None) -> tuple[Client, Recording]:
    client = Client(API, "tdg_" + "x" * 43, app=app)
    recording = Recording()
    for session in (client._safe, client._once):
        session.mount("https://", recording)
    return client, recording


def _methods() -> list[tuple[str, Callable[..., Any]]]:
    return [
        (name, member)
        for name, member in inspect.getmembers(Client, inspect.isfunction)
        if not name.startswith("_") and name not in ("from_env", "in_app", "close")
    ]


def _call(client: Client, name: str) -> None:
    method = getattr(client, name)
    required = {
        p.name: SAMPLES[p.name]
        for p in inspect.signature(method).parameters.values()
        if p.default is inspect.Parameter.empty and p.kind is not p.VAR_KEYWORD
    }
    with pytest.raises(Sent):
        result = method(**required, **EVERYTHING.get(name, {}))
        if isinstance(result, Iterator):
            next(result)


def _template(path: str) -> re.Pattern[str]:
    return re.compile(re.sub(r"\\\{[^}]+\\\}", "[^/]+", re.escape(path)))


OPERATIONS = {
    op["operationId"]: (method.upper(), path, op)
    for path, ops in DOCUMENT["paths"].items()
    for method, op in ops.items()
}


def _operation_of(request: requests.PreparedRequest) -> str:
    parts = urlsplit(str(request.url))
    path = parts.path.removeprefix(urlsplit(API).path)
    found = [
        op_id
        for op_id, (method, template, _) in OPERATIONS.items()
        if method == request.method and _template(template).fullmatch(path)
    ]
    assert found, f"{request.method} {path} is no operation of the document"
    # A literal path wins over a template (/v1/apps/{app} would also match /v1/apps/acme).
    (chosen,) = sorted(found, key=lambda op_id: OPERATIONS[op_id][1].count("{"))[:1]
    return chosen


def _schema(ref_or_schema: dict[str, Any]) -> dict[str, Any]:
    ref = ref_or_schema.get("$ref")
    if ref is None:
        return ref_or_schema
    return dict(DOCUMENT["components"]["schemas"][ref.rsplit("/", 1)[1]])


def _sent_requests() -> dict[str, list[requests.PreparedRequest]]:
    sent: dict[str, list[requests.PreparedRequest]] = {}
    for app in (None, "acme"):
        client, recording = recording_client(app)
        for name, _ in _methods():
            _call(client, name)
        for request in recording.requests:
            sent.setdefault(_operation_of(request), []).append(request)
    return sent


def test_every_operation_of_the_document_has_a_method_and_every_request_is_one() -> None:
    sent = _sent_requests()
    assert set(sent) == set(OPERATIONS), sorted(set(OPERATIONS) ^ set(sent))


def test_every_query_parameter_and_body_field_sent_is_documented() -> None:
    for operation, requests_sent in _sent_requests().items():
        _, _, documented = OPERATIONS[operation]
        parameters = {p["name"] for p in documented.get("parameters", []) if p["in"] == "query"}
        body = documented.get("requestBody", {}).get("content", {}).get("application/json")
        fields = set(_schema(body["schema"]).get("properties", {})) if body else set()
        for request in requests_sent:
            query = set(parse_qs(urlsplit(str(request.url)).query))
            assert query <= parameters, (operation, query - parameters)
            if request.body is None:
                continue
            sent = json.loads(request.body)
            assert body is not None, operation
            assert set(sent) <= fields, (operation, set(sent) - fields)


def test_every_answer_type_has_the_fields_of_its_schema() -> None:
    """Each dataclass named like a schema has its properties, in its order, and requires just
    those the schema requires."""
    schemas = DOCUMENT["components"]["schemas"]
    answered = {
        _schema(answer["content"]["application/json"]["schema"])["title"]
        for _, _, op in OPERATIONS.values()
        for status, answer in op["responses"].items()
        if status.startswith("2") and answer.get("content")
    }
    compared = set()
    for name in models.__all__:
        kind = getattr(models, name)
        if name not in schemas:
            continue
        schema = schemas[name]
        fields = dataclasses.fields(kind)
        assert [f.name for f in fields] == list(schema["properties"]), name
        required = set(schema.get("required", []))
        for field in fields:
            has_default = field.default is not dataclasses.MISSING
            assert has_default == (field.name not in required), (name, field.name)
        compared.add(name)
    # Every answer of the API, and what it holds, has its type.
    assert answered <= compared, sorted(answered - compared)
    assert len(compared) >= 28


def test_the_answers_types_are_exported_from_the_package() -> None:
    for name in models.__all__:
        assert getattr(package, name) is getattr(models, name)


def test_the_api_url_may_be_the_stack_output_or_the_address_before_it() -> None:
    for given in (
        "https://abc.execute-api.eu-west-1.amazonaws.com/prod/v1/",
        "https://abc.execute-api.eu-west-1.amazonaws.com/prod/v1",
        "https://abc.execute-api.eu-west-1.amazonaws.com/prod/",
    ):
        assert (
            Client(given, "tdg_x").api_url == "https://abc.execute-api.eu-west-1.amazonaws.com/prod"
        )
    for wrong in ("ftp://host/", "api.example.com", "https://host/?a=1"):
        with pytest.raises(ValueError, match="http"):
            Client(wrong, "tdg_x")


def test_the_token_is_never_in_a_repr() -> None:
    token = "tdg_" + "s3cr3t" * 7 + "x"
    client = Client(API, token, app="acme")
    assert token not in repr(client) and token not in repr(client._safe.auth)
    assert repr(client) == "Client('https://api.example/prod', app='acme')"


def test_from_env_reads_the_variables_the_command_line_reads() -> None:
    client = Client.from_env({"TIDINGS_API_URL": API + "/v1/", "TIDINGS_TOKEN": "tdg_x"})
    assert client.api_url == API
    with pytest.raises(ValueError, match="TIDINGS_TOKEN"):
        Client.from_env({"TIDINGS_API_URL": API})


def test_in_app_acts_in_another_application_over_the_same_connections() -> None:
    client, recording = recording_client()
    acme = client.in_app("acme")
    assert acme.app == "acme" and client.app is None
    for target in (client, acme, acme.in_app(None)):
        with pytest.raises(Sent):
            target.get_endpoint(3)
    paths = [urlsplit(str(r.url)).path for r in recording.requests]
    assert paths == [
        "/prod/v1/endpoints/3",
        "/prod/v1/apps/acme/endpoints/3",
        "/prod/v1/endpoints/3",
    ]


def test_an_application_reference_is_one_path_segment() -> None:
    client, recording = recording_client()
    with pytest.raises(Sent):
        client.get_application("a/b?c")
    assert urlsplit(str(recording.requests[0].url)).path == "/prod/v1/apps/a%2Fb%3Fc"


def test_the_client_needs_nothing_but_requests() -> None:
    """Imported and used (up to the network) with the server's packages impossible to import."""
    probe = """
import importlib.abc, sys
HEAVY = ("boto3", "botocore", "psycopg2", "aws_lambda_powertools", "aws_xray_sdk", "pydantic")
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HEAVY:
            raise ImportError(f"{name} may not be imported here")
sys.meta_path.insert(0, Refuse())
from tidings.client import Client, NotFound, EventToSend
client = Client("http://127.0.0.1:9", "tdg_x", retries=0)
print(sorted({m.split(".")[0] for m in sys.modules if m.split(".")[0] in HEAVY}))
"""
    environ = {**os.environ, "PYTHONPATH": str(ROOT / "layers" / "tidings")}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=environ,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
