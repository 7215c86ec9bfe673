"""The deploy's first admin token: a Secrets Manager secret that the migrator fills.

CloudFormation creates the secret with a random placeholder; the migrator custom resource
(``tidings.handlers.migrator``) replaces it with a Tidings token and stores the token's hash, so
the token never passes through a template, a resource property or a log. Read it with
``aws secretsmanager get-secret-value --secret-id <AdminTokenSecretArn>``.
"""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.common import SECRETS_MANAGER_KEY, acknowledge, checkov_skip, output


class AdminToken(Construct):
    def __init__(self, scope: Construct, construct_id: str) -> None:
        super().__init__(scope, construct_id)
        # A generated name (found through the stack output): a fixed one would block re-creating
        # the stack while the deleted secret waits out its recovery window.
        self.secret = secretsmanager.Secret(
            self,
            "Secret",
            description=(
                "The first admin token of the Tidings API (Authorization: Bearer <token>), "
                "written by the migrator during the deploy"
            ),
            # A placeholder the migrator replaces; it is no token.
            generate_secret_string=secretsmanager.SecretStringGenerator(
                exclude_punctuation=True, password_length=16
            ),
            removal_policy=RemovalPolicy.DESTROY,
        )
        acknowledge(
            self.secret,
            "AwsSolutions-SMG4",
            "An API token is rotated by making a new one (tidings tokens create) and revoking "
            "the old (tidings tokens revoke); Secrets Manager's rotation cannot revoke it.",
        )
        checkov_skip(self.secret, "CKV_AWS_149", SECRETS_MANAGER_KEY)
        output(
            self,
            "AdminTokenSecretArn",
            self.secret.secret_arn,
            "The first admin token: aws secretsmanager get-secret-value --secret-id <arn>",
        )
