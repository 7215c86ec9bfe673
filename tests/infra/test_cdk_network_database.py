"""Network and database: subnets, NAT and its address, PostgreSQL settings, proxy, secret."""

from __future__ import annotations

from typing import Any

import pytest
from aws_cdk.assertions import Match

from infra.database import DATABASE_NAME
from tests.infra.conftest import PRODUCER_SECURITY_GROUP, Synthesized
from tidings.deployment import FUNCTION_SPECS


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


def test_credentials_live_in_a_rotated_secret_used_by_the_proxy(dev: Synthesized) -> None:
    admin_token_id = dev.logical_id(dev.stack.admin_token.secret)
    (secret_id,) = set(dev.resources("AWS::SecretsManager::Secret")) - {admin_token_id}
    (attachment_id,) = dev.resources("AWS::SecretsManager::SecretTargetAttachment")
    dev.template.has_resource_properties(
        "AWS::SecretsManager::RotationSchedule",
        {
            "SecretId": {"Ref": attachment_id},
            "HostedRotationLambda": Match.object_like({"RotationType": "PostgreSQLSingleUser"}),
            "RotationRules": {
                "ScheduleExpression": f"rate({dev.config.secret_rotation_days} days)"
            },
        },
    )
    (proxy,) = dev.resources("AWS::RDS::DBProxy").values()
    assert proxy["Properties"]["RequireTLS"] is True
    assert proxy["Properties"]["EngineFamily"] == "POSTGRESQL"
    assert proxy["Properties"]["Auth"][0]["SecretArn"] == {"Ref": attachment_id}
    assert dev.raw["Outputs"]["DatabaseSecretArn"]["Value"] == {"Ref": attachment_id}
    assert secret_id


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
