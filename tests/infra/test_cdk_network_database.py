"""Network and database: subnets, NAT and its address, PostgreSQL settings, logins, proxy."""

from __future__ import annotations

import json
from typing import Any

import pytest
from aws_cdk.assertions import Match

from infra.database import DATABASE_NAME
from tests.infra.conftest import PRODUCER_SECURITY_GROUP, Synthesized
from tidings.deployment import (
    DATABASE_LOG_PARAMETERS,
    FUNCTION_SPECS,
    PRODUCER_ROLE,
    producer_database_user,
)


def _subnet_ids_named(synth: Synthesized, name: str) -> set[str]:
    return {
        logical_id
        for logical_id, subnet in synth.resources("AWS::EC2::Subnet").items()
        if {"Key": "aws-cdk:subnet-name", "Value": name} in subnet["Properties"]["Tags"]
    }


def _refs(values: list[dict[str, Any]]) -> set[str]:
    return {value["Ref"] for value in values}


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_nat_gateway_count_follows_the_stage(stage: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    expected = synth.config.nat_gateways
    synth.template.resource_count_is("AWS::EC2::NatGateway", expected)
    synth.template.resource_count_is("AWS::EC2::EIP", expected)
    assert (stage, expected) in {("dev", 1), ("prod", 2)}


def test_egress_addresses_are_the_nat_elastic_ips(prod: Synthesized) -> None:
    eips = set(prod.resources("AWS::EC2::EIP"))
    nat_allocations = {
        nat["Properties"]["AllocationId"]["Fn::GetAtt"][0]
        for nat in prod.resources("AWS::EC2::NatGateway").values()
    }
    assert nat_allocations == eips
    assert {eip["DeletionPolicy"] for eip in prod.resources("AWS::EC2::EIP").values()} == {"Retain"}
    joined = prod.raw["Outputs"]["EgressIps"]["Value"]["Fn::Join"]
    assert joined[0] == ","
    assert _refs(joined[1]) == eips


def test_database_lives_in_isolated_subnets_and_functions_in_private_ones(
    dev: Synthesized,
) -> None:
    isolated = _subnet_ids_named(dev, "database")
    private = _subnet_ids_named(dev, "functions")
    assert len(isolated) == 2 and len(private) == 2
    (subnet_group,) = dev.resources("AWS::RDS::DBSubnetGroup").values()
    assert _refs(subnet_group["Properties"]["SubnetIds"]) == isolated
    routes = dev.resources("AWS::EC2::Route").values()
    isolated_tables = {
        assoc["Properties"]["RouteTableId"]["Ref"]
        for assoc in dev.resources("AWS::EC2::SubnetRouteTableAssociation").values()
        if assoc["Properties"]["SubnetId"]["Ref"] in isolated
    }
    assert not [r for r in routes if r["Properties"]["RouteTableId"]["Ref"] in isolated_tables]
    functions = dev.resources("AWS::Lambda::Function")
    in_vpc = [f for f in functions.values() if "VpcConfig" in f["Properties"]]
    assert len(in_vpc) == len(FUNCTION_SPECS)
    for function in in_vpc:
        assert _refs(function["Properties"]["VpcConfig"]["SubnetIds"]) == private
    dev.template.resource_count_is("AWS::EC2::FlowLog", 1)


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_postgres_instance_follows_the_stage(stage: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    config = synth.config
    (instance,) = synth.resources("AWS::RDS::DBInstance").values()
    properties = instance["Properties"]
    assert properties["Engine"] == "postgres"
    assert properties["EngineVersion"].split(".")[0] == "16"
    assert properties["StorageEncrypted"] is True
    assert properties["PubliclyAccessible"] is False
    assert properties["DBName"] == DATABASE_NAME
    assert properties["BackupRetentionPeriod"] == config.backup_retention_days
    assert properties["DeletionProtection"] is config.deletion_protection
    assert properties["MultiAZ"] is config.multi_az
    assert properties["DBInstanceClass"] == f"db.{config.instance_type}"
    expected_policy = "Snapshot" if config.retain_on_delete else "Delete"
    assert instance["DeletionPolicy"] == expected_policy
    if stage == "prod":
        assert config.deletion_protection and config.multi_az and config.retain_on_delete
        assert config.backup_retention_days >= 7


def test_parameter_group_bounds_statements_and_idle_transactions(dev: Synthesized) -> None:
    dev.template.has_resource_properties(
        "AWS::RDS::DBParameterGroup",
        {
            "Family": "postgres16",
            "Parameters": Match.object_like(
                {
                    "statement_timeout": str(dev.config.statement_timeout_ms),
                    "idle_in_transaction_session_timeout": str(
                        dev.config.idle_in_transaction_timeout_ms
                    ),
                    "rds.force_ssl": "1",
                }
            ),
        },
    )
    (instance,) = dev.resources("AWS::RDS::DBInstance").values()
    (group_id,) = dev.resources("AWS::RDS::DBParameterGroup")
    assert instance["Properties"]["DBParameterGroupName"] == {"Ref": group_id}


def test_the_parameter_group_never_logs_statement_text_and_keeps_statistics_instead(
    dev: Synthesized, prod: Synthesized
) -> None:
    (group,) = dev.resources("AWS::RDS::DBParameterGroup").values()
    parameters = group["Properties"]["Parameters"]
    for name, value in DATABASE_LOG_PARAMETERS.items():
        assert parameters[name] == value, name
    assert parameters["log_min_duration_statement"] == "-1"
    assert parameters["log_min_error_statement"] == "panic"
    assert parameters["log_error_verbosity"] == "terse"
    assert parameters["shared_preload_libraries"] == "pg_stat_statements"
    assert parameters["pg_stat_statements.track_utility"] == "0"
    (dev_instance,) = dev.resources("AWS::RDS::DBInstance").values()
    (prod_instance,) = prod.resources("AWS::RDS::DBInstance").values()
    assert "EnablePerformanceInsights" not in dev_instance["Properties"]
    assert prod_instance["Properties"]["EnablePerformanceInsights"] is True
    # What the instance logs goes to CloudWatch Logs: hence the settings above.
    assert "postgresql" in dev_instance["Properties"]["EnableCloudwatchLogsExports"]


def _rotation_of(synth: Synthesized, attachment_id: str) -> dict[str, Any]:
    (rotation,) = [
        r["Properties"]
        for r in synth.resources("AWS::SecretsManager::RotationSchedule").values()
        if r["Properties"]["SecretId"] == {"Ref": attachment_id}
    ]
    return rotation


def test_one_login_per_function_and_producer_each_with_its_own_rotated_secret_on_the_proxy(
    dev: Synthesized,
) -> None:
    database = dev.stack.database
    expected = {
        spec.database_user: spec.database_role
        for spec in FUNCTION_SPECS
        if spec.database_user is not None
    } | {producer_database_user(name): PRODUCER_ROLE for name in dev.config.producer_logins}
    assert {user: login.role for user, login in database.logins.items()} == expected
    assert len(expected) == len(FUNCTION_SPECS) - 1 + len(dev.config.producer_logins)

    master = dev.stack.resolve(database.secret.secret_arn)
    login_secrets = {
        user: dev.stack.resolve(login.secret.secret_arn) for user, login in database.logins.items()
    }
    assert len({str(arn) for arn in login_secrets.values()}) == len(login_secrets)
    for attachment in [master, *login_secrets.values()]:
        rotation = _rotation_of(dev, attachment["Ref"])
        assert rotation["HostedRotationLambda"]["RotationType"] == "PostgreSQLSingleUser"
        assert rotation["RotationRules"] == {
            "ScheduleExpression": f"rate({dev.config.secret_rotation_days} days)"
        }
    # Each login secret holds its own user's name, which the migrator makes.
    for user, arn in login_secrets.items():
        attachment = dev.raw["Resources"][arn["Ref"]]
        secret = dev.raw["Resources"][attachment["Properties"]["SecretId"]["Ref"]]
        template = json.loads(secret["Properties"]["GenerateSecretString"]["SecretStringTemplate"])
        assert template == {"username": user}

    (proxy,) = dev.resources("AWS::RDS::DBProxy").values()
    assert proxy["Properties"]["RequireTLS"] is True
    assert proxy["Properties"]["EngineFamily"] == "POSTGRESQL"
    auth = proxy["Properties"]["Auth"]
    assert {str(a["SecretArn"]) for a in auth} == {str(arn) for arn in login_secrets.values()}
    assert all(a["IAMAuth"] == "REQUIRED" for a in auth)
    # The master user cannot log in through the proxy at all.
    assert master not in [a["SecretArn"] for a in auth]
    outputs = dev.raw["Outputs"]
    assert outputs["DatabaseSecretArn"]["Value"] == master
    assert "never a producer" in outputs["DatabaseSecretArn"]["Description"]
    assert outputs["DatabaseProducerUsers"]["Value"] == "tidings_producer_app"
    assert "tidings_producer_app" in json.dumps(outputs["DatabaseProducerConnectArns"]["Value"])


def _ingress_sources(synth: Synthesized, target_group: str) -> list[dict[str, Any]]:
    return [
        rule["Properties"]
        for rule in synth.resources("AWS::EC2::SecurityGroupIngress").values()
        if rule["Properties"]["GroupId"] == {"Fn::GetAtt": [target_group, "GroupId"]}
    ]


def test_security_groups_admit_only_named_peers_on_the_postgres_port(dev: Synthesized) -> None:
    database = dev.stack.database
    instance_sg = dev.logical_id(database.instance_security_group)
    proxy_sg = dev.logical_id(database.proxy_security_group)
    rotation_sg = dev.logical_id(database.rotation_security_group)
    function_sgs = {
        name: dev.logical_id(deployed.security_group)
        for name, deployed in dev.stack.functions.by_name.items()
    }
    for group in dev.resources("AWS::EC2::SecurityGroup").values():
        assert "SecurityGroupIngress" not in group["Properties"], "no inline CIDR ingress"
    instance_peers = {
        rule["SourceSecurityGroupId"]["Fn::GetAtt"][0]
        for rule in _ingress_sources(dev, instance_sg)
    }
    assert instance_peers == {proxy_sg, rotation_sg, function_sgs["migrator"]}
    proxy_peers = {
        rule["SourceSecurityGroupId"]["Fn::GetAtt"][0] for rule in _ingress_sources(dev, proxy_sg)
    }
    assert proxy_peers == {sg for name, sg in function_sgs.items() if name != "migrator"}
    instance_port = {"Fn::GetAtt": [dev.logical_id(database.instance), "Endpoint.Port"]}
    for rule in dev.resources("AWS::EC2::SecurityGroupIngress").values():
        assert rule["Properties"]["FromPort"] == rule["Properties"]["ToPort"]
        assert rule["Properties"]["FromPort"] in (5432, instance_port)
        assert "CidrIp" not in rule["Properties"]
    (instance,) = dev.resources("AWS::RDS::DBInstance").values()
    assert instance["Properties"]["Port"] == "5432"


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_function_egress_is_https_and_postgres_and_endpoint_ports_only_for_the_sender(
    stage: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    expected_sender_ports = {"dev": {80, 443}, "prod": {443, 8443}}[stage]
    assert set(synth.config.endpoint_ports) == expected_sender_ports
    for name, deployed in synth.stack.functions.by_name.items():
        group = synth.raw["Resources"][synth.logical_id(deployed.security_group)]
        egress = group["Properties"]["SecurityGroupEgress"]
        public_ports = {rule["FromPort"] for rule in egress if rule.get("CidrIp") == "0.0.0.0/0"}
        assert public_ports == (expected_sender_ports if name == "sender" else {443}), name
        assert all(rule["IpProtocol"] == "tcp" for rule in egress), name


def test_only_listed_producer_security_groups_reach_the_proxy(
    dev: Synthesized, prod: Synthesized
) -> None:
    def producer_rules(synth: Synthesized) -> list[dict[str, Any]]:
        proxy_sg = synth.logical_id(synth.stack.database.proxy_security_group)
        return [
            rule
            for rule in _ingress_sources(synth, proxy_sg)
            if isinstance(rule["SourceSecurityGroupId"], str)
        ]

    assert producer_rules(dev) == []
    (rule,) = producer_rules(prod)
    assert rule["SourceSecurityGroupId"] == PRODUCER_SECURITY_GROUP
    assert rule["FromPort"] == rule["ToPort"] == 5432
    outputs = prod.raw["Outputs"]
    proxy_sg = prod.logical_id(prod.stack.database.proxy_security_group)
    assert outputs["DatabaseProxySecurityGroupId"]["Value"] == {"Fn::GetAtt": [proxy_sg, "GroupId"]}
    proxy = prod.logical_id(prod.stack.database.proxy)
    assert outputs["DatabaseProxyEndpoint"]["Value"] == {"Fn::GetAtt": [proxy, "Endpoint"]}
