"""The ingest API: API Gateway REST in front of the ingest function, behind a token authorizer.

Every path under ``/v1`` is proxied to the function, which owns the routes and their OpenAPI
description. Callers present ``Authorization: Bearer <token>``; a TOKEN authorizer (the
authorizer function) checks it, its answer cached for ``AUTHORIZER_CACHE_TTL_S`` per header
value, and hands the token's scope and application to the ingest function. Throttling stays per
caller: the API's key source is AUTHORIZER, the authorizer names each token's own API key, and
the usage plan throttles each key.
"""

from __future__ import annotations

import json

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.common import acknowledge, checkov_skip, log_retention, output
from tidings.deployment import AUTHORIZER_CACHE_TTL_S, usage_plan_name

# What API Gateway answers itself, in the API's own error shape ({"error": {"code", "message"}}):
# response type -> (code, message, status when not API Gateway's own).
GATEWAY_ERRORS: dict[apigateway.ResponseType, tuple[str, str, str | None]] = {
    apigateway.ResponseType.UNAUTHORIZED: (
        "unauthorized",
        "a valid bearer token is required",
        None,
    ),
    apigateway.ResponseType.ACCESS_DENIED: (
        "forbidden",
        "the authorizer denied this request",
        None,
    ),
    # No resource or method matches (a path outside /v1, or a method ANY does not cover).
    apigateway.ResponseType.MISSING_AUTHENTICATION_TOKEN: (
        "route_not_found",
        "no such route",
        "404",
    ),
    apigateway.ResponseType.THROTTLED: ("throttled", "too many requests from this token", None),
    apigateway.ResponseType.QUOTA_EXCEEDED: (
        "throttled",
        "too many requests from this token",
        None,
    ),
    apigateway.ResponseType.REQUEST_TOO_LARGE: (
        "request_too_large",
        "the request is too large",
        None,
    ),
    apigateway.ResponseType.DEFAULT_4_XX: ("bad_request", "the request was refused", None),
    apigateway.ResponseType.DEFAULT_5_XX: ("gateway_error", "the API could not answer", None),
}


class IngestApi(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
        authorizer: lambda_.IFunction,
        stage_name: str,
        rate_limit: int,
        burst_limit: int,
        log_retention_days: int,
    ) -> None:
        super().__init__(scope, construct_id)
        access_logs = logs.LogGroup(
            self,
            "AccessLogs",
            retention=log_retention(log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.api = apigateway.RestApi(
            self,
            "Api",
            description="Tidings ingest API",
            endpoint_types=[apigateway.EndpointType.REGIONAL],
            # The authorizer names the API key of each request (one per token), which the usage
            # plan throttles; callers send no x-api-key.
            api_key_source_type=apigateway.ApiKeySourceType.AUTHORIZER,
            cloud_watch_role=True,
            # The logging role is an account-wide API Gateway setting that other stacks may rely
            # on, so it stays when this stack goes.
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigateway.StageOptions(
                stage_name=stage_name,
                access_log_destination=apigateway.LogGroupLogDestination(access_logs),
                # The caller is named by the authorizer's principal (token-<id>), never by the
                # token; no request header is logged.
                access_log_format=apigateway.AccessLogFormat.json_with_standard_fields(
                    caller=False,
                    http_method=True,
                    ip=True,
                    protocol=True,
                    request_time=True,
                    resource_path=True,
                    response_length=True,
                    status=True,
                    user=False,
                ),
                logging_level=apigateway.MethodLoggingLevel.ERROR,
                data_trace_enabled=False,
                metrics_enabled=True,
                tracing_enabled=True,
                throttling_rate_limit=rate_limit,
                throttling_burst_limit=burst_limit,
            ),
        )
        self.authorizer = apigateway.TokenAuthorizer(
            self,
            "Authorizer",
            handler=authorizer,
            identity_source=apigateway.IdentitySource.header("Authorization"),
            results_cache_ttl=Duration.seconds(AUTHORIZER_CACHE_TTL_S),
        )
        validator = self.api.add_request_validator(
            "Validator",
            request_validator_name="tidings-ingest",
            validate_request_body=True,
            validate_request_parameters=True,
        )
        proxy = self.api.root.add_resource("v1").add_resource("{proxy+}")
        self.method = proxy.add_method(
            "ANY",
            apigateway.LambdaIntegration(handler, proxy=True),
            authorizer=self.authorizer,
            authorization_type=apigateway.AuthorizationType.CUSTOM,
            api_key_required=True,
            request_validator=validator,
            request_parameters={"method.request.path.proxy": True},
        )
        for response_type, (code, message, status) in GATEWAY_ERRORS.items():
            words = response_type.response_type.split("_")
            self.api.add_gateway_response(
                "GatewayResponse" + "".join(w.capitalize() for w in words),
                type=response_type,
                status_code=status,
                response_headers={"Content-Type": "'application/json'"},
                templates={
                    "application/json": json.dumps({"error": {"code": code, "message": message}})
                },
            )
        self.usage_plan = self.api.add_usage_plan(
            "UsagePlan",
            name=usage_plan_name(stage_name),
            description="Throttles each Tidings token (one API key per token, made on first use)",
            throttle=apigateway.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
            api_stages=[apigateway.UsagePlanPerApiStage(stage=self.api.deployment_stage)],
        )

        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "Producers are server-to-server callers holding API tokens, throttled per token by the "
            "usage plan; a WAF web ACL adds cost and is left to deployments that front the API "
            "with one.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
            "AmazonAPIGatewayPushToCloudWatchLogs]",
            "API Gateway's account-level logging role; AWS maintains this narrow policy for "
            "exactly that purpose.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-COG4",
            "Callers are services holding Tidings API tokens, checked by a Lambda authorizer, "
            "not Cognito users.",
        )

        checkov_skip(
            self.api.deployment_stage,
            "CKV_AWS_120",
            "No answer is reusable: a POST records something, a GET shows the caller's own live "
            "state; a cache would serve stale answers, or one token's to another, and bills by "
            "the hour.",
        )

        output(self, "IngestApiUrl", self.api.url + "v1/", "Ingest API base URL")
