"""The Lambda entry point answers API Gateway events with the resolver's routes."""

from __future__ import annotations

import json
from dataclasses import dataclass

from functions.ingest.app import handler
from tests.integration.api.conftest import PUBLIC_URL, Api, api_event


@dataclass
class FakeContext:
    function_name: str = "tidings-ingest"
    memory_limit_in_mb: int = 256
    invoked_function_arn: str = "arn:aws:lambda:eu-west-1:123456789012:function:tidings-ingest"
    aws_request_id: str = "req-1"


def test_handler_routes_through_powertools(api: Api) -> None:
    response = handler(api_event("POST", "/v1/endpoints", {"url": PUBLIC_URL}), FakeContext())
    assert response["statusCode"] == 201
    assert json.loads(response["body"])["secret"].startswith("whsec_")
    missing = handler(api_event("GET", "/v1/endpoints/77"), FakeContext())
    assert missing["statusCode"] == 404


def test_secrets_are_never_logged(api: Api, capsys) -> None:
    created = handler(api_event("POST", "/v1/endpoints", {"url": PUBLIC_URL}), FakeContext())
    endpoint_id = json.loads(created["body"])["id"]
    rotated = handler(
        api_event("POST", f"/v1/endpoints/{endpoint_id}/rotate-secret"), FakeContext()
    )
    secrets = [json.loads(created["body"])["secret"], json.loads(rotated["body"])["secret"]]
    handler(api_event("GET", f"/v1/endpoints/{endpoint_id}"), FakeContext())
    logged = capsys.readouterr()
    for secret in secrets:
        assert secret not in logged.out and secret not in logged.err
