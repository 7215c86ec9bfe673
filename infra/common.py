"""Small helpers shared by the constructs."""

from __future__ import annotations

from aws_cdk import Acknowledgment, CfnOutput, Validations
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


def output(scope: Construct, name: str, value: str, description: str) -> CfnOutput:
    """A stack output under the fixed key ``name``, so scripts and docs can name it."""
    cfn_output = CfnOutput(scope, name, value=value, description=description)
    cfn_output.override_logical_id(name)
    return cfn_output
