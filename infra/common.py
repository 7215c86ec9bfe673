"""Small helpers shared by the constructs."""

from __future__ import annotations

from typing import Any

from aws_cdk import Acknowledgment, CfnOutput, CfnResource, Validations
from aws_cdk import aws_logs as logs
from constructs import Construct, IConstruct

# CloudWatch Logs accepts only these retention periods (in days).
_RETENTION_BY_DAYS: tuple[tuple[int, logs.RetentionDays], ...] = (
    (1, logs.RetentionDays.ONE_DAY),
    (3, logs.RetentionDays.THREE_DAYS),
    (5, logs.RetentionDays.FIVE_DAYS),
    (7, logs.RetentionDays.ONE_WEEK),
    (14, logs.RetentionDays.TWO_WEEKS),
    (30, logs.RetentionDays.ONE_MONTH),
    (60, logs.RetentionDays.TWO_MONTHS),
    (90, logs.RetentionDays.THREE_MONTHS),
    (120, logs.RetentionDays.FOUR_MONTHS),
    (150, logs.RetentionDays.FIVE_MONTHS),
    (180, logs.RetentionDays.SIX_MONTHS),
    (365, logs.RetentionDays.ONE_YEAR),
    (400, logs.RetentionDays.THIRTEEN_MONTHS),
    (545, logs.RetentionDays.EIGHTEEN_MONTHS),
    (731, logs.RetentionDays.TWO_YEARS),
    (1827, logs.RetentionDays.FIVE_YEARS),
    (3653, logs.RetentionDays.TEN_YEARS),
)


def log_retention(days: int) -> logs.RetentionDays:
    """The shortest retention CloudWatch Logs offers that keeps logs at least ``days`` days."""
    for allowed, retention in _RETENTION_BY_DAYS:
        if allowed >= days:
            return retention
    return _RETENTION_BY_DAYS[-1][1]


def acknowledge(scope: IConstruct, rule_id: str, reason: str) -> None:
    """Acknowledge one cdk-nag finding on ``scope`` (and below it), with the reason it is fine."""
    Validations.of(scope).acknowledge(Acknowledgment(id=rule_id, reason=reason))


# Why checkov's Lambda checks that every function fails are fine here (the portal's and the
# migrations provider's functions too).
NO_RESERVED_CONCURRENCY = (
    "Concurrency is bounded where it matters without carving out the account's pool: the sender "
    "by its event source's maximum concurrency, the API's functions by the stage's and usage "
    "plan's throttling, the others by their schedule or caller; reserved concurrency would also "
    "fail the deploy in an account whose concurrency limit is still low."
)
NO_DEAD_LETTER_QUEUE = (
    "A dead-letter queue serves asynchronous invocations, where nothing here needs one: the "
    "sender's failed messages stay in SQS and go to the delivery dead-letter queue, the API and "
    "CloudFormation invoke synchronously and see the error, and a failed scheduled run is "
    "followed by the next; every function's errors raise an alarm."
)
NO_ENVIRONMENT_KEY = (
    "The environment holds names, hosts, URLs and ARNs, never a secret (credentials come from "
    "IAM tokens and Secrets Manager), and Lambda encrypts it at rest with its own key."
)

# Why checkov's "Secrets Manager secret on a customer managed key" is fine for every secret here.
SECRETS_MANAGER_KEY = (
    "Encrypted with Secrets Manager's AWS managed key: who may read a secret is decided by IAM on "
    "the secret (each role names its own), which a customer managed key would not change, and "
    "that key would also have to be granted to RDS Proxy and to the hosted rotation."
)


def checkov_skip(scope: IConstruct, check_id: str, reason: str) -> None:
    """Skip one checkov check on the CloudFormation resource of ``scope``, with the reason it is
    fine; checkov reads the skip from the resource's ``Metadata.checkov.skip`` (``make lint``)."""
    resource = scope if isinstance(scope, CfnResource) else scope.node.default_child
    if not isinstance(resource, CfnResource):
        raise TypeError(f"{scope.node.path} has no CloudFormation resource to skip {check_id} on")
    checkov: dict[str, Any] = resource.get_metadata("checkov") or {"skip": []}
    if any(skip["id"] == check_id for skip in checkov["skip"]):
        return
    checkov["skip"] = [*checkov["skip"], {"id": check_id, "comment": reason}]
    resource.add_metadata("checkov", checkov)


def output(scope: Construct, name: str, value: str, description: str) -> CfnOutput:
    """A stack output under the fixed key ``name``, so scripts and docs can name it."""
    cfn_output = CfnOutput(scope, name, value=value, description=description)
    cfn_output.override_logical_id(name)
    return cfn_output
