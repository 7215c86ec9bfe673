"""Schema migrations on deploy: a custom resource backed by the migrator function.

CloudFormation calls the migrator when the resource is created and whenever its properties
change. Its ``MigrationsHash`` property is a hash of the SQL migration files, so a deploy that
adds or edits a migration updates the resource and the migrator applies what is new; a deploy
without migration changes leaves the schema alone. The migrator is idempotent (applied
migrations are recorded in the database), so running it again is always safe: to force a run,
deploy with ``-c migrationsRunToken=<anything new>``.

The same run makes sure the first admin token exists in the secret named by the
``AdminTokenSecretArn`` property (see ``infra/tokens.py``).
"""

from __future__ import annotations

from pathlib import Path

from aws_cdk import CfnElement, CustomResource, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import custom_resources as cr
from constructs import Construct

from infra.build_layers import TIDINGS_SOURCE, tree_digest
from infra.common import (
    NO_DEAD_LETTER_QUEUE,
    NO_ENVIRONMENT_KEY,
    NO_RESERVED_CONCURRENCY,
    acknowledge,
    checkov_skip,
    log_retention,
)

MIGRATIONS_DIR = TIDINGS_SOURCE / "migrations"


def migrations_hash(migrations_dir: Path = MIGRATIONS_DIR) -> str:
    """A hash of every ``*.sql`` file under ``migrations_dir`` (names and contents)."""
    return tree_digest(migrations_dir, "*.sql")


class SchemaMigrations(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        migrator: lambda_.Function,
        log_retention_days: int,
        admin_token_secret_arn: str,
        run_token: str = "",
        migrations_dir: Path = MIGRATIONS_DIR,
        extra_properties: dict[str, str] | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(
            self,
            "ProviderLogs",
            retention=log_retention(log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        provider_role = iam.Role(
            self,
            "ProviderRole",
            assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
            description="Tidings schema migrations: CloudFormation custom-resource provider",
            inline_policies={
                "Logs": iam.PolicyDocument(
                    statements=[
                        iam.PolicyStatement(
                            actions=["logs:CreateLogStream", "logs:PutLogEvents"],
                            resources=[log_group.log_group_arn],
                        )
                    ]
                )
            },
        )
        self.provider = cr.Provider(
            self,
            "Provider",
            on_event_handler=migrator,
            log_group=log_group,
            framework_on_event_role=provider_role,
        )
        framework = self.provider.node.find_child("framework-onEvent")
        checkov_skip(framework, "CKV_AWS_115", NO_RESERVED_CONCURRENCY)
        checkov_skip(framework, "CKV_AWS_116", NO_DEAD_LETTER_QUEUE)
        checkov_skip(framework, "CKV_AWS_173", NO_ENVIRONMENT_KEY)
        checkov_skip(
            framework,
            "CKV_AWS_117",
            "The provider framework only invokes the migrator and answers CloudFormation; it "
            "reaches nothing inside the VPC.",
        )
        acknowledge(
            provider_role,
            f"AwsSolutions-IAM5[Resource::<{_logical_id(migrator)}.Arn>:*]",
            "The provider framework may invoke any version of the migrator function, and only it.",
        )
        properties = {
            "MigrationsHash": migrations_hash(migrations_dir),
            "AdminTokenSecretArn": admin_token_secret_arn,
            **(extra_properties or {}),
        }
        if run_token:
            properties["RunToken"] = run_token
        self.resource = CustomResource(
            self,
            "Schema",
            service_token=self.provider.service_token,
            resource_type="Custom::TidingsSchema",
            properties=properties,
        )


def _logical_id(function: lambda_.Function) -> str:
    resource = function.node.default_child
    if not isinstance(resource, CfnElement):
        raise TypeError(f"{function.node.path} has no CloudFormation resource")
    return Stack.of(function).resolve(resource.logical_id)  # type: ignore[no-any-return]
