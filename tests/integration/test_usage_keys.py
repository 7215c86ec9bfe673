"""One API Gateway API key per token, in the API's usage plan, against moto's API Gateway."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from tests.integration.maintenance.scheduled_support import aws_test_environment
from tidings.usage_keys import ApiGatewayUsageKeys, NoUsageKeys

PLAN = "tidings-test"


@pytest.fixture
def apigateway(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    aws_test_environment(monkeypatch)
    with mock_aws():
        client = boto3.client("apigateway")
        api = client.create_rest_api(name="tidings")["id"]
        root = client.get_resources(restApiId=api)["items"][0]["id"]
        client.put_method(
            restApiId=api, resourceId=root, httpMethod="GET", authorizationType="NONE"
        )
        client.put_integration(restApiId=api, resourceId=root, httpMethod="GET", type="MOCK")
        client.create_deployment(restApiId=api, stageName="test")
        client.create_usage_plan(name="someone-else", apiStages=[])
        client.create_usage_plan(name=PLAN, apiStages=[{"apiId": api, "stage": "test"}])
        yield client


def _plan_keys(client: Any) -> list[str]:
    plan = next(p for p in client.get_usage_plans()["items"] if p["name"] == PLAN)
    return sorted(k["name"] for k in client.get_usage_plan_keys(usagePlanId=plan["id"])["items"])


def test_each_token_gets_its_own_key_in_the_plan_once(apigateway: Any) -> None:
    keys = ApiGatewayUsageKeys(PLAN, apigateway)
    first = keys.ensure("token-7")
    assert keys.value_for("token-7") == "tidings-test-token-7"
    (made,) = apigateway.get_api_keys(includeValues=True)["items"]
    assert (made["id"], made["name"], made["value"], made["enabled"]) == (
        first,
        "tidings-test-token-7",
        "tidings-test-token-7",
        True,
    )
    # Again (another invocation made it meanwhile): the same key, nothing added.
    assert ApiGatewayUsageKeys(PLAN, apigateway).ensure("token-7") == first
    keys.ensure("token-8")
    assert len(apigateway.get_api_keys()["items"]) == 2
    assert _plan_keys(apigateway) == ["tidings-test-token-7", "tidings-test-token-8"]


def test_a_key_made_but_not_added_to_the_plan_is_added(apigateway: Any) -> None:
    apigateway.create_api_key(
        name="tidings-test-token-3", value="tidings-test-token-3", enabled=True
    )
    ApiGatewayUsageKeys(PLAN, apigateway).ensure("token-3")
    assert _plan_keys(apigateway) == ["tidings-test-token-3"]


def test_a_missing_usage_plan_is_named(apigateway: Any) -> None:
    with pytest.raises(LookupError, match="no usage plan named tidings-nowhere"):
        ApiGatewayUsageKeys("tidings-nowhere", apigateway).ensure("token-1")


def test_without_a_usage_plan_no_key_is_named() -> None:
    assert NoUsageKeys().ensure("token-1") is None
    assert NoUsageKeys().value_for("token-1") is None
