"""The Tidings stack: every construct of the deployment, wired together."""

from __future__ import annotations

from typing import Any

from aws_cdk import Stack
from aws_cdk import aws_lambda as lambda_
from aws_cdk.aws_lambda_event_sources import SqsEventSource
from constructs import Construct

from infra.alarms import Alarms
from infra.alerts import Alerts
from infra.api import IngestApi
from infra.build_layers import BuiltLayers
from infra.config import StageConfig
from infra.dashboard import Dashboard
from infra.database import Database
from infra.delivery_queue import DeliveryQueue
from infra.functions import Functions
from infra.log_encryption import LogsKey
from infra.migrations import SchemaMigrations
from infra.network import Network
from infra.portal import PortalPage
from infra.schedules import Schedules
from infra.signing_keys import SigningSecretsKey
from infra.tokens import AdminToken
from tidings.deployment import (
    FAST_LANE,
    FUNCTION_SPECS,
    PRODUCER_ROLE,
    SCHEDULED_FUNCTIONS,
    SENDER,
    SLOW_LANE,
    producer_database_user,
)


class TidingsStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        layers: BuiltLayers,
        migrations_run_token: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        self.logs_key = LogsKey(self, "LogsKey")
        network = Network(
            self,
            "Network",
            nat_gateways=config.nat_gateways,
            log_retention_days=config.log_retention_days,
            retain_egress_ips=config.retain_on_delete,
        )
        self.database = Database(
            self,
            "Database",
            vpc=network.vpc,
            database_subnets=network.database_subnets,
            rotation_subnets=network.function_subnets,
            config=config,
            logins=[
                *(
                    (spec.database_user, spec.database_role)
                    for spec in FUNCTION_SPECS
                    if spec.database_user is not None and spec.database_role is not None
                ),
                *((producer_database_user(name), PRODUCER_ROLE) for name in config.producer_logins),
            ],
        )
        self.signing_key = SigningSecretsKey(self, "SigningSecrets", retain=config.retain_on_delete)
        self.delivery = DeliveryQueue(
            self,
            "Delivery",
            sender_timeout_s=SENDER.timeout_s,
            max_receive_count=config.dlq_max_receive_count,
        )
        self.alerts = Alerts(self, "Alerts", email=config.alarm_email)
        self.admin_token = AdminToken(self, "AdminToken")
        self.functions = Functions(
            self,
            "Functions",
            config=config,
            layers=layers,
            vpc=network.vpc,
            function_subnets=network.function_subnets,
            database=self.database,
            delivery_queue=self.delivery.queue,
            slow_delivery_queue=self.delivery.slow_queue,
            alerts_topic=self.alerts.topic,
            admin_token_secret=self.admin_token.secret,
            signing_key=self.signing_key,
        )
        # The sender drains both lanes, each under a concurrency of its own: batches from the
        # fast lane's queue, one message at a time from the slow lane's, so a slow endpoint holds
        # up no other endpoint's deliveries and the fast lane's senders are never all waiting.
        for queue, lane, max_concurrency in (
            (self.delivery.queue, FAST_LANE, config.sender_max_concurrency),
            (self.delivery.slow_queue, SLOW_LANE, config.slow_sender_max_concurrency),
        ):
            self.functions["sender"].add_event_source(
                SqsEventSource(
                    queue,
                    batch_size=lane.batch_size,
                    report_batch_item_failures=True,
                    max_concurrency=max_concurrency,
                )
            )
        self.migrations = SchemaMigrations(
            self,
            "Migrations",
            migrator=self.functions["migrator"],
            log_retention_days=config.log_retention_days,
            admin_token_secret_arn=self.admin_token.secret.secret_arn,
            run_token=migrations_run_token,
            # A new key, or a login user added, runs the migrator: it re-encrypts the secrets
            # under the key and makes the users.
            extra_properties={
                "SecretsKeyArn": self.signing_key.key.key_arn,
                "Logins": ",".join(sorted(self.database.logins)),
            },
        )
        # The migrator reads the secret and connects to the instance: both must be in place,
        # with its role's grants, before the first run.
        self.migrations.resource.node.add_dependency(self.database.instance)
        self.migrations.resource.node.add_dependency(self.functions.by_name["migrator"].role)

        self.schedules = Schedules(
            self,
            "Schedules",
            functions={name: self.functions[name] for name in SCHEDULED_FUNCTIONS},
            expressions=config.schedules,
        )
        # Nothing runs a handler before the schema it needs is in place (CloudFormation creates
        # or updates a resource only after those it depends on): on the first deploy, both
        # lanes' event sources and the schedules start after the migrations; on an upgrade,
        # every function but the migrator takes its new code only once the migrations that
        # code needs have run.
        for name, deployed in self.functions.by_name.items():
            if name != "migrator":
                deployed.function.node.add_dependency(self.migrations.resource)
        for child in self.functions["sender"].node.children:
            if isinstance(child, lambda_.EventSourceMapping):
                child.node.add_dependency(self.migrations.resource)
        for rule in self.schedules.rules.values():
            rule.node.add_dependency(self.migrations.resource)

        self.api = IngestApi(
            self,
            "Ingest",
            handler=self.functions["ingest"],
            authorizer=self.functions["authorizer"],
            stage_name=config.stage,
            rate_limit=config.api_rate_limit,
            burst_limit=config.api_burst_limit,
            log_retention_days=config.log_retention_days,
        )
        self.portal = PortalPage(
            self,
            "Portal",
            api=self.api.api,
            layers=[self.functions.dependencies_layer, self.functions.tidings_layer],
            config=config,
        )
        monitored = {name: deployed.function for name, deployed in self.functions.by_name.items()}
        self.alarms = Alarms(
            self,
            "Alarms",
            config=config,
            topic=self.alerts.topic,
            queue=self.delivery.queue,
            slow_queue=self.delivery.slow_queue,
            dead_letter_queue=self.delivery.dead_letter_queue,
            functions=monitored,
            database=self.database.instance,
        )
        self.dashboard = Dashboard(
            self,
            "Dashboard",
            dashboard_name=f"Tidings-{config.stage}",
            queue=self.delivery.queue,
            slow_queue=self.delivery.slow_queue,
            dead_letter_queue=self.delivery.dead_letter_queue,
            functions=monitored,
        )
