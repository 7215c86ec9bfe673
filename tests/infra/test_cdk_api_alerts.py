"""Ingest API, alerts topic, alarms and dashboard."""

from __future__ import annotations

import json
from typing import Any

from aws_cdk.assertions import Match

from infra.api import GATEWAY_ERRORS
from tests.infra.conftest import Synthesized
from tidings.deployment import AUTHORIZER_CACHE_TTL_S, usage_plan_name


def _single(synth: Synthesized, resource_type: str) -> tuple[str, dict[str, Any]]:
    (item,) = synth.resources(resource_type).items()
    return item


def test_api_proxies_v1_to_ingest_behind_the_token_authorizer_with_validation(
    dev: Synthesized,
) -> None:
    api_id, api = _single(dev, "AWS::ApiGateway::RestApi")
    resources = dev.resources("AWS::ApiGateway::Resource")
    paths = {logical_id: r["Properties"]["PathPart"] for logical_id, r in resources.items()}
    assert sorted(paths.values()) == ["portal", "v1", "{asset}", "{proxy+}"]
    (proxy_id,) = [logical_id for logical_id, part in paths.items() if part == "{proxy+}"]
    validator_id, validator = _single(dev, "AWS::ApiGateway::RequestValidator")
    assert validator["Properties"]["ValidateRequestParameters"] is True
    assert validator["Properties"]["ValidateRequestBody"] is True
    authorizer_id, _ = _single(dev, "AWS::ApiGateway::Authorizer")
    (method,) = [
        m
        for m in dev.resources("AWS::ApiGateway::Method").values()
        if m["Properties"]["ResourceId"] == {"Ref": proxy_id}
    ]
    properties = method["Properties"]
    assert properties["ResourceId"] == {"Ref": proxy_id}
    assert properties["HttpMethod"] == "ANY"
    assert properties["AuthorizationType"] == "CUSTOM"
    assert properties["AuthorizerId"] == {"Ref": authorizer_id}
    # Each request names (through its authorizer) the API key the usage plan throttles it by.
    assert properties["ApiKeyRequired"] is True
    assert api["Properties"]["ApiKeySourceType"] == "AUTHORIZER"
    assert properties["RequestValidatorId"] == {"Ref": validator_id}
    assert properties["Integration"]["Type"] == "AWS_PROXY"
    ingest_id = dev.logical_id(dev.stack.functions["ingest"])
    assert ingest_id in json.dumps(properties["Integration"]["Uri"])
    url = json.dumps(dev.raw["Outputs"]["IngestApiUrl"]["Value"])
    assert api_id in url and url.endswith('"/v1/"]]}')


def test_the_authorizer_checks_the_bearer_token_and_caches_for_a_minute(
    dev: Synthesized,
) -> None:
    _, authorizer = _single(dev, "AWS::ApiGateway::Authorizer")
    properties = authorizer["Properties"]
    assert properties["Type"] == "TOKEN"
    assert properties["IdentitySource"] == "method.request.header.Authorization"
    assert properties["AuthorizerResultTtlInSeconds"] == AUTHORIZER_CACHE_TTL_S == 60
    function_id = dev.logical_id(dev.stack.functions["authorizer"])
    assert function_id in json.dumps(properties["AuthorizerUri"])
    # API Gateway may invoke the authorizer function, and only through this API.
    permissions = [
        p["Properties"]
        for p in dev.resources("AWS::Lambda::Permission").values()
        if p["Properties"]["FunctionName"] == {"Fn::GetAtt": [function_id, "Arn"]}
    ]
    assert permissions
    assert all(p["Principal"] == "apigateway.amazonaws.com" for p in permissions)
    assert all("/authorizers/" in json.dumps(p["SourceArn"]) for p in permissions)


def test_usage_plan_throttles_each_token_and_no_shared_api_key_remains(dev: Synthesized) -> None:
    _, plan = _single(dev, "AWS::ApiGateway::UsagePlan")
    assert plan["Properties"]["UsagePlanName"] == usage_plan_name(dev.config.stage)
    assert plan["Properties"]["Throttle"] == {
        "RateLimit": dev.config.api_rate_limit,
        "BurstLimit": dev.config.api_burst_limit,
    }
    # Keys are made per token at run time (tidings.usage_keys), none in the template.
    dev.template.resource_count_is("AWS::ApiGateway::ApiKey", 0)
    dev.template.resource_count_is("AWS::ApiGateway::UsagePlanKey", 0)
    assert "IngestApiKeyId" not in dev.raw["Outputs"]


def test_the_first_admin_token_lives_in_a_secret_named_by_an_output(dev: Synthesized) -> None:
    secret_id = dev.logical_id(dev.stack.admin_token.secret)
    secret = dev.raw["Resources"][secret_id]
    # A generated name: re-creating the stack never waits for a deleted secret's recovery.
    assert "Name" not in secret["Properties"]
    assert dev.raw["Outputs"]["AdminTokenSecretArn"]["Value"] == {"Ref": secret_id}
    (schema,) = dev.resources("Custom::TidingsSchema").values()
    assert schema["Properties"]["AdminTokenSecretArn"] == {"Ref": secret_id}


