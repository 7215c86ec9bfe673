"""The Lambda functions, one per entry of ``FUNCTION_SPECS``, each with its own role and
security group.

Every role starts with only what any function here needs (writing its own log group, the
network interfaces Lambda manages in the VPC, X-Ray segments) and gains the grants its spec
asks for: logging in to RDS Proxy as its own database user (IAM authentication: it reads no
secret), sending to both lanes' delivery queues, publishing alerts, making or opening the data
keys of signing secrets, making API keys in the API's usage plan, writing the first admin token's
secret.
The migrator alone reads the master user's secret, and the secrets of the login users it makes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from aws_cdk import Duration, RemovalPolicy, Stack
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.build_layers import DATABASE_CA_BUNDLE, BuiltLayers, LambdaPlatform
from infra.common import (
    NO_DEAD_LETTER_QUEUE,
    NO_ENVIRONMENT_KEY,
    NO_RESERVED_CONCURRENCY,
    acknowledge,
    checkov_skip,
    log_retention,
)
from infra.config import StageConfig
from infra.database import DATABASE_NAME, Database
from infra.signing_keys import SigningSecretsKey
from tidings.deployment import FUNCTION_SPECS, FunctionSpec, usage_plan_name

FUNCTIONS_ROOT = Path(__file__).resolve().parent.parent / "functions"
HANDLER = "app.handler"
RUNTIME = lambda_.Runtime.PYTHON_3_12
ARCHITECTURE = lambda_.Architecture.ARM_64
# The layers are built for exactly this runtime; the two must move together.
LAYER_PLATFORM = LambdaPlatform(python_version="3.12")
METRICS_NAMESPACE = "Tidings"
# The CA bundle of the dependencies layer, where Lambda unpacks it (every layer goes under /opt).
DATABASE_ROOT_CERT = f"/opt/{DATABASE_CA_BUNDLE}"
# One service name for every function: Powertools adds it as the ``service`` dimension of each
# metric, so the dashboard finds a metric by name whichever function emitted it.
SERVICE_NAME = "tidings"

# Lambda creates and removes network interfaces in the VPC on the function's behalf; EC2 offers
# no resource-level permissions for these calls.
_VPC_ACCESS_ACTIONS = [
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
]


@dataclass(frozen=True, slots=True)
class DeployedFunction:
    spec: FunctionSpec
    function: lambda_.Function
    role: iam.Role
    security_group: ec2.SecurityGroup
    log_group: logs.LogGroup


class Functions(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        layers: BuiltLayers,
        vpc: ec2.IVpc,
        function_subnets: ec2.SubnetSelection,
        database: Database,
        delivery_queue: sqs.IQueue,
        slow_delivery_queue: sqs.IQueue,
        alerts_topic: sns.ITopic,
        admin_token_secret: secretsmanager.ISecret,
        signing_key: SigningSecretsKey,
        functions_root: Path = FUNCTIONS_ROOT,
    ) -> None:
        super().__init__(scope, construct_id)
        self._signing_key = signing_key
        self._config = config
        self._vpc = vpc
        self._function_subnets = function_subnets
        self._database = database
        self._queue = delivery_queue
        self._slow_queue = slow_delivery_queue
        self._topic = alerts_topic
        self._admin_token_secret = admin_token_secret
        self._functions_root = functions_root
        self.dependencies_layer = lambda_.LayerVersion(
            self,
            "DependenciesLayer",
            code=lambda_.Code.from_asset(str(layers.dependencies)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="Tidings runtime dependencies (psycopg2, requests, Powertools, pydantic)",
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.tidings_layer = lambda_.LayerVersion(
            self,
            "TidingsLayer",
            code=lambda_.Code.from_asset(str(layers.tidings)),
            compatible_runtimes=[RUNTIME],
            compatible_architectures=[ARCHITECTURE],
            description="The tidings package",
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.by_name: dict[str, DeployedFunction] = {
            spec.name: self._function(spec) for spec in FUNCTION_SPECS
        }

    def __getitem__(self, name: str) -> lambda_.Function:
        return self.by_name[name].function

    def _function(self, spec: FunctionSpec) -> DeployedFunction:
        scope = Construct(self, spec.construct_id)
        code_dir = self._functions_root / spec.name
        if not (code_dir / "app.py").is_file():
            raise FileNotFoundError(
                f"function {spec.name!r} has no entry point: {code_dir / 'app.py'} is missing"
            )
        log_group = logs.LogGroup(
            scope,
            "Logs",
            retention=log_retention(self._config.log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        role = iam.Role(
            scope,
            "Role",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description=f"Tidings {spec.name} function",
            inline_policies={
                "Runtime": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                            resources=[log_group.log_group_arn],
                        ),
                        iam.PolicyStatement(actions=_VPC_ACCESS_ACTIONS, resources=["*"]),
                    ]
                )
            },
        )
        acknowledge(
            scope,
            "AwsSolutions-IAM5[Resource::*]",
            "EC2 network-interface actions for Lambda in a VPC and X-Ray PutTraceSegments / "
            "PutTelemetryRecords support no resource-level permissions.",
        )
        acknowledge(
            scope,
            "AwsSolutions-L1",
            f"Pinned to {RUNTIME.name}: the dependencies layer is built for exactly this Python "
            "version (binary wheels such as psycopg2), so the runtime moves only with the layer.",
        )
        security_group = ec2.SecurityGroup(
            scope,
            "SecurityGroup",
            vpc=self._vpc,
            description=f"Tidings {spec.name} function",
            allow_all_outbound=False,
        )
        security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "HTTPS: AWS APIs and webhook endpoints"
        )
        if spec.reaches_endpoints:
            for port in self._config.endpoint_ports:
                if port != 443:
                    security_group.add_egress_rule(
                        ec2.Peer.any_ipv4(), ec2.Port.tcp(port), f"Webhook endpoints on {port}"
                    )
        if spec.connects_directly:
            self._database.allow_direct_from(security_group, f"{spec.name} to PostgreSQL")
            database_host = self._database.instance.db_instance_endpoint_address
        else:
            self._database.allow_from(security_group, f"{spec.name} to RDS Proxy")
            database_host = self._database.proxy.endpoint

        function = lambda_.Function(
            scope,
            "Function",
            description=spec.description,
            runtime=RUNTIME,
            architecture=ARCHITECTURE,
            handler=HANDLER,
            code=lambda_.Code.from_asset(str(code_dir), exclude=["__pycache__", "*.pyc"]),
            layers=[self.dependencies_layer, self.tidings_layer],
            timeout=Duration.seconds(spec.timeout_s),
            memory_size=spec.memory_mb,
            role=role,
            log_group=log_group,
            vpc=self._vpc,
            vpc_subnets=self._function_subnets,
            security_groups=[security_group],
            tracing=lambda_.Tracing.ACTIVE,
            environment=self._environment(spec, database_host),
        )
        self._grant(role, spec)
        checkov_skip(function, "CKV_AWS_115", NO_RESERVED_CONCURRENCY)
        checkov_skip(function, "CKV_AWS_116", NO_DEAD_LETTER_QUEUE)
        checkov_skip(function, "CKV_AWS_173", NO_ENVIRONMENT_KEY)
        checkov_skip(
            role,
            "CKV_AWS_111",
            "The one unconstrained write is the EC2 network-interface actions Lambda needs in a "
            "VPC, which EC2 offers no resource-level permissions for; every other names its "
            "resource.",
        )
        return DeployedFunction(spec, function, role, security_group, log_group)

    def _grant(self, role: iam.Role, spec: FunctionSpec) -> None:
        """What the spec asks for, on top of what every function's role has."""
        if spec.database_user is None:
            self._database.secret.grant_read(role)
            for login in self._database.logins.values():
                login.secret.grant_read(role)
        else:
            self._database.proxy.grant_connect(role, spec.database_user)
        self._signing_key.grant(role, spec)
        if spec.sends_to_queue:
            self._queue.grant_send_messages(role)
        if spec.fills_slow_lane:
            self._slow_queue.grant_send_messages(role)
        if spec.publishes_alerts:
            self._topic.grant_publish(role)
            acknowledge(
                role,
                "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                "Publishing to the encrypted alerts topic needs data keys from its one KMS key; "
                "the grant is limited to that key.",
            )
        if spec.manages_usage_keys:
            self._grant_usage_keys(role)
        if spec.bootstraps_admin_token:
            self._admin_token_secret.grant_read(role)
            self._admin_token_secret.grant_write(role)

    def _grant_usage_keys(self, role: iam.Role) -> None:
        """Making a token's API key and adding it to the usage plan: API Gateway's management
        API, on API keys and usage plans only."""
        stack = Stack.of(self)
        base = f"arn:{stack.partition}:apigateway:{stack.region}::"
        role.add_to_policy(
            iam.PolicyStatement(
                actions=["apigateway:GET", "apigateway:POST"],
                resources=[
                    f"{base}/apikeys",
                    f"{base}/usageplans",
                    f"{base}/usageplans/*/keys",
                ],
            )
        )
        acknowledge(
            role,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:apigateway:<AWS::Region>::"
            "/usageplans/*/keys]",
            "The usage plan's id cannot be named here: the plan depends on the API, which "
            "depends on this authorizer. The function finds the plan by its name at run time.",
        )

    def _environment(self, spec: FunctionSpec, database_host: str) -> dict[str, str]:
        environment = {
            "POWERTOOLS_SERVICE_NAME": SERVICE_NAME,
            "POWERTOOLS_METRICS_NAMESPACE": METRICS_NAMESPACE,
            "LOG_LEVEL": self._config.log_level,
            # Handler responses can hold endpoint signing secrets (the ingest API returns a new
            # endpoint's secret once); they must not be copied into X-Ray trace metadata.
            "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
            "TIDINGS_DATABASE_HOST": database_host,
            "TIDINGS_DATABASE_NAME": DATABASE_NAME,
            "TIDINGS_DATABASE_ROOT_CERT": DATABASE_ROOT_CERT,
        }
        if spec.database_user is None:
            environment["TIDINGS_DATABASE_SECRET_ARN"] = self._database.secret.secret_arn
            environment["TIDINGS_DATABASE_LOGINS"] = Stack.of(self).to_json_string(
                [
                    {"user": login.user, "role": login.role, "secret_arn": login.secret.secret_arn}
                    for login in self._database.logins.values()
                ]
            )
        else:
            environment["TIDINGS_DATABASE_USER"] = spec.database_user
        if spec.opens_signing_secrets or spec.seals_signing_secrets:
            environment["TIDINGS_SECRETS_KMS_KEY_ID"] = self._signing_key.key.key_arn
        if spec.sends_to_queue:
            environment["TIDINGS_DELIVERY_QUEUE_URL"] = self._queue.queue_url
            environment["TIDINGS_DELIVERIES_PER_MESSAGE"] = str(self._config.deliveries_per_message)
        if spec.fills_slow_lane:
            environment["TIDINGS_SLOW_DELIVERY_QUEUE_URL"] = self._slow_queue.queue_url
        if spec.publishes_alerts:
            environment["TIDINGS_ALERTS_TOPIC_ARN"] = self._topic.topic_arn
        if spec.reaches_endpoints:
            environment["TIDINGS_HTTP_TIMEOUT_S"] = str(self._config.http_timeout_s)
        if spec.manages_endpoints and self._config.portal_url:
            # Portal links point here rather than at the API's own execute-api address.
            environment["TIDINGS_PORTAL_URL"] = self._config.portal_url
        if spec.manages_endpoints:
            # The ports the sender's security group opens: an endpoint elsewhere is refused.
            environment["TIDINGS_ENDPOINT_PORTS"] = ",".join(
                str(port) for port in self._config.endpoint_ports
            )
        if spec.manages_usage_keys:
            environment["TIDINGS_USAGE_PLAN_NAME"] = usage_plan_name(self._config.stage)
        if spec.emits_application_metrics and self._config.metrics_applications:
            environment["TIDINGS_METRICS_APPLICATIONS"] = ",".join(
                self._config.metrics_applications
            )
        return environment
