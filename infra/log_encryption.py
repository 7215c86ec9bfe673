"""The KMS key that encrypts every CloudWatch Logs log group of the stack.

The functions' logs, the API's access logs and the VPC's flow logs name endpoints, callers' IP
addresses and errors: encrypted under a key of the stack's own, reading them takes
``kms:Decrypt`` on it besides ``logs:`` permissions. The key lets CloudWatch Logs (and only for
log groups of this account and region) use it; the writers need nothing, since CloudWatch Logs
encrypts what they send. An aspect gives the key to every log group, so one added later is
covered without being wired to it.
"""

from __future__ import annotations

import jsii
from aws_cdk import Aspects, Duration, IAspect, RemovalPolicy, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct


class LogsKey(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        stack = Stack.of(self)
        self.key = kms.Key(
            self,
            "Key",
            description="Tidings: encrypts the stack's CloudWatch Logs log groups",
            enable_key_rotation=True,
            # The log groups go with the stack; the key waits out the shortest window after them.
            pending_window=Duration.days(7),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.key.add_to_resource_policy(
            iam.PolicyStatement(
                principals=[iam.ServicePrincipal(f"logs.{stack.region}.amazonaws.com")],
                actions=[
                    "kms:Encrypt*",
                    "kms:Decrypt*",
                    "kms:ReEncrypt*",
                    "kms:GenerateDataKey*",
                    "kms:Describe*",
                ],
                resources=["*"],
                conditions={
                    "ArnLike": {
                        "kms:EncryptionContext:aws:logs:arn": (
                            f"arn:{stack.partition}:logs:{stack.region}:{stack.account}:log-group:*"
                        )
                    }
                },
            )
        )
        Aspects.of(scope).add(_EncryptLogGroups(self.key))


@jsii.implements(IAspect)
class _EncryptLogGroups:
    def __init__(self, key: kms.IKey) -> None:
        self._key = key

    def visit(self, node: IConstruct) -> None:
        if isinstance(node, logs.CfnLogGroup) and node.kms_key_id is None:
            node.kms_key_id = self._key.key_arn