def test_gateway_answers_have_the_api_error_shape(dev: Synthesized) -> None:
    responses = {
        r["Properties"]["ResponseType"]: r["Properties"]
        for r in dev.resources("AWS::ApiGateway::GatewayResponse").values()
    }
    assert set(responses) == {t.response_type for t in GATEWAY_ERRORS}
    for response_type, properties in responses.items():
        body = json.loads(properties["ResponseTemplates"]["application/json"])
        assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
        assert properties["ResponseParameters"] == {
            "gatewayresponse.header.Content-Type": "'application/json'"
        }, response_type
    unauthorized = json.loads(responses["UNAUTHORIZED"]["ResponseTemplates"]["application/json"])
    assert unauthorized["error"]["code"] == "unauthorized"
    assert responses["MISSING_AUTHENTICATION_TOKEN"]["StatusCode"] == "404"


def test_stage_writes_access_logs_and_throttles(dev: Synthesized) -> None:
    _, stage = _single(dev, "AWS::ApiGateway::Stage")
    properties = stage["Properties"]
    assert properties["StageName"] == dev.config.stage
    assert "DestinationArn" in properties["AccessLogSetting"]
    assert "$context.requestId" in properties["AccessLogSetting"]["Format"]
    (settings,) = properties["MethodSettings"]
    assert settings["ThrottlingRateLimit"] == dev.config.api_rate_limit
    assert settings["LoggingLevel"] == "ERROR"
    assert properties["TracingEnabled"] is True


