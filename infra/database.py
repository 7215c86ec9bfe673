"""PostgreSQL 16 on RDS in the isolated subnets, its login users' secrets, and the RDS Proxy
that the functions and producers connect through.

Only the proxy (and the secret-rotation functions and the migrator, which must reach the
instance itself) may open connections to the instance; functions are let in to the proxy one
security group at a time by ``allow_from``.

Who logs in as whom: the master user (its generated secret) is the migrator's alone. Every other
function, and every producer, has a login user of its own, a member of its group role (what each
role may do is ``tidings.dal.access``; the migrator makes the users with the passwords of their
secrets). Those secrets are registered on the proxy, which uses them to log in to the instance;
clients authenticate to the proxy with IAM (``rds-db:connect`` on their own user) and read no
secret at all. The master secret is not registered on the proxy.

The parameter group never lets a statement's text, or an error's details, into the server log
(which goes to CloudWatch Logs): ``tidings.deployment.DATABASE_LOG_PARAMETERS``. Slow statements
are found in pg_stat_statements (and Performance Insights), which show them normalised.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aws_cdk import Aws, Duration, Fn, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.common import SECRETS_MANAGER_KEY, acknowledge, checkov_skip, output
from infra.config import StageConfig
from tidings.deployment import DATABASE_LOG_PARAMETERS

DATABASE_NAME = "tidings"
MASTER_USERNAME = "tidings"
POSTGRES_PORT = 5432
# A full version: CloudFormation compares the template, not the instance, so minor upgrades that
# RDS applies on its own do not fight the next deploy. Raise it to move to a newer minor.
POSTGRES_VERSION = rds.PostgresEngineVersion.VER_16_13
# A long-running query or an abandoned transaction holds locks and keeps old row versions
# alive, which bloats the hot queue table; these bound both.
_QUEUE_HEALTH_PARAMETERS = ("statement_timeout", "idle_in_transaction_session_timeout")
# Statements with their literals replaced, for finding slow ones without logging any text.
_STATEMENT_STATISTICS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "top",
    # Utility statements (ALTER ROLE ... PASSWORD among them) are kept as written: leave them out.
    "pg_stat_statements.track_utility": "0",
}
# The login users' passwords: long, and only characters every client takes without quoting.
_PASSWORD_EXCLUDED = " %+~`#$&*()|[]{}:;<>?!'/@\"\\"  # noqa: S105 - characters, not a password


@dataclass(frozen=True, slots=True)
class DatabaseLogin:
    """A login user of the database: its name, its group role, its secret (on the proxy)."""

    user: str
    role: str
    secret: secretsmanager.ISecret

    def connect_arn(self, proxy: rds.DatabaseProxy) -> str:
        """What ``rds-db:connect`` names to let an IAM principal log in to the proxy as it."""
        proxy_id = Fn.select(6, Fn.split(":", proxy.db_proxy_arn))
        return (
            f"arn:{Aws.PARTITION}:rds-db:{Aws.REGION}:{Aws.ACCOUNT_ID}"
            f":dbuser:{proxy_id}/{self.user}"
        )


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
        logins: Sequence[tuple[str, str]],
    ) -> None:
        super().__init__(scope, construct_id)
        engine = rds.DatabaseInstanceEngine.postgres(version=POSTGRES_VERSION)
        self.parameter_group = rds.ParameterGroup(
            self,
            "Parameters",
            engine=engine,
            description=(
                "Tidings: bounded statements and idle transactions, TLS only, no statement text "
                "in the log"
            ),
            parameters={
                "statement_timeout": str(config.statement_timeout_ms),
                "idle_in_transaction_session_timeout": str(config.idle_in_transaction_timeout_ms),
                "rds.force_ssl": "1",
                **DATABASE_LOG_PARAMETERS,
                **_STATEMENT_STATISTICS,
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
            enable_performance_insights=config.performance_insights or None,
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
        self._rotate(self.secret, vpc, rotation_subnets, config.secret_rotation_days)

        # One secret per login user: the proxy logs in with it, the migrator sets the password
        # from it, and it is rotated like the master's (each user may change its own password).
        self.logins: dict[str, DatabaseLogin] = {}
        for user, role in logins:
            scope = Construct(self, "Login" + "".join(p.capitalize() for p in user.split("_")))
            generated = rds.DatabaseSecret(
                scope, "Secret", username=user, exclude_characters=_PASSWORD_EXCLUDED
            )
            checkov_skip(generated, "CKV_AWS_149", SECRETS_MANAGER_KEY)
            attached = generated.attach(self.instance)
            self._rotate(attached, vpc, rotation_subnets, config.secret_rotation_days)
            self.logins[user] = DatabaseLogin(user, role, attached)

        self.proxy = self.instance.add_proxy(
            "Proxy",
            secrets=[login.secret for login in self.logins.values()],
            iam_auth=True,
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
            "Producers connect here (TLS, IAM authentication) to call tidings.enqueue",
        )
        output(
            self,
            "DatabaseSecretArn",
            self.secret.secret_arn,
            "The master user's credentials (rotated): the migrator's and break-glass "
            "administration's only; never a producer's",
        )
        producers = [login for login in self.logins.values() if login.role == "tidings_producer"]
        output(
            self,
            "DatabaseProducerUsers",
            ",".join(login.user for login in producers) or "-",
            "The producers' login users (members of tidings_producer), one per producerLogins",
        )
        output(
            self,
            "DatabaseProducerConnectArns",
            Fn.join(",", [login.connect_arn(self.proxy) for login in producers] or ["-"]),
            "Allow rds-db:connect on one of these to let an application log in as that producer",
        )
        output(
            self,
            "DatabaseProxySecurityGroupId",
            self.proxy_security_group.security_group_id,
            "Admits the producer security groups listed in producerSecurityGroupIds",
        )

        # The generated secret itself (self.secret is its attachment to the instance).
        checkov_skip(self.instance.node.find_child("Secret"), "CKV_AWS_149", SECRETS_MANAGER_KEY)
        checkov_skip(
            self.instance,
            "CKV_AWS_161",
            "Clients authenticate with IAM at RDS Proxy. The instance admits only the proxy, "
            "which logs in with the login users' secrets, and the migrator and secret rotation, "
            "with the master secret: nothing would use IAM authentication there.",
        )
        checkov_skip(
            self.instance,
            "CKV_AWS_118",
            "The instance's CloudWatch metrics (CPU, connections, free storage: alarmed) and "
            "Performance Insights where the stage enables it cover operating it; enhanced "
            "monitoring's per-second OS metrics would add a role and log ingestion.",
        )
        if not config.multi_az:
            checkov_skip(
                self.instance,
                "CKV_AWS_157",
                f"Stage {config.stage!r} runs one instance to save cost; prod sets multiAz in "
                "cdk.json.",
            )
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

    def _rotate(
        self,
        secret: secretsmanager.ISecret,
        vpc: ec2.IVpc,
        subnets: ec2.SubnetSelection,
        days: int,
    ) -> None:
        secret.add_rotation_schedule(
            "Rotation",
            automatically_after=Duration.days(days),
            # Rotating during a deploy would race the migrator for the password.
            rotate_immediately_on_update=False,
            hosted_rotation=secretsmanager.HostedRotation.postgre_sql_single_user(
                vpc=vpc,
                vpc_subnets=subnets,
                security_groups=[self.rotation_security_group],
            ),
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
