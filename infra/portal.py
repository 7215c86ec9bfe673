"""The consumer portal's page: ``GET /portal`` and ``GET /portal/{asset}`` on the API, served
by a small function of its own.

The page is public (it holds nothing of any application; everything it shows comes from the API
with the session a portal link opens), so its two methods have no authorizer and no API key.
The function reaches nothing: no VPC, no database, no secret, no AWS API but its own logs; it
returns the package's static files with the page's Content-Security-Policy (``tidings.portal``),
whose ``frame-ancestors`` lists the stage's ``portalFrameAncestors``.
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_apigateway as apigateway
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.common import (
    NO_DEAD_LETTER_QUEUE,
    NO_ENVIRONMENT_KEY,
    NO_RESERVED_CONCURRENCY,
    acknowledge,
    checkov_skip,
    log_retention,
    output,
)
from infra.config import StageConfig
from infra.functions import (
    ARCHITECTURE,
    FUNCTIONS_ROOT,
    HANDLER,
    METRICS_NAMESPACE,
    RUNTIME,
    SERVICE_NAME,
)


class PortalPage(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        api: apigateway.RestApi,
        layers: list[lambda_.ILayerVersion],
        config: StageConfig,
        functions_root: Path = FUNCTIONS_ROOT,
    ) -> None:
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(
            self,
            "Logs",
            retention=log_retention(config.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            self,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Tidings portal page function",
            inline_policies={
                "Runtime": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                            resources=[log_group.log_group_arn],
                        )
                    ]
                )
            },
        )
        acknowledge(
            self,
            "AwsSolutions-L1",
            f"Pinned to {RUNTIME.name}: the dependencies layer is built for exactly this Python "
            "version, so the runtime moves only with the layer.",
        )
        self.function = lambda_.Function(
            self,
            "Function",
            description="The consumer portal's page and its static files",
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=lambda_.Code.from_asset(
                str(functions_root / "portal"), exclude=["__pycache__", "*.pyc"]
            ),
            layers=layers,
            timeout=Duration.seconds(5),
            memory_size=256,
            role=role,
            log_group=log_group,
            environment={
                "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
                "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
                "LOG_LEVEL": config.log_level,
                "TIDINGS_PORTAL_FRAME_ANCESTORS": ",".join(config.portal_frame_ancestors),
            },
        )
        checkov_skip(self.function, "CKV_AWS_115", NO_RESERVED_CONCURRENCY)
        checkov_skip(self.function, "CKV_AWS_116", NO_DEAD_LETTER_QUEUE)
        checkov_skip(self.function, "CKV_AWS_173", NO_ENVIRONMENT_KEY)
        checkov_skip(
            self.function,
            "CKV_AWS_117",
            "The portal's function reaches nothing inside the VPC (no database, no secret); "
            "outside it, it needs no NAT gateway.",
        )
        integration = apigateway.LambdaIntegration(self.function, proxy=True)
        page = api.root.add_resource("portal")
        asset = page.add_resource("{asset}")
        self.methods = [
            page.add_method(
                "GET", integration, authorization_type=apigateway.AuthorizationType.NONE
            ),
            asset.add_method(
                "GET",
                integration,
                authorization_type=apigateway.AuthorizationType.NONE,
                request_parameters={"method.request.path.asset": True},
            ),
        ]
        for method in self.methods:
            checkov_skip(
                method,
                "CKV_AWS_59",
                "The portal's page and static files are public by design: they hold nothing of "
                "any application, and everything the page shows comes from the API with a token.",
            )
        for resource in (page, asset):
            acknowledge(
                resource,
                "AwsSolutions-APIG4",
                "The portal's page and static files are public: they hold nothing of any "
                "application, and everything the page shows comes from the API with a token.",
            )
            acknowledge(
                resource,
                "AwsSolutions-COG4",
                "The portal's page is public; its users hold portal sessions, not Cognito logins.",
            )
        output(self, "PortalUrl", api.url + "portal", "The consumer portal (open a portal link)")
