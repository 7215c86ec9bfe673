"""The one SNS topic that every alert goes to, encrypted with a key of its own.

A customer-managed key rather than ``alias/aws/sns``: CloudWatch alarms can publish to an
encrypted topic only if the key policy lets ``cloudwatch.amazonaws.com`` use the key, and the
key policy of an AWS-managed key cannot be changed.
"""

from __future__ import annotations

from aws_cdk import Aws, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from infra.common import output


class Alerts(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, email: str) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="Tidings alerts topic",
            enable_key_rotation=True,
            removal_policy=RemovalPolicy.DESTROY,
        )
        # Only this account's alarms may use the key through CloudWatch: without the source
        # conditions, CloudWatch acting for any account could (the confused deputy).
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid="CloudWatchAlarmsPublish",
                principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
                actions=["kms:Decrypt", "kms:GenerateDataKey*"],
                resources=["*"],
                conditions={
                    "StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {
                        "aws:SourceArn": (
                            f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:*"
                        )
                    },
                },
            )
        )
        self.topic = sns.Topic(
            self,
            "Topic",
            display_name="Tidings alerts",
            master_key=self.key,
            enforce_ssl=True,
        )
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
        output(
            self,
            "AlertsTopicArn",
            self.topic.topic_arn,
            "Subscribe to this topic to receive Tidings alerts",
        )
