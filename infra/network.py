"""The VPC: public subnets for the NAT gateways, private subnets with egress for the functions,
isolated subnets for the database.

The NAT gateways use Elastic IPs allocated here, so their addresses are known to the stack and
can be published as outputs: every request the sender makes leaves from one of them, and
customers allow-list exactly those addresses.
"""

from __future__ import annotations

from aws_cdk import Fn, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.common import log_retention, output


class Network(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        nat_gateways: int,
        log_retention_days: int,
        retain_egress_ips: bool,
    ) -> None:
        super().__init__(scope, construct_id)
        self.egress_ips = [
            ec2.CfnEIP(self, f"NatEip{index + 1}", domain="vpc") for index in range(nat_gateways)
        ]
        for eip in self.egress_ips:
            # Customers allow-list these addresses: a stage that keeps its data keeps them too.
            eip.apply_removal_policy(
                RemovalPolicy.RETAIN if retain_egress_ips else RemovalPolicy.DESTROY
            )
        self.vpc = ec2.Vpc(
            self,
            "Vpc",
            max_azs=2,
            nat_gateways=nat_gateways,
            nat_gateway_provider=ec2.NatProvider.gateway(
                eip_allocation_ids=[eip.attr_allocation_id for eip in self.egress_ips]
            ),
            subnet_configuration=[
                ec2.SubnetConfiguration(
                    name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24
                ),
                ec2.SubnetConfiguration(
                    name="functions", subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS, cidr_mask=22
                ),
                ec2.SubnetConfiguration(
                    name="database", subnet_type=ec2.SubnetType.PRIVATE_ISOLATED, cidr_mask=24
                ),
            ],
        )
        flow_log_group = logs.LogGroup(
            self,
            "FlowLogs",
            retention=log_retention(log_retention_days),
            removal_policy=RemovalPolicy.DESTROY,
        )
        self.vpc.add_flow_log(
            "FlowLog",
            destination=ec2.FlowLogDestination.to_cloud_watch_logs(flow_log_group),
            traffic_type=ec2.FlowLogTrafficType.REJECT,
        )
        self.function_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS)
        self.database_subnets = ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_ISOLATED)

        output(
            self,
            "EgressIps",
            Fn.join(",", [eip.ref for eip in self.egress_ips]),
            "Static egress addresses of webhook deliveries: customers allow-list them",
        )