def test_alerts_topic_is_encrypted_refuses_plain_http_and_lets_cloudwatch_use_the_key(
    dev: Synthesized,
) -> None:
    topic_id, topic = _single(dev, "AWS::SNS::Topic")
    key_id = dev.logical_id(dev.stack.alerts.key)
    key = dev.raw["Resources"][key_id]
    assert topic["Properties"]["KmsMasterKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}
    assert key["Properties"]["EnableKeyRotation"] is True
    (cloudwatch,) = [
        s
        for s in key["Properties"]["KeyPolicy"]["Statement"]
        if s.get("Principal") == {"Service": "cloudwatch.amazonaws.com"}
    ]
    # Only this account's alarms, through CloudWatch, may use the key: no confused deputy.
    assert cloudwatch["Condition"] == {
        "StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}},
        "ArnLike": {
            "aws:SourceArn": {
                "Fn::Join": [
                    "",
                    [
                        "arn:",
                        {"Ref": "AWS::Partition"},
                        ":cloudwatch:",
                        {"Ref": "AWS::Region"},
                        ":",
                        {"Ref": "AWS::AccountId"},
                        ":alarm:*",
                    ],
                ]
            }
        },
    }
    # And no other statement lets a service principal use the key without such a condition.
    for statement in key["Properties"]["KeyPolicy"]["Statement"]:
        if "Service" in statement.get("Principal", {}):
            assert "aws:SourceAccount" in str(statement.get("Condition")), statement
    _, policy = _single(dev, "AWS::SNS::TopicPolicy")
    assert {"Ref": topic_id} in policy["Properties"]["Topics"]
    assert dev.raw["Outputs"]["AlertsTopicArn"]["Value"] == {"Ref": topic_id}
    assert any(
        s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
        for s in policy["Properties"]["PolicyDocument"]["Statement"]
    )


def test_alarm_email_subscribes_only_when_given(dev: Synthesized, prod: Synthesized) -> None:
    dev.template.resource_count_is("AWS::SNS::Subscription", 0)
    prod.template.has_resource_properties(
        "AWS::SNS::Subscription", {"Protocol": "email", "Endpoint": "ops@example.com"}
    )


def _alarms_by_metric(synth: Synthesized) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for alarm in synth.resources("AWS::CloudWatch::Alarm").values():
        found.setdefault(alarm["Properties"]["MetricName"], []).append(alarm["Properties"])
    return found


def test_alarms_cover_queue_age_dead_letters_functions_and_database(dev: Synthesized) -> None:
    alarms = _alarms_by_metric(dev)
    topic = {"Ref": dev.logical_id(dev.stack.alerts.topic)}
    queue_id = dev.logical_id(dev.stack.delivery.queue)
    slow_queue_id = dev.logical_id(dev.stack.delivery.slow_queue)
    dlq_id = dev.logical_id(dev.stack.delivery.dead_letter_queue)

    # The age of the oldest message, in each lane's queue.
    ages = alarms["ApproximateAgeOfOldestMessage"]
    assert sorted(json.dumps(age["Dimensions"]) for age in ages) == sorted(
        json.dumps([{"Name": "QueueName", "Value": {"Fn::GetAtt": [i, "QueueName"]}}])
        for i in (queue_id, slow_queue_id)
    )
    for age in ages:
        assert age["Threshold"] == dev.config.oldest_message_alarm_s
        assert age["EvaluationPeriods"] == 2
    # One dead-letter queue, which both lanes redrive to: one alarm covers them.
    (dead,) = alarms["ApproximateNumberOfMessagesVisible"]
    assert dead["Dimensions"][0]["Value"] == {"Fn::GetAtt": [dlq_id, "QueueName"]}
    assert dead["Threshold"] == 1
    for lane_queue in (queue_id, slow_queue_id):
        redrive = dev.raw["Resources"][lane_queue]["Properties"]["RedrivePolicy"]
        assert redrive["deadLetterTargetArn"] == {"Fn::GetAtt": [dlq_id, "Arn"]}

    function_ids = {dev.logical_id(fn.function) for fn in dev.stack.functions.by_name.values()}
    for metric in ("Errors", "Throttles"):
        watched = {alarm["Dimensions"][0]["Value"]["Ref"] for alarm in alarms[metric]}
        assert watched == function_ids, metric
    for metric in ("CPUUtilization", "DatabaseConnections", "FreeStorageSpace"):
        (alarm,) = alarms[metric]
        assert alarm["Namespace"] == "AWS/RDS"
    (storage,) = alarms["FreeStorageSpace"]
    assert storage["ComparisonOperator"] == "LessThanThreshold"
    assert storage["Threshold"] == dev.config.free_storage_alarm_gib * 1024**3

    for alarm_list in alarms.values():
        for alarm in alarm_list:
            assert alarm["AlarmActions"] == [topic]
            assert alarm["OKActions"] == [topic]


def test_dashboard_shows_throughput_depth_age_dead_letters_and_latency(dev: Synthesized) -> None:
    _, dashboard = _single(dev, "AWS::CloudWatch::Dashboard")
    body = json.dumps(dashboard["Properties"]["DashboardBody"])
    for metric in (
        "NumberOfMessagesSent",
        "NumberOfMessagesDeleted",
        "ApproximateNumberOfMessagesVisible",
        "ApproximateAgeOfOldestMessage",
        "DeliveryLatency",
        "Delivered",
        "Failed",
        "DeadLettered",
        "OldestUndeliveredAge",
        "DeadLetters",
        "Pending",
        "AwaitingRetry",
    ):
        assert f'\\"{metric}\\"' in body, metric
    # The namespace and dimension the functions' Powertools metrics carry.
    assert '\\"Tidings\\",\\"DeliveryLatency\\",\\"service\\",\\"tidings\\"' in body
    for percentile in ("p50", "p95", "p99"):
        assert f'\\"stat\\":\\"{percentile}\\"' in body, percentile
    # Both lanes' queues, and the dead-letter queue they share.
    for queue in (dev.stack.delivery.queue, dev.stack.delivery.slow_queue):
        queue_id = dev.logical_id(queue)
        assert body.count(f'"{queue_id}"') >= 5, queue_id  # sent, handled, waiting, in flight, age
    for lane in ("fast lane", "slow lane"):
        assert f"SQS {lane}: oldest queued" in body, lane
    assert dev.logical_id(dev.stack.delivery.dead_letter_queue) in body
    dev.template.has_resource_properties(
        "AWS::CloudWatch::Dashboard", {"DashboardName": Match.string_like_regexp("Tidings-dev")}
    )


def test_the_portal_page_is_public_and_its_function_reaches_nothing(dev: Synthesized) -> None:
    resources = dev.resources("AWS::ApiGateway::Resource")
    portal_ids = {
        logical_id
        for logical_id, r in resources.items()
        if r["Properties"]["PathPart"] in ("portal", "{asset}")
    }
    methods = [
        m["Properties"]
        for m in dev.resources("AWS::ApiGateway::Method").values()
        if m["Properties"]["ResourceId"].get("Ref") in portal_ids
    ]
    assert len(methods) == 2
    function_id = dev.logical_id(dev.stack.portal.function)
    for properties in methods:
        # GET only, no authorizer or API key: the page holds nothing of any application.
        assert (properties["HttpMethod"], properties["AuthorizationType"]) == ("GET", "NONE")
        assert not properties.get("ApiKeyRequired", False)
        assert properties["Integration"]["Type"] == "AWS_PROXY"
        assert function_id in json.dumps(properties["Integration"]["Uri"])
    function = dev.resources("AWS::Lambda::Function")[function_id]["Properties"]
    # Outside the VPC, no database host or secret, frame ancestors from the stage.
    assert "VpcConfig" not in function
    environment = function["Environment"]["Variables"]
    assert environment["TIDINGS_PORTAL_FRAME_ANCESTORS"] == ""
    assert not any("DATABASE" in name or "SECRET" in name for name in environment)
    role_id = function["Role"]["Fn::GetAtt"][0]
    role = dev.resources("AWS::IAM::Role")[role_id]["Properties"]
    assert "ManagedPolicyArns" not in role
    (policy,) = role["Policies"]
    actions = [a for s in policy["PolicyDocument"]["Statement"] for a in s["Action"]]
    assert actions == ["logs:CreateLogStream", "logs:PutLogEvents"]
    attached = [
        p
        for p in dev.resources("AWS::IAM::Policy").values()
        if {"Ref": role_id} in p["Properties"]["Roles"]
    ]
    assert attached == []
