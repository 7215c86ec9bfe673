"""The KMS key of the signing secrets, who may use it, and the migrator's reasons to run."""

from __future__ import annotations

from typing import Any

from tests.infra.conftest import Synthesized


def _key(synth: Synthesized) -> dict[str, Any]:
    return dict(synth.raw["Resources"][synth.logical_id(synth.stack.signing_key.key)])


def test_the_signing_secrets_key_rotates_and_outlives_a_stack_that_keeps_its_data(
    dev: Synthesized, prod: Synthesized
) -> None:
    for synth in (dev, prod):
        key = _key(synth)
        assert key["Properties"]["EnableKeyRotation"] is True
        assert key["Properties"]["PendingWindowInDays"] == 30
    # Lose the key, lose the secrets: prod keeps it when the stack goes, as it keeps the data.
    assert prod.config.retain_on_delete and _key(prod)["DeletionPolicy"] == "Retain"
    assert not dev.config.retain_on_delete and _key(dev)["DeletionPolicy"] == "Delete"


def test_the_proxy_reads_the_login_secrets_but_not_the_masters(dev: Synthesized) -> None:
    database = dev.stack.database
    master = dev.stack.resolve(database.secret.secret_arn)
    proxy_role = dev.stack.resolve(database.proxy.node.find_child("IAMRole").role_name)
    readable = [
        statement["Resource"]
        for policy in dev.resources("AWS::IAM::Policy").values()
        if proxy_role in policy["Properties"]["Roles"]
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]
        if "secretsmanager:GetSecretValue" in statement["Action"]
    ]
    flat = [
        r for resource in readable for r in (resource if isinstance(resource, list) else [resource])
    ]
    assert master not in flat
    for login in database.logins.values():
        assert dev.stack.resolve(login.secret.secret_arn) in flat


def test_a_new_key_or_login_runs_the_migrator(dev: Synthesized) -> None:
    (resource,) = dev.resources("Custom::TidingsSchema").values()
    properties = resource["Properties"]
    assert properties["SecretsKeyArn"] == dev.stack.resolve(dev.stack.signing_key.key.key_arn)
    assert properties["Logins"] == ",".join(sorted(dev.stack.database.logins))
