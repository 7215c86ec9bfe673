"""The CloudWatch dashboard: throughput, queue depth, age of the oldest message, dead letters
and delivery latency percentiles. The SQS figures are shown for each lane's queue (the fast lane's
and the slow lane's) side by side.

Queue and Lambda figures come from the AWS namespaces; deliveries, dead letters and latency are
the metrics the claimer and sender emit through Powertools (EMF) in the ``Tidings`` namespace,
with the ``service`` dimension that every function shares. The health monitor adds, every five
minutes, what PostgreSQL holds: the backlog by state, its oldest message and the dead letters.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.functions import METRICS_NAMESPACE, SERVICE_NAME

DELIVERY_LATENCY_METRIC = "DeliveryLatency"
# Counts per outcome, as the sender and claimer emit them, with their labels here.
DELIVERY_COUNTS = {
    "Claimed": "claimed from PostgreSQL",
    "Delivered": "delivered",
    "Failed": "failed, retry scheduled",
    "DeadLettered": "dead-lettered",
}
LATENCY_PERCENTILES = ("p50", "p95", "p99")
# Gauges the health monitor emits from PostgreSQL, with their labels here.
DATABASE_BACKLOG = {
    "Pending": "PostgreSQL: pending",
    "AwaitingRetry": "PostgreSQL: awaiting retry",
    "InFlight": "PostgreSQL: in flight",
}
OLDEST_UNDELIVERED_METRIC = "OldestUndeliveredAge"
DEAD_LETTERS_METRIC = "DeadLetters"
_PERIOD = Duration.minutes(1)
_HEALTH_PERIOD = Duration.minutes(5)
_WIDTH = 12


class Dashboard(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        dashboard_name: str,
        queue: sqs.IQueue,
        slow_queue: sqs.IQueue,
        dead_letter_queue: sqs.IQueue,
        functions: Mapping[str, lambda_.IFunction],
    ) -> None:
        super().__init__(scope, construct_id)
        sender = functions["sender"]
        lanes = (("fast lane", queue), ("slow lane", slow_queue))
        claimer = functions["claimer"]
        latency = [
            _tidings_metric(DELIVERY_LATENCY_METRIC, percentile, f"latency {percentile}")
            for percentile in LATENCY_PERCENTILES
        ]
        outcomes = {
            name: _tidings_metric(name, cloudwatch.Stats.SUM, label)
            for name, label in DELIVERY_COUNTS.items()
        }
        backlog = [
            _tidings_metric(name, cloudwatch.Stats.MAXIMUM, label, _HEALTH_PERIOD)
            for name, label in DATABASE_BACKLOG.items()
        ]
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=dashboard_name,
            default_interval=Duration.hours(3),
            widgets=[
                [
                    cloudwatch.GraphWidget(
                        title="Throughput (messages per minute)",
                        width=_WIDTH,
                        left=list(outcomes.values()),
                        right=[
                            metric
                            for lane, q in lanes
                            for metric in (
                                q.metric_number_of_messages_sent(
                                    period=_PERIOD, label=f"SQS {lane}: sent"
                                ),
                                q.metric_number_of_messages_deleted(
                                    period=_PERIOD, label=f"SQS {lane}: handled"
                                ),
                            )
                        ],
                    ),
                    cloudwatch.GraphWidget(
                        title="Queue depth",
                        width=_WIDTH,
                        left=[
                            metric
                            for lane, q in lanes
                            for metric in (
                                q.metric_approximate_number_of_messages_visible(
                                    period=_PERIOD, label=f"SQS {lane}: waiting"
                                ),
                                q.metric_approximate_number_of_messages_not_visible(
                                    period=_PERIOD, label=f"SQS {lane}: in flight"
                                ),
                            )
                        ],
                        right=backlog,
                    ),
                ],
                [
                    cloudwatch.GraphWidget(
                        title="Age of the oldest undelivered message (s)",
                        width=_WIDTH,
                        left=[
                            *(
                                q.metric_approximate_age_of_oldest_message(
                                    period=_PERIOD,
                                    statistic=cloudwatch.Stats.MAXIMUM,
                                    label=f"SQS {lane}: oldest queued",
                                )
                                for lane, q in lanes
                            ),
                            _tidings_metric(
                                OLDEST_UNDELIVERED_METRIC,
                                cloudwatch.Stats.MAXIMUM,
                                "PostgreSQL: oldest undelivered",
                                _HEALTH_PERIOD,
                            ),
                        ],
                    ),
                    cloudwatch.GraphWidget(
                        title="Dead letters",
                        width=_WIDTH,
                        left=[
                            outcomes["DeadLettered"],
                            _tidings_metric(
                                DEAD_LETTERS_METRIC,
                                cloudwatch.Stats.MAXIMUM,
                                "PostgreSQL: dead letters held",
                                _HEALTH_PERIOD,
                            ),
                        ],
                        right=[
                            dead_letter_queue.metric_approximate_number_of_messages_visible(
                                period=_PERIOD,
                                statistic=cloudwatch.Stats.MAXIMUM,
                                label="SQS dead-letter queue depth",
                            )
                        ],
                    ),
                ],
                [
                    cloudwatch.GraphWidget(
                        title="Delivery latency (ms)",
                        width=_WIDTH,
                        left=latency,
                    ),
                    cloudwatch.GraphWidget(
                        title="Sender and claimer invocations and errors",
                        width=_WIDTH,
                        left=[
                            sender.metric_invocations(period=_PERIOD, label="sender invocations"),
                            claimer.metric_invocations(period=_PERIOD, label="claimer invocations"),
                        ],
                        right=[
                            sender.metric_errors(period=_PERIOD, label="sender errors"),
                            claimer.metric_errors(period=_PERIOD, label="claimer errors"),
                        ],
                    ),
                ],
            ],
        )


def _tidings_metric(
    name: str, statistic: str, label: str, period: Duration = _PERIOD
) -> cloudwatch.Metric:
    return cloudwatch.Metric(
        namespace=METRICS_NAMESPACE,
        metric_name=name,
        dimensions_map={"service": SERVICE_NAME},
        statistic=statistic,
        period=period,
        label=label,
    )
