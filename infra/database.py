"""PostgreSQL 16 on RDS in the isolated subnets, its credentials secret, and the RDS Proxy that
the functions connect through.

Only the proxy (and the secret-rotation function, which must reach the instance itself) may
open connections to the instance; functions are let in to the proxy one security group at a
time by ``allow_from``.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.common import acknowledge, output
from infra.config import StageConfig

DATABASE_NAME = "tidings"
MASTER_USERNAME = "tidings"
POSTGRES_PORT = 5432
# A full version: CloudFormation compares the template, not the instance, so minor upgrades that
# RDS applies on its own do not fight the next deploy. Raise it to move to a newer minor.
POSTGRES_VERSION = rds.PostgresEngineVersion.VER_16_13
# A long-running query or an abandoned transaction holds locks and keeps old row versions
# alive, which bloats the hot queue table; these bound both.
_QUEUE_HEALTH_PARAMETERS = ("statement_timeout", "idle_in_transaction_session_timeout")


class Database(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        vpc: ec2.IVpc,
        database_subnets: ec2.SubnetSelection,
        rotation_subnets: ec2.SubnetSelection,
        config: StageConfig,
    ) -> None:
        super().__init__(scope, construct_id)
        engine = rds.DatabaseInstanceEngine.postgres(version=POSTGRES_VERSION)
        self.parameter_group = rds.ParameterGroup(
            self,
            "Parameters",
            engine=engine,
            description="Tidings: bounded statements and idle transactions, TLS only",
            parameters={
                "statement_timeout": str(config.statement_timeout_ms),
                "idle_in_transaction_session_timeout": str(config.idle_in_transaction_timeout_ms),
                "rds.force_ssl": "1",
                "log_min_duration_statement": "1000",
                "log_lock_waits": "1",
            },
        )
        self.instance_security_group = ec2.SecurityGroup(
            self,
            "InstanceSecurityGroup",
            vpc=vpc,
            description="Tidings PostgreSQL: reachable from the RDS Proxy and secret rotation only",
            allow_all_outbound=False,
        )
        self.proxy_security_group = ec2.SecurityGroup(
            self,
            "ProxySecurityGroup",
            vpc=vpc,
            description="Tidings RDS Proxy: reachable from the functions that use the database",
            allow_all_outbound=False,
        )
        self.instance_security_group.add_ingress_rule(
            self.proxy_security_group,
            ec2.Port.tcp(POSTGRES_PORT),
            "RDS Proxy to PostgreSQL",
        )
        self.proxy_security_group.add_egress_rule(
            self.instance_security_group,
            ec2.Port.tcp(POSTGRES_PORT),
            "RDS Proxy to PostgreSQL",
        )

        self.instance = rds.DatabaseInstance(
            self,
            "Instance",
            engine=engine,
            instance_type=ec2.InstanceType(config.instance_type),
            vpc=vpc,
            vpc_subnets=database_subnets,
            security_groups=[self.instance_security_group],
            port=POSTGRES_PORT,
            database_name=DATABASE_NAME,
            # A generated secret name: a fixed one would block re-creating the stack while the
            # deleted secret waits out its recovery window.
            credentials=rds.Credentials.from_generated_secret(MASTER_USERNAME),
            parameter_group=self.parameter_group,
            allocated_storage=config.allocated_storage_gib,
            max_allocated_storage=config.max_allocated_storage_gib,
            storage_type=rds.StorageType.GP3,
            storage_encrypted=True,
            multi_az=config.multi_az,
            backup_retention=Duration.days(config.backup_retention_days),
            delete_automated_backups=not config.retain_on_delete,
            deletion_protection=config.deletion_protection,
            removal_policy=(
                RemovalPolicy.SNAPSHOT if config.retain_on_delete else RemovalPolicy.DESTROY
            ),
            auto_minor_version_upgrade=True,
            publicly_accessible=False,
            cloudwatch_logs_exports=["postgresql", "upgrade"],
            copy_tags_to_snapshot=True,
        )
        if self.instance.secret is None:
            raise RuntimeError("RDS did not create the credentials secret")
        self.secret: secretsmanager.ISecret = self.instance.secret

        self.rotation_security_group = ec2.SecurityGroup(
            self,
            "RotationSecurityGroup",
            vpc=vpc,
            description="Tidings secret rotation: PostgreSQL and the Secrets Manager API",
            allow_all_outbound=False,
        )
        self.rotation_security_group.add_egress_rule(
            ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "Secrets Manager API through the NAT gateway"
        )
        self._allow_instance_from(self.rotation_security_group, "Secret rotation to PostgreSQL")
        self.secret.add_rotation_schedule(
            "Rotation",
            automatically_after=Duration.days(config.secret_rotation_days),
            # Rotating during a deploy would race the migrator for the password.
            rotate_immediately_on_update=False,
            hosted_rotation=secretsmanager.HostedRotation.postgre_sql_single_user(
                vpc=vpc,
                vpc_subnets=rotation_subnets,
                security_groups=[self.rotation_security_group],
            ),
        )

        self.proxy = self.instance.add_proxy(
            "Proxy",
            secrets=[self.secret],
            vpc=vpc,
            vpc_subnets=database_subnets,
            security_groups=[self.proxy_security_group],
            require_tls=True,
            idle_client_timeout=Duration.minutes(30),
            max_connections_percent=90,
            borrow_timeout=Duration.seconds(30),
            debug_logging=False,
        )

        for index, group_id in enumerate(config.producer_security_group_ids):
            producer = ec2.SecurityGroup.from_security_group_id(
                self, f"Producer{index + 1}", group_id, mutable=False
            )
            self.proxy_security_group.add_ingress_rule(
                producer, ec2.Port.tcp(POSTGRES_PORT), f"Producer {group_id} to RDS Proxy"
            )

        output(
            self,
            "DatabaseProxyEndpoint",
            self.proxy.endpoint,
            "Producers connect here (TLS) to call tidings.enqueue",
        )
        output(
            self,
            "DatabaseSecretArn",
            self.secret.secret_arn,
            "Database credentials (rotated); the proxy and the functions read them",
        )
        output(
            self,
            "DatabaseProxySecurityGroupId",
            self.proxy_security_group.security_group_id,
            "Admits the producer security groups listed in producerSecurityGroupIds",
        )

        if not config.multi_az:
            acknowledge(
                self.instance,
                "AwsSolutions-RDS3",
                f"Stage {config.stage!r} runs one instance to save cost; "
                "prod sets multiAz in cdk.json.",
            )
        if not config.deletion_protection:
            acknowledge(
                self.instance,
                "AwsSolutions-RDS10",
                f"Stage {config.stage!r} is disposable; prod sets deletionProtection in cdk.json.",
            )
        acknowledge(
            self.instance,
            "AwsSolutions-RDS11",
            "The instance sits in isolated subnets and admits only the proxy and rotation "
            "security groups; RDS Proxy for PostgreSQL listens on 5432 anyway.",
        )

    def allow_from(self, peer: ec2.SecurityGroup, description: str) -> None:
        """Let functions in ``peer`` connect to the proxy."""
        self.proxy_security_group.add_ingress_rule(peer, ec2.Port.tcp(POSTGRES_PORT), description)
        peer.add_egress_rule(self.proxy_security_group, ec2.Port.tcp(POSTGRES_PORT), description)

    def allow_direct_from(self, peer: ec2.SecurityGroup, description: str) -> None:
        """Let functions in ``peer`` connect to the instance itself, bypassing the proxy."""
        self._allow_instance_from(peer, description)

    def _allow_instance_from(self, peer: ec2.SecurityGroup, description: str) -> None:
        self.instance_security_group.add_ingress_rule(
            peer, ec2.Port.tcp(POSTGRES_PORT), description
        )
        peer.add_egress_rule(self.instance_security_group, ec2.Port.tcp(POSTGRES_PORT), description)
