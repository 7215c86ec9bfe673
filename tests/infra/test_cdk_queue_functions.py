"""Delivery queues (one per speed lane), the sender's event sources, functions, roles and
schedules."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.infra.conftest import Synthesized
from tidings.config import Settings, known_variables
from tidings.deployment import (
    CLAIMER,
    FAST_LANE,
    FUNCTION_SPECS,
    QUEUE_VISIBILITY_TIMEOUT_S,
    SENDER,
    SLOW_LANE,
    schedule_interval_s,
)

REQUIRED_ENVIRONMENT = {
    "POWERTOOLS_SERVICE_NAME",
    "POWERTOOLS_METRICS_NAMESPACE",
    "LOG_LEVEL",
    "TIDINGS_DATABASE_HOST",
    "TIDINGS_DATABASE_NAME",
    "TIDINGS_DATABASE_ROOT_CERT",
}
# The queues' addresses a function may be given: the fast lane's (spec.sends_to_queue) and the
# slow lane's (spec.fills_slow_lane: the claimer's only).
QUEUE_ENVIRONMENT = {"TIDINGS_DELIVERY_QUEUE_URL", "TIDINGS_SLOW_DELIVERY_QUEUE_URL"}


def _function(synth: Synthesized, name: str) -> dict[str, Any]:
    deployed = synth.stack.functions.by_name[name]
    return synth.raw["Resources"][synth.logical_id(deployed.function)]


def _function_id(synth: Synthesized, name: str) -> str:
    return synth.logical_id(synth.stack.functions.by_name[name].function)


def _queue_ids(synth: Synthesized) -> tuple[str, str]:
    """The fast lane's delivery queue and the dead-letter queue both lanes share."""
    return (
        synth.logical_id(synth.stack.delivery.queue),
        synth.logical_id(synth.stack.delivery.dead_letter_queue),
    )


def _lane_queue_ids(synth: Synthesized) -> tuple[str, str]:
    """The fast lane's delivery queue and the slow lane's."""
    return (
        synth.logical_id(synth.stack.delivery.queue),
        synth.logical_id(synth.stack.delivery.slow_queue),
    )


def _sender_mappings(synth: Synthesized) -> dict[str, dict[str, Any]]:
    """The sender's event source mappings, by the logical id of the queue each reads."""
    mappings = synth.resources("AWS::Lambda::EventSourceMapping").values()
    by_queue: dict[str, dict[str, Any]] = {
        mapping["Properties"]["EventSourceArn"]["Fn::GetAtt"][0]: mapping for mapping in mappings
    }
    return by_queue


def _statements_of_role(synth: Synthesized, role_id: str) -> list[dict[str, Any]]:
    statements: list[dict[str, Any]] = []
    role = synth.raw["Resources"][role_id]
    for policy in role["Properties"].get("Policies", []):
        statements.extend(policy["PolicyDocument"]["Statement"])
    for policy in synth.resources("AWS::IAM::Policy").values():
        if {"Ref": role_id} in policy["Properties"]["Roles"]:
            statements.extend(policy["Properties"]["PolicyDocument"]["Statement"])
    return statements


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _actions_on(statements: list[dict[str, Any]], resource: Any) -> set[str]:
    return {
        action
        for statement in statements
        if statement["Effect"] == "Allow" and resource in _as_list(statement["Resource"])
        for action in _as_list(statement["Action"])
    }


