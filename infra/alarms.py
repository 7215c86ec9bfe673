"""CloudWatch alarms on the signals that mean deliveries are late or lost, all to the alerts
topic (on alarm and on recovery)."""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_rds as rds
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import StageConfig

_PERIOD = Duration.minutes(5)
_GIB = 1024**3
_CPU_PERCENT = 80


class Alarms(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        topic: sns.ITopic,
        queue: sqs.IQueue,
        slow_queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        functions: Mapping[str, lambda_.IFunction],
        database: rds.IDatabaseInstance,
    ) -> None:
        super().__init__(scope, construct_id)
        self._action = actions.SnsAction(topic)
        self.alarms: dict[str, cloudwatch.Alarm] = {}

        self._add(
            "OldestMessageAge",
            queue.metric_approximate_age_of_oldest_message(
                period=_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=config.oldest_message_alarm_s,
            evaluation_periods=2,
            description="Messages wait in the delivery queue: senders are failing or too few",
        )
        self._add(
            "SlowLaneOldestMessageAge",
            slow_queue.metric_approximate_age_of_oldest_message(
                period=_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=config.oldest_message_alarm_s,
            evaluation_periods=2,
            description=(
                "Messages wait in the slow lane's delivery queue: its senders are failing or too "
                "few (slowSenderMaxConcurrency)"
            ),
        )
        self._add(
            "DeadLetters",
            dead_letter_queue.metric_approximate_number_of_messages_visible(
                period=_PERIOD, statistic=cloudwatch.Stats.MAXIMUM
            ),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            # Both lanes' queues redrive to this one.
            description="SQS gave up on delivery messages: look at the dead-letter queue",
        )
        for name, function in functions.items():
            label = "".join(part.capitalize() for part in name.split("_"))
            self._add(
                f"{label}Errors",
                function.metric_errors(period=_PERIOD, statistic=cloudwatch.Stats.SUM),
                threshold=1,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                description=f"The {name} function failed",
            )
            self._add(
                f"{label}Throttles",
                function.metric_throttles(period=_PERIOD, statistic=cloudwatch.Stats.SUM),
                threshold=1,
                comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
                description=f"The {name} function was throttled",
            )
        self._add(
            "DatabaseCpu",
            database.metric_cpu_utilization(period=_PERIOD),
            threshold=_CPU_PERCENT,
            evaluation_periods=3,
            description="PostgreSQL CPU is high",
        )
        self._add(
            "DatabaseConnections",
            database.metric_database_connections(period=_PERIOD),
            threshold=config.db_connections_alarm,
            evaluation_periods=2,
            description="PostgreSQL has many connections: check RDS Proxy and sender concurrency",
        )
        self._add(
            "DatabaseFreeStorage",
            database.metric_free_storage_space(period=_PERIOD),
            threshold=config.free_storage_alarm_gib * _GIB,
            comparison=cloudwatch.ComparisonOperator.LESS_THAN_THRESHOLD,
            description="PostgreSQL is running out of storage: check pruning",
        )

    def _add(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        description: str,
        evaluation_periods: int = 1,
        comparison: cloudwatch.ComparisonOperator = (
            cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD
        ),
    ) -> None:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            evaluation_periods=evaluation_periods,
            comparison_operator=comparison,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
            alarm_description=f"Tidings: {description}",
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms[construct_id] = alarm
