"""The ingest API: API Gateway REST in front of the ingest function.

Every path under ``/v1`` is proxied to the function, which owns the routes and their OpenAPI
description. Callers present an API key; the usage plan throttles each key.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.common import acknowledge, log_retention, output


class IngestApi(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        handler: lambda_.IFunction,
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
            cloud_watch_role=True,
            # The logging role is an account-wide API Gateway setting that other stacks may rely
            # on, so it stays when this stack goes.
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN,
            deploy_options=apigateway.StageOptions(
                stage_name=stage_name,
                access_log_destination=apigateway.LogGroupLogDestination(access_logs),
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
            api_key_required=True,
            request_validator=validator,
            request_parameters={"method.request.path.proxy": True},
        )
        self.usage_plan = self.api.add_usage_plan(
            "UsagePlan",
            name=f"tidings-{stage_name}",
            description="Throttles every Tidings API key",
            throttle=apigateway.ThrottleSettings(rate_limit=rate_limit, burst_limit=burst_limit),
            api_stages=[apigateway.UsagePlanPerApiStage(stage=self.api.deployment_stage)],
        )
        self.api_key = self.api.add_api_key(
            "DefaultKey", description="The first Tidings API key; add more to the usage plan"
        )
        self.usage_plan.add_api_key(self.api_key)

        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "Producers are server-to-server callers holding API keys, throttled by the usage "
            "plan; a WAF web ACL adds cost and is left to deployments that front the API with one.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG4",
            "Every method requires an API key (apiKeyRequired) tied to the usage plan; "
            "the ingest API has no end users to authorize.",
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
            "Callers are services identified by API keys, not Cognito users.",
        )

        output(self, "IngestApiUrl", self.api.url + "v1/", "Ingest API base URL")
        output(
            self,
            "IngestApiKeyId",
            self.api_key.key_id,
            "Read the key: aws apigateway get-api-key --include-value --api-key <id>",
        )