def test_queue_has_a_dead_letter_queue_and_outlasts_six_sender_timeouts(
    dev: Synthesized,
) -> None:
    queue_id, dlq_id = _queue_ids(dev)
    queue = dev.raw["Resources"][queue_id]["Properties"]
    sender_timeout = _function(dev, "sender")["Properties"]["Timeout"]
    assert sender_timeout == SENDER.timeout_s
    assert queue["VisibilityTimeout"] >= 6 * sender_timeout
    assert queue["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": dev.config.dlq_max_receive_count,
    }


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_each_lane_has_a_delivery_queue_alike_redriving_to_the_shared_dead_letter_queue(
    stage: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    fast_id, slow_id = _lane_queue_ids(synth)
    _, dlq_id = _queue_ids(synth)
    # Two delivery queues and one dead-letter queue, nothing else.
    assert set(synth.resources("AWS::SQS::Queue")) == {fast_id, slow_id, dlq_id}
    assert fast_id != slow_id
    fast, slow = (synth.raw["Resources"][i]["Properties"] for i in (fast_id, slow_id))
    # The same construct makes both: the same encryption, visibility, retention and redrive.
    assert slow == fast
    assert slow["VisibilityTimeout"] == QUEUE_VISIBILITY_TIMEOUT_S
    assert slow["SqsManagedSseEnabled"] is True
    assert slow["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
        "maxReceiveCount": synth.config.dlq_max_receive_count,
    }
    # The dead-letter queue itself redrives nowhere.
    assert "RedrivePolicy" not in synth.raw["Resources"][dlq_id]["Properties"]


def test_the_fast_lane_keeps_the_delivery_queues_logical_id(dev: Synthesized) -> None:
    # An existing stack keeps its queue, and the messages in it, when the slow lane is added.
    fast_id, slow_id = _lane_queue_ids(dev)
    assert fast_id.startswith("DeliveryQueue")
    assert slow_id.startswith("DeliverySlowQueue")


def test_queues_are_encrypted_and_refuse_plain_http(dev: Synthesized) -> None:
    for queue_id in {*_queue_ids(dev), *_lane_queue_ids(dev)}:
        assert dev.raw["Resources"][queue_id]["Properties"]["SqsManagedSseEnabled"] is True
        (policy,) = [
            policy["Properties"]["PolicyDocument"]
            for policy in dev.resources("AWS::SQS::QueuePolicy").values()
            if {"Ref": queue_id} in policy["Properties"]["Queues"]
        ]
        denies = [s for s in policy["Statement"] if s["Effect"] == "Deny"]
        assert any(s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}} for s in denies), (
            queue_id
        )


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_sender_reads_each_lane_with_partial_batch_failures_and_its_own_concurrency(
    stage: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    fast_id, slow_id = _lane_queue_ids(synth)
    mappings = _sender_mappings(synth)
    assert set(mappings) == {fast_id, slow_id}
    expected = {
        fast_id: (FAST_LANE.batch_size, synth.config.sender_max_concurrency),
        slow_id: (SLOW_LANE.batch_size, synth.config.slow_sender_max_concurrency),
    }
    for queue_id, (batch_size, max_concurrency) in expected.items():
        properties = mappings[queue_id]["Properties"]
        assert properties["FunctionName"] == {"Ref": _function_id(synth, "sender")}
        assert properties["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert properties["BatchSize"] == batch_size, queue_id
        assert properties["ScalingConfig"] == {"MaximumConcurrency": max_concurrency}
        assert properties.get("Enabled", True) is True
    assert (FAST_LANE.batch_size, SLOW_LANE.batch_size) == (10, 1)
    # The stage's figures, from cdk.json.
    concurrency = (synth.config.sender_max_concurrency, synth.config.slow_sender_max_concurrency)
    assert concurrency == {"dev": (5, 5), "prod": (50, 50)}[stage]


def test_every_function_is_python_on_arm64_with_both_layers(dev: Synthesized) -> None:
    layer_ids = set(dev.resources("AWS::Lambda::LayerVersion"))
    assert len(layer_ids) == 2
    for spec in FUNCTION_SPECS:
        properties = _function(dev, spec.name)["Properties"]
        assert properties["Runtime"] in {"python3.12", "python3.13"}, spec.name
        assert properties["Architectures"] == ["arm64"], spec.name
        assert properties["Handler"] == "app.handler", spec.name
        assert properties["Timeout"] == spec.timeout_s, spec.name
        assert properties["TracingConfig"] == {"Mode": "Active"}, spec.name
        assert {layer["Ref"] for layer in properties["Layers"]} == layer_ids, spec.name
    for layer in dev.resources("AWS::Lambda::LayerVersion").values():
        assert layer["Properties"]["CompatibleArchitectures"] == ["arm64"]


def test_environment_follows_the_contract(dev: Synthesized) -> None:
    proxy_id = dev.logical_id(dev.stack.database.proxy)
    instance_id = dev.logical_id(dev.stack.database.instance)
    master = dev.stack.resolve(dev.stack.database.secret.secret_arn)
    signing_key = dev.stack.resolve(dev.stack.signing_key.key.key_arn)
    queue_id, slow_queue_id = _lane_queue_ids(dev)
    topic_id = dev.logical_id(dev.stack.alerts.topic)
    for spec in FUNCTION_SPECS:
        environment = _function(dev, spec.name)["Properties"]["Environment"]["Variables"]
        assert set(environment) >= REQUIRED_ENVIRONMENT, spec.name
        assert environment["POWERTOOLS_METRICS_NAMESPACE"] == "Tidings"
        assert environment["LOG_LEVEL"] == dev.config.log_level
        assert environment["POWERTOOLS_TRACER_CAPTURE_RESPONSE"] == "false"
        assert environment["TIDINGS_DATABASE_NAME"] == "tidings"
        if spec.database_user is None:
            # The migrator: the master secret, and the logins it makes.
            assert environment["TIDINGS_DATABASE_SECRET_ARN"] == master
            assert "TIDINGS_DATABASE_USER" not in environment
            logins = json.dumps(dev.stack.resolve(environment["TIDINGS_DATABASE_LOGINS"]))
            for user in dev.stack.database.logins:
                assert f'\\"user\\":\\"{user}\\"' in logins, user
        else:
            # Everyone else: its own login user, with IAM authentication; no secret at all.
            assert environment["TIDINGS_DATABASE_USER"] == spec.database_user
            assert "TIDINGS_DATABASE_SECRET_ARN" not in environment, spec.name
            assert "TIDINGS_DATABASE_LOGINS" not in environment, spec.name
        uses_key = spec.opens_signing_secrets or spec.seals_signing_secrets
        assert environment.get("TIDINGS_SECRETS_KMS_KEY_ID") == (
            signing_key if uses_key else None
        ), spec.name
        expected_host = (
            {"Fn::GetAtt": [instance_id, "Endpoint.Address"]}
            if spec.connects_directly
            else {"Fn::GetAtt": [proxy_id, "Endpoint"]}
        )
        assert environment["TIDINGS_DATABASE_HOST"] == expected_host, spec.name
        assert environment.get("TIDINGS_DELIVERY_QUEUE_URL") == (
            {"Ref": queue_id} if spec.sends_to_queue else None
        ), spec.name
        # The claimer packs, and the sender packs the FIFO heads it moves on: the same setting.
        assert environment.get("TIDINGS_DELIVERIES_PER_MESSAGE") == (
            "10" if spec.sends_to_queue else None
        ), spec.name
        assert environment.get("TIDINGS_SLOW_DELIVERY_QUEUE_URL") == (
            {"Ref": slow_queue_id} if spec is CLAIMER else None
        ), spec.name
        assert ("TIDINGS_ALERTS_TOPIC_ARN" in environment) is spec.publishes_alerts
        if spec.publishes_alerts:
            assert environment["TIDINGS_ALERTS_TOPIC_ARN"] == {"Ref": topic_id}
        assert ("TIDINGS_HTTP_TIMEOUT_S" in environment) is spec.reaches_endpoints
        assert ("TIDINGS_ENDPOINT_PORTS" in environment) is spec.manages_endpoints, spec.name
        if spec.manages_endpoints:
            assert environment["TIDINGS_ENDPOINT_PORTS"] == "80,443"
        assert ("TIDINGS_USAGE_PLAN_NAME" in environment) is spec.manages_usage_keys
        if spec.manages_usage_keys:
            assert environment["TIDINGS_USAGE_PLAN_NAME"] == "tidings-dev"
        # The scheduled report claims what no report has named, whatever the schedule: no window.
        assert "TIDINGS_DEAD_LETTER_REPORT_WINDOW_S" not in environment, spec.name
    assert [s.name for s in FUNCTION_SPECS if s.connects_directly] == ["migrator"]
    assert [s.name for s in FUNCTION_SPECS if s.sends_to_queue] == ["claimer", "sender"]
    assert [s.name for s in FUNCTION_SPECS if s.manages_usage_keys] == ["authorizer"]
    assert [s.name for s in FUNCTION_SPECS if s.bootstraps_admin_token] == ["migrator"]


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_every_tidings_variable_the_stack_sets_is_one_tidings_reads(
    stage: str, request: pytest.FixtureRequest
) -> None:
    # A TIDINGS_* variable Tidings does not read stops every cold start (exit 2).
    synth: Synthesized = request.getfixturevalue(stage)
    known = known_variables()
    for spec in FUNCTION_SPECS:
        environment = _function(synth, spec.name)["Properties"]["Environment"]["Variables"]
        unknown = {name for name in environment if name.startswith("TIDINGS_")} - known
        assert not unknown, (spec.name, sorted(unknown))
    assert known >= QUEUE_ENVIRONMENT


def test_only_the_listed_applications_are_metrics_dimensions(
    dev: Synthesized, prod: Synthesized
) -> None:
    for spec in FUNCTION_SPECS:
        assert (
            "TIDINGS_METRICS_APPLICATIONS"
            not in (_function(dev, spec.name)["Properties"]["Environment"]["Variables"])
        )
        listed = _function(prod, spec.name)["Properties"]["Environment"]["Variables"].get(
            "TIDINGS_METRICS_APPLICATIONS"
        )
        assert listed == ("acme,globex" if spec.name == "health_monitor" else None), spec.name


def test_the_ingest_function_knows_the_ports_the_sender_may_open(
    dev: Synthesized, prod: Synthesized
) -> None:
    # Endpoints on other ports are refused when created, as the sender could never reach them.
    for synth in (dev, prod):
        environment = _function(synth, "ingest")["Properties"]["Environment"]["Variables"]
        assert "TIDINGS_ENDPOINT_PORTS" in environment, sorted(environment)
        ports = environment["TIDINGS_ENDPOINT_PORTS"]
        assert ports == ",".join(str(port) for port in synth.config.endpoint_ports)
        settings = Settings.from_env({"TIDINGS_ENDPOINT_PORTS": ports})
        assert [p for p in (80, 443, 6379, 8443) if settings.allows_port(p)] == list(
            synth.config.endpoint_ports
        )
    assert prod.config.endpoint_ports == (443, 8443)
    assert [s.name for s in FUNCTION_SPECS if s.manages_endpoints] == ["ingest"]


def test_each_function_has_its_own_role_granting_what_its_spec_needs(dev: Synthesized) -> None:
    queue_arns = [{"Fn::GetAtt": [queue_id, "Arn"]} for queue_id in _lane_queue_ids(dev)]
    _, dlq_id = _queue_ids(dev)
    topic = {"Ref": dev.logical_id(dev.stack.alerts.topic)}
    admin_secret = {"Ref": dev.logical_id(dev.stack.admin_token.secret)}
    database = dev.stack.database
    master = dev.stack.resolve(database.secret.secret_arn)
    login_secrets = [
        dev.stack.resolve(login.secret.secret_arn) for login in database.logins.values()
    ]
    signing_key = dev.stack.resolve(dev.stack.signing_key.key.key_arn)
    roles = [_function(dev, spec.name)["Properties"]["Role"] for spec in FUNCTION_SPECS]
    assert len({str(role) for role in roles}) == len(FUNCTION_SPECS)
    for spec, role in zip(FUNCTION_SPECS, roles, strict=True):
        statements = _statements_of_role(dev, role["Fn::GetAtt"][0])
        is_migrator = spec.database_user is None
        # Only the migrator reads the master secret (and the secrets of the users it makes).
        for secret in [master, *login_secrets]:
            reads = "secretsmanager:GetSecretValue" in _actions_on(statements, secret)
            assert reads is is_migrator, (spec.name, secret)
        connects = [
            statement
            for statement in statements
            if "rds-db:connect" in _as_list(statement["Action"])
        ]
        if is_migrator:
            assert connects == []
        else:
            # rds-db:connect on its own database user, through the proxy, and nothing else.
            (statement,) = connects
            (resource,) = _as_list(statement["Resource"])
            text = json.dumps(resource)
            assert text.endswith(f'/{spec.database_user}"]]}}'), text
            assert "dbuser:" in text and "tidings_fn_" in text
        # The signing key: what the spec says, under Tidings' encryption context only.
        kms = {
            action: statement
            for statement in statements
            if signing_key in _as_list(statement["Resource"])
            for action in _as_list(statement["Action"])
        }
        expected = {"kms:Decrypt"} if spec.opens_signing_secrets else set()
        if spec.seals_signing_secrets:
            expected.add("kms:GenerateDataKey")
        assert set(kms) == expected, spec.name
        for statement in kms.values():
            assert statement["Condition"] == {
                "StringEquals": {"kms:EncryptionContext:tidings": "signing-secrets"}
            }
        # The claimer sends each row to its lane's queue; the sender's retries go to the fast
        # lane's only (a slow endpoint's pass the claim); only the sender receives, from both.
        fast_arn, slow_arn = queue_arns
        for queue_arn, senders in ((fast_arn, {CLAIMER, SENDER}), (slow_arn, {CLAIMER})):
            queue_actions = _actions_on(statements, queue_arn)
            assert ("sqs:SendMessage" in queue_actions) is (spec in senders), spec.name
            assert ("sqs:ReceiveMessage" in queue_actions) is (spec is SENDER), spec.name
        # Nothing reads or writes the dead-letter queue but SQS's redrive.
        assert _actions_on(statements, {"Fn::GetAtt": [dlq_id, "Arn"]}) == set(), spec.name
        assert ("sns:Publish" in _actions_on(statements, topic)) is spec.publishes_alerts
        admin_token = _actions_on(statements, admin_secret)
        assert ("secretsmanager:PutSecretValue" in admin_token) is spec.bootstraps_admin_token
        assert ("secretsmanager:GetSecretValue" in admin_token) is spec.bootstraps_admin_token
        api_keys = {
            a for st in statements for a in _as_list(st["Action"]) if a.startswith("apigateway:")
        }
        assert bool(api_keys) is spec.manages_usage_keys, spec.name
        if spec.manages_usage_keys:
            (grant,) = [st for st in statements if "apigateway:POST" in _as_list(st["Action"])]
            resources = [json.dumps(r) for r in _as_list(grant["Resource"])]
            assert [r.rsplit("::", 1)[1] for r in resources] == [
                '/apikeys"]]}',
                '/usageplans"]]}',
                '/usageplans/*/keys"]]}',
            ]


def test_no_policy_allows_every_action_or_every_service_action_on_everything(
    dev: Synthesized,
) -> None:
    documents = [
        p["Properties"]["PolicyDocument"] for p in dev.resources("AWS::IAM::Policy").values()
    ]
    for role in dev.resources("AWS::IAM::Role").values():
        documents.extend(p["PolicyDocument"] for p in role["Properties"].get("Policies", []))
    assert documents
    for document in documents:
        for statement in document["Statement"]:
            actions = _as_list(statement["Action"])
            assert "*" not in actions, statement
            if "*" in _as_list(statement.get("Resource", [])):
                assert not [a for a in actions if a.endswith(":*")], statement
    for role in dev.resources("AWS::IAM::Role").values():
        for arn in role["Properties"].get("ManagedPolicyArns", []):
            assert "AdministratorAccess" not in str(arn) and "FullAccess" not in str(arn)


def test_schedules_start_the_scheduled_functions(dev: Synthesized) -> None:
    rules = dev.resources("AWS::Events::Rule").values()
    targets = {
        rule["Properties"]["Targets"][0]["Arn"]["Fn::GetAtt"][0]: rule["Properties"]
        for rule in rules
    }
    scheduled = [spec for spec in FUNCTION_SPECS if spec.scheduled]
    assert len(targets) == len(scheduled) == 5
    for spec in scheduled:
        rule = targets[_function_id(dev, spec.name)]
        assert rule["ScheduleExpression"] == dev.config.schedules[spec.name]
        assert rule["State"] == "ENABLED"
    assert dev.config.schedules["claimer"] == "rate(1 minute)"
    assert dev.config.schedules["percentiles"] == "rate(5 minutes)"
    assert dev.config.schedules["health_monitor"] == "rate(5 minutes)"
    assert dev.config.schedules["dead_letter_report"] == "rate(1 hour)"
    assert dev.config.schedules["pruner"] == "rate(1 hour)"


def _depends_on(resource: dict[str, Any]) -> set[str]:
    depends_on = resource.get("DependsOn", [])
    return {depends_on} if isinstance(depends_on, str) else set(depends_on)


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_nothing_runs_a_handler_before_the_migrations(
    stage: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    (schema_id,) = synth.resources("Custom::TidingsSchema")
    # The sender's event sources (both lanes) and every schedule: on a first deploy, nothing
    # calls a handler before the schema exists.
    mappings = _sender_mappings(synth)
    assert set(mappings) == set(_lane_queue_ids(synth))
    for queue_id, mapping in mappings.items():
        assert mapping["Properties"]["FunctionName"] == {"Ref": _function_id(synth, "sender")}
        assert schema_id in _depends_on(mapping), queue_id
    rules = synth.resources("AWS::Events::Rule")
    assert len(rules) == len(synth.config.schedules) > 0
    for logical_id, rule in rules.items():
        assert schema_id in _depends_on(rule), logical_id
    # On an upgrade, no function but the migrator takes new code before the migrations ran.
    for spec in FUNCTION_SPECS:
        depends = _depends_on(_function(synth, spec.name))
        assert (schema_id in depends) is (spec.name != "migrator"), spec.name


def test_the_local_runtime_imitates_the_deployed_queue_timeouts_and_schedules(
    dev: Synthesized,
) -> None:
    """What the stack deploys and what `tidings dev` imitates come from one table."""
    from tidings.local import runtime, scheduler

    for queue_id in _lane_queue_ids(dev):
        queue = dev.raw["Resources"][queue_id]["Properties"]
        assert queue["VisibilityTimeout"] == runtime.QUEUE_VISIBILITY_TIMEOUT_S
        assert queue["RedrivePolicy"]["maxReceiveCount"] == runtime.MAX_RECEIVE_COUNT
    assert _function(dev, "sender")["Properties"]["Timeout"] == runtime.SENDER_TIMEOUT_S
    for name, interval_s in scheduler.DEFAULT_INTERVALS_S.items():
        expression = dev.config.schedules[name]
        assert schedule_interval_s(expression) == interval_s
        job = scheduler.Job(name, interval_s, lambda event, context: None)
        assert job.timeout_s == _function(dev, name)["Properties"]["Timeout"]
