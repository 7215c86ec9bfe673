"""The KMS key that encrypts the data keys of the endpoints' signing secrets.

Signing secrets are stored encrypted (``tidings.secrets``): each under a data key, which this key
encrypts. Functions get exactly what their spec asks for: ``GenerateDataKey`` to make data keys
for new secrets, ``Decrypt`` to open them, both only under the encryption context Tidings always
gives, so the key opens nothing else. Losing the key loses every secret, so it is kept when the
stack is deleted on a stage that keeps its database, and always waits out the longest deletion
window.
"""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from constructs import Construct

from tidings.deployment import FunctionSpec
from tidings.secrets.master_keys import KMS_ENCRYPTION_CONTEXT


class SigningSecretsKey(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, retain: bool) -> None:
        super().__init__(scope, construct_id)
        self.key = kms.Key(
            self,
            "Key",
            description="Tidings: encrypts the data keys of the endpoints' signing secrets",
            enable_key_rotation=True,
            pending_window=Duration.days(30),
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )

    def grant(self, role: iam.IRole, spec: FunctionSpec) -> None:
        """What ``spec`` does with signing secrets, on this key only, under Tidings' context."""
        actions = []
        if spec.opens_signing_secrets:
            actions.append("kms:Decrypt")
        if spec.seals_signing_secrets:
            actions.append("kms:GenerateDataKey")
        if not actions:
            return
        role.add_to_principal_policy(
            iam.PolicyStatement(
                actions=actions,
                resources=[self.key.key_arn],
                conditions={
                    "StringEquals": {
                        f"kms:EncryptionContext:{name}": value
                        for name, value in KMS_ENCRYPTION_CONTEXT.items()
                    }
                },
            )
        )
