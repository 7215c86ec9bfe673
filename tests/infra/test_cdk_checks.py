"""cdk-nag, cfn-lint, the layer assets and the migrations custom resource."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from unittest import mock

import psycopg2.extensions
import pytest
from aws_cdk import App, Validations
from aws_cdk import aws_sqs as sqs
from cryptography import x509
from cryptography.x509.oid import NameOID

from infra.app import build_app, cdk_json_context
from infra.migrations import MIGRATIONS_DIR, migrations_hash
from tests.infra.conftest import MIGRATIONS_RUN_TOKEN, Synthesized
from tidings.config import Settings
from tidings.dal.connection import dsn_from_settings
from tidings.deployment import FUNCTION_SPECS

REPO_ROOT = Path(__file__).resolve().parents[2]
# ELF e_machine values (byte 18 of the header, little endian).
ELF_MACHINE = {"arm64": 0xB7, "x86_64": 0x3E}
ELF_ARCH_NAME = {"arm64": "aarch64", "x86_64": "x86_64"}


def test_cdk_nag_reports_no_unacknowledged_findings(dev: Synthesized, prod: Synthesized) -> None:
    # The synth itself would have failed on a finding; the report says so explicitly.
    for synth in (dev, prod):
        report = json.loads((synth.outdir / "validation-report.json").read_text())
        assert [r["violations"] for r in report["pluginReports"] if r["violations"]] == []


def test_the_app_runs_cdk_nag_on_every_synth(tmp_path: Path) -> None:
    app = App(context=cdk_json_context(), outdir=str(tmp_path))
    _, stack = build_app(app)
    sqs.Queue(stack, "ProbeQueueWithoutSsl")
    with pytest.raises(RuntimeError, match="ValidationFailed"):
        app.synth()
    report = json.loads((tmp_path / "validation-report.json").read_text())
    findings = {
        (v["ruleName"], c["constructPath"])
        for r in report["pluginReports"]
        for v in r["violations"]
        for c in v["violatingConstructs"]
    }
    assert {rule for rule, path in findings if "ProbeQueueWithoutSsl" in path} >= {
        "AwsSolutions-SQS3",
        "AwsSolutions-SQS4",
    }
    assert all("ProbeQueueWithoutSsl" in path for _, path in findings)


def test_every_acknowledgement_names_one_rule_and_a_specific_reason(dev: Synthesized) -> None:
    key = Validations.ACKNOWLEDGED_RULES_METADATA_KEY
    acknowledged: dict[str, str] = {}
    for construct in dev.stack.node.find_all():
        for entry in construct.node.metadata:
            if entry.type == key:
                for rule, reason in entry.data.items():
                    acknowledged[f"{construct.node.path} {rule}"] = reason
    ours = {where: reason for where, reason in acknowledged.items() if "AwsSolutions" in where}
    assert ours
    reasons = set()
    for where, reason in ours.items():
        rule = where.split(" ", 1)[1]
        # Stored as "<source>::<rule>"; the rule must be one AwsSolutions rule or finding.
        assert rule.split("::", 1)[1].startswith("AwsSolutions-"), where
        assert len(reason) >= 40, where
        reasons.add(reason)
    # One reason per kind of finding, not one catch-all sentence.
    assert len(reasons) >= 8


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_cfn_lint_passes(stage: str, request: pytest.FixtureRequest) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("cfn-lint")), str(synth.template_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _layer_assets(synth: Synthesized) -> dict[str, Path]:
    layers = {}
    for logical_id, layer in synth.resources("AWS::Lambda::LayerVersion").items():
        key = layer["Properties"]["Content"]["S3Key"]
        asset = synth.outdir / f"asset.{key.removesuffix('.zip')}"
        assert asset.is_dir(), asset
        layers[logical_id] = asset
    return layers


def test_layer_assets_hold_tidings_and_psycopg2_built_for_the_functions(
    dev: Synthesized,
) -> None:
    sender = dev.raw["Resources"][dev.logical_id(dev.stack.functions["sender"])]["Properties"]
    runtime = sender["Runtime"]  # e.g. python3.12
    (architecture,) = sender["Architectures"]
    abi = "cpython-" + runtime.removeprefix("python").replace(".", "")
    assets = _layer_assets(dev)
    tidings = [a for a in assets.values() if (a / "python" / "tidings" / "__init__.py").is_file()]
    dependencies = [a for a in assets.values() if (a / "python" / "psycopg2").is_dir()]
    assert len(tidings) == 1 and len(dependencies) == 1
    package = tidings[0] / "python" / "tidings"
    assert (package / "config.py").is_file()
    # The layer ships the very migrations whose hash keys the custom resource.
    assert list((package / "migrations").glob("*.sql"))
    assert migrations_hash(package / "migrations") == migrations_hash(MIGRATIONS_DIR)
    assert not list(package.rglob("__pycache__"))

    site = dependencies[0] / "python"
    (binary,) = (site / "psycopg2").glob("_psycopg.*.so")
    assert binary.name == f"_psycopg.{abi}-{ELF_ARCH_NAME[architecture]}-linux-gnu.so"
    header = binary.read_bytes()[:20]
    assert header[:4] == b"\x7fELF"
    assert int.from_bytes(header[18:20], "little") == ELF_MACHINE[architecture]
    for package in ("requests", "aws_lambda_powertools", "pydantic", "pydantic_core"):
        assert (site / package).is_dir(), package
    (pydantic_core,) = (site / "pydantic_core").glob("_pydantic_core.*.so")
    assert abi in pydantic_core.name and ELF_ARCH_NAME[architecture] in pydantic_core.name
    # AES-GCM for the signing secrets: cryptography's compiled core, for the same machine.
    rust = site / "cryptography" / "hazmat" / "bindings" / "_rust.abi3.so"
    assert int.from_bytes(rust.read_bytes()[18:20], "little") == ELF_MACHINE[architecture]
    for runtime_provided in ("boto3", "botocore"):
        assert not (site / runtime_provided).exists(), runtime_provided


def _common_names(bundle: Path) -> set[str]:
    certificates = x509.load_pem_x509_certificates(bundle.read_bytes())
    return {
        str(attribute.value)
        for certificate in certificates
        for attribute in certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    }


@pytest.mark.filterwarnings("ignore::cryptography.utils.CryptographyDeprecationWarning")
def test_every_function_checks_the_databases_certificate_against_the_layers_ca_bundle(
    dev: Synthesized, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The connection each deployed function would open, built from its environment as
    # deployed, with the layer's /opt mapped onto the dependencies asset.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    (dependencies,) = [a for a in _layer_assets(dev).values() if (a / "python/psycopg2").is_dir()]
    secret = json.dumps({"host": "elsewhere", "username": "tidings", "password": "pw"})
    for spec in FUNCTION_SPECS:
        deployed = dev.stack.functions.by_name[spec.name]
        resource = dev.raw["Resources"][dev.logical_id(deployed.function)]
        environment = {
            name: value if isinstance(value, str) else "db.abc.eu-west-1.rds.amazonaws.com"
            for name, value in resource["Properties"]["Environment"]["Variables"].items()
        }
        root_cert = environment["TIDINGS_DATABASE_ROOT_CERT"]
        assert root_cert.startswith("/opt/"), spec.name
        in_layer = dependencies / root_cert.removeprefix("/opt/")
        assert in_layer.is_file(), spec.name
        settings = Settings.from_env({**environment, "TIDINGS_DATABASE_ROOT_CERT": str(in_layer)})
        with mock.patch(
            "aws_lambda_powertools.utilities.parameters.get_secret", return_value=secret
        ):
            dsn = psycopg2.extensions.parse_dsn(dsn_from_settings(settings))
        assert dsn["sslmode"] == "verify-full", spec.name
        assert dsn["sslrootcert"] == str(in_layer), spec.name
        assert dsn["host"] == "db.abc.eu-west-1.rds.amazonaws.com", spec.name
    names = _common_names(in_layer)
    # RDS Proxy presents an ACM certificate (Amazon Trust Services roots); the instance, which
    # the migrator reaches directly, one of the Amazon RDS CAs (RSA and ECC, every region).
    assert {f"Amazon Root CA {n}" for n in range(1, 5)} <= names
    assert {
        "Amazon RDS us-east-1 Root CA RSA2048 G1",
        "Amazon RDS eu-west-1 Root CA ECC384 G1",
    } <= names


@pytest.mark.parametrize("stage", ["dev", "prod"])
def test_every_checkov_skip_names_a_check_and_gives_its_reason(
    stage: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(stage)
    skipped = 0
    for logical_id, resource in synth.raw["Resources"].items():
        for skip in resource.get("Metadata", {}).get("checkov", {}).get("skip", []):
            assert set(skip) == {"id", "comment"}, logical_id
            assert skip["id"].startswith("CKV_AWS_"), logical_id
            assert len(skip["comment"].split()) >= 10, (logical_id, skip)
            skipped += 1
    assert skipped > 0


def test_every_log_group_is_encrypted_with_the_stacks_logs_key(dev: Synthesized) -> None:
    key_id = dev.logical_id(dev.stack.logs_key.key)
    log_groups = dev.resources("AWS::Logs::LogGroup")
    assert len(log_groups) >= 13
    for logical_id, log_group in log_groups.items():
        assert log_group["Properties"]["KmsKeyId"] == {"Fn::GetAtt": [key_id, "Arn"]}, logical_id
    key = dev.raw["Resources"][key_id]["Properties"]
    assert key["EnableKeyRotation"] is True
    (for_logs,) = [
        statement
        for statement in key["KeyPolicy"]["Statement"]
        if "Service" in statement["Principal"]
    ]
    assert json.dumps(for_logs["Principal"]["Service"]).count("logs.") == 1
    condition = for_logs["Condition"]["ArnLike"]["kms:EncryptionContext:aws:logs:arn"]
    assert ":log-group:*" in json.dumps(condition)


def test_layer_assets_match_what_the_template_declares(dev: Synthesized) -> None:
    for logical_id in _layer_assets(dev):
        properties = dev.raw["Resources"][logical_id]["Properties"]
        assert properties["CompatibleRuntimes"] == ["python3.12"]
        assert properties["CompatibleArchitectures"] == ["arm64"]


def test_migrations_run_through_a_custom_resource_keyed_on_the_sql(dev: Synthesized) -> None:
    (resource,) = dev.resources("Custom::TidingsSchema").values()
    properties = resource["Properties"]
    assert properties["MigrationsHash"] == migrations_hash(MIGRATIONS_DIR)
    assert "RunToken" not in properties
    provider = dev.stack.migrations.provider
    framework_id = dev.logical_id(provider.node.find_child("framework-onEvent"))
    assert properties["ServiceToken"] == {"Fn::GetAtt": [framework_id, "Arn"]}
    migrator_id = dev.logical_id(dev.stack.functions["migrator"])
    framework = dev.raw["Resources"][framework_id]["Properties"]
    assert framework["Environment"]["Variables"]["USER_ON_EVENT_FUNCTION_ARN"] == {
        "Fn::GetAtt": [migrator_id, "Arn"]
    }
    instance_id = dev.logical_id(dev.stack.database.instance)
    assert instance_id in resource["DependsOn"]


def test_a_run_token_from_the_context_forces_a_migration_run(prod: Synthesized) -> None:
    (resource,) = prod.resources("Custom::TidingsSchema").values()
    assert resource["Properties"]["RunToken"] == MIGRATIONS_RUN_TOKEN
    assert resource["Properties"]["MigrationsHash"] == migrations_hash(MIGRATIONS_DIR)


def test_migrations_hash_changes_with_any_sql_file(tmp_path: Path) -> None:
    (tmp_path / "0001_init.sql").write_text("create table a (id int);")
    first = migrations_hash(tmp_path)
    assert migrations_hash(tmp_path) == first
    (tmp_path / "0002_more.sql").write_text("create table b (id int);")
    second = migrations_hash(tmp_path)
    assert second != first
    (tmp_path / "0002_more.sql").write_text("create table b (id bigint);")
    third = migrations_hash(tmp_path)
    assert third not in {first, second}
    (tmp_path / "notes.txt").write_text("not a migration")
    assert migrations_hash(tmp_path) == third
