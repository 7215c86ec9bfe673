"""Stage settings from the CDK context, and the layer build's inputs and cache."""

from __future__ import annotations

import datetime
import io
import json
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from infra.app import cdk_json_context, main
from infra.build_layers import (
    CLI_ONLY,
    PROVIDED_BY_RUNTIME,
    LayerBuildError,
    NpmPackage,
    build_tidings_layer,
    check_integrity,
    database_ca_bundle,
    runtime_requirements,
)
from infra.config import StageConfigError, stage_config

REPO_ROOT = Path(__file__).resolve().parents[2]


def _lookup(context: dict[str, Any]) -> Any:
    return context.get


def test_cdk_json_runs_the_python_app_with_dev_as_default() -> None:
    cdk_json = json.loads((REPO_ROOT / "cdk.json").read_text())
    assert cdk_json["app"] == ".venv/bin/python -m infra.app"
    assert cdk_json["context"]["stage"] == "dev"
    assert set(cdk_json["context"]["stages"]) == {"dev", "prod"}


def test_stage_comes_from_the_context_and_single_settings_override_it() -> None:
    context = cdk_json_context()
    assert stage_config(_lookup(context)).stage == "dev"
    prod = stage_config(_lookup({**context, "stage": "prod"}))
    assert prod.deletion_protection and prod.multi_az and prod.nat_gateways == 2
    overridden = stage_config(
        _lookup({**context, "stage": "prod", "natGateways": "1", "multiAz": "false"})
    )
    assert overridden.nat_gateways == 1 and overridden.multi_az is False
    producers = stage_config(
        _lookup({**context, "producerSecurityGroupIds": "sg-0123456789abcdef0, sg-89abcdef"})
    )
    assert producers.producer_security_group_ids == ("sg-0123456789abcdef0", "sg-89abcdef")
    assert stage_config(_lookup(context)).endpoint_ports == (80, 443)
    ports = stage_config(_lookup({**context, "endpointPorts": "443, 8443,443"})).endpoint_ports
    assert ports == (443, 8443)


def test_each_lanes_sender_concurrency_is_a_stage_setting_of_its_own() -> None:
    context = cdk_json_context()
    dev = stage_config(_lookup(context))
    prod = stage_config(_lookup({**context, "stage": "prod"}))
    assert (dev.sender_max_concurrency, dev.slow_sender_max_concurrency) == (5, 5)
    assert (prod.sender_max_concurrency, prod.slow_sender_max_concurrency) == (50, 50)
    # From the command line, one without the other; 2 is the least an SQS event source takes.
    overridden = stage_config(_lookup({**context, "slowSenderMaxConcurrency": "2"}))
    assert (overridden.sender_max_concurrency, overridden.slow_sender_max_concurrency) == (5, 2)
    # A stage of one's own must name it, like the fast lane's.
    stages = {
        "dev": {
            k: v for k, v in context["stages"]["dev"].items() if k != "slowSenderMaxConcurrency"
        }
    }
    with pytest.raises(StageConfigError, match="lacks the setting 'slowSenderMaxConcurrency'"):
        stage_config(_lookup({**context, "stages": stages}))


def test_schedules_can_be_overridden_one_at_a_time() -> None:
    context = {**cdk_json_context(), "schedules": {"pruner": "rate(6 hours)"}}
    config = stage_config(_lookup(context))
    assert config.schedules["pruner"] == "rate(6 hours)"
    assert config.schedules["claimer"] == "rate(1 minute)"


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"stage": "staging"}, "stage 'staging' is not defined"),
        ({"natGateways": "0"}, "natGateways must be 1..3"),
        ({"senderMaxConcurrency": "ten"}, "senderMaxConcurrency must be an integer"),
        ({"slowSenderMaxConcurrency": "ten"}, "slowSenderMaxConcurrency must be an integer"),
        # 2 is the least maximum concurrency an SQS event source takes.
        ({"slowSenderMaxConcurrency": "1"}, "slowSenderMaxConcurrency must be 2..1000, got 1"),
        ({"slowSenderMaxConcurrency": 1001}, "slowSenderMaxConcurrency must be 2..1000, got 1001"),
        ({"slowSenderMaxConcurrency": True}, "slowSenderMaxConcurrency must be an integer"),
        ({"deletionProtection": "maybe"}, "deletionProtection must be true or false"),
        ({"alarmEmail": "not-an-address"}, "alarmEmail 'not-an-address' is not an email"),
        ({"logLevel": "LOUD"}, "logLevel 'LOUD'"),
        ({"schedules": {"claimer": "every minute"}}, "schedule for 'claimer'"),
        ({"schedules": {"sender": "rate(1 minute)"}}, "unknown functions ['sender']"),
        ({"instanceType": "large"}, "instanceType 'large'"),
        ({"producerSecurityGroupIds": "sg-1,db"}, "'sg-1' is not a security group id"),
        ({"endpointPorts": "443,http"}, "endpointPorts: 'http' is not a port number"),
        ({"endpointPorts": [443, 70000]}, "endpointPorts: 70000 is not within 1..65535"),
        ({"metricsApplications": "acme,-x"}, "metricsApplications: '-x' is not an application"),
        (
            {"metricsApplications": ",".join(f"a{n}" for n in range(21))},
            "metricsApplications names 21 applications; at most 20",
        ),
        ({"producerLogins": "app,Billing"}, "producerLogins: producer login name 'Billing'"),
        ({"producerLogins": "app,app"}, "producerLogins names a producer twice"),
        ({"performanceInsights": "sometimes"}, "performanceInsights must be true or false"),
    ],
)
def test_bad_settings_are_refused_with_their_name(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(StageConfigError, match=message.replace("[", r"\[").replace("(", r"\(")):
        stage_config(_lookup({**cdk_json_context(), **overrides}))


def test_missing_stages_are_reported() -> None:
    with pytest.raises(StageConfigError, match="context 'stages' is missing"):
        stage_config(_lookup({"stage": "dev"}))


def test_runtime_requirements_leave_out_what_lambda_provides_and_the_cli_alone_uses() -> None:
    declared = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    declared_names = {
        r.split("==")[0].split("[")[0].lower() for r in declared["project"]["dependencies"]
    }
    assert declared_names >= CLI_ONLY
    requirements = runtime_requirements()
    names = {r.split("==")[0].split("[")[0].lower() for r in requirements}
    assert names == {
        "psycopg2-binary",
        "requests",
        "urllib3",  # the API client's retries, pinned since it is used directly
        "pycurl",  # the sender's transport
        "aws-lambda-powertools",
        "pydantic",
        "cryptography",
        "jsonschema",  # the ingest function checks payloads against the event-type catalog
    }
    assert not names & PROVIDED_BY_RUNTIME
    assert not names & CLI_ONLY


def test_unreadable_pyproject_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "pyproject.toml"
    broken.write_text("[project]\nname = 'x'\n")
    with pytest.raises(LayerBuildError, match="dependencies"):
        runtime_requirements(broken)


def test_tidings_layer_is_cached_by_content(tmp_path: Path) -> None:
    source = tmp_path / "src" / "tidings"
    source.mkdir(parents=True)
    (source / "__init__.py").write_text("VERSION = 1\n")
    build_root = tmp_path / "build"
    first = build_tidings_layer(build_root, source)
    assert (first / "python" / "tidings" / "__init__.py").read_text() == "VERSION = 1\n"
    assert build_tidings_layer(build_root, source) == first
    (source / "__init__.py").write_text("VERSION = 2\n")
    second = build_tidings_layer(build_root, source)
    assert second != first
    assert (second / "python" / "tidings" / "__init__.py").read_text() == "VERSION = 2\n"


def test_missing_tidings_package_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(LayerBuildError, match="tidings package is missing"):
        build_tidings_layer(tmp_path / "build", tmp_path / "nowhere")


def test_the_app_refuses_a_context_argument_without_a_value(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CDK_CONTEXT_JSON", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(["-c", "stage"])
    assert exit_info.value.code == 2
    assert "context 'stage' is not KEY=VALUE" in capsys.readouterr().err


def test_the_portal_may_be_framed_only_by_listed_origins_and_links_may_name_a_domain() -> None:
    context = json.loads((REPO_ROOT / "cdk.json").read_text())["context"]
    default = stage_config(_lookup(context))
    assert (default.portal_frame_ancestors, default.portal_url) == ((), "")
    chosen = stage_config(
        _lookup(
            {
                **context,
                "portalFrameAncestors": ["https://dashboard.example.com", "https://*.example.org"],
                "portalUrl": "https://hooks.example.com/portal",
            }
        )
    )
    assert chosen.portal_frame_ancestors == (
        "https://dashboard.example.com",
        "https://*.example.org",
    )
    assert chosen.portal_url == "https://hooks.example.com/portal"
    for origins in (
        ["https://a.example.com; script-src *"],
        ["http://dashboard.example.com"],
        ["*"],
        "https://a.example.com",
    ):
        with pytest.raises(StageConfigError, match="portalFrameAncestors"):
            stage_config(_lookup({**context, "portalFrameAncestors": origins}))
    with pytest.raises(StageConfigError, match="portalUrl"):
        stage_config(_lookup({**context, "portalUrl": "https://x.example/portal#frag"}))


def _pem(common_name: str) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _as_javascript(pems: list[str]) -> str:
    # The package's layout: each certificate a concatenation of single-quoted lines.
    items = [" +\n".join(f"'{line}\\n'" for line in pem.splitlines()) for pem in pems]
    return "exports.certificates = [\n" + ",\n".join(items) + "\n];\n"


def _npm_tarball(path: Path, rds: list[str], proxies: list[str]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, pems in (("defaults", rds), ("proxies", proxies)):
            data = _as_javascript(pems).encode()
            info = tarfile.TarInfo(f"package/lib/profiles/ca/{name}.js")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


def test_the_database_ca_bundle_holds_the_packages_rds_and_proxy_certificates(
    tmp_path: Path,
) -> None:
    rds = [_pem("Amazon RDS test-1 Root CA RSA2048 G1"), _pem("Amazon RDS test-1 2019 CA")]
    proxies = [_pem("Amazon Root CA 1"), _pem("Amazon Root CA 3")]
    tarball = _npm_tarball(tmp_path / "p.tgz", rds, proxies)
    bundle = database_ca_bundle(tarball, NpmPackage("p", "1.0.0", "sha512-x"))
    assert bundle.startswith("# Amazon RDS and RDS Proxy CA certificates (4), from the npm")
    assert bundle.endswith("".join(rds + proxies))


def test_a_bundle_without_the_proxy_or_rds_roots_is_refused(tmp_path: Path) -> None:
    rds = [_pem("Amazon RDS test-1 Root CA RSA2048 G1")]
    proxies = [_pem("Amazon Root CA 1")]
    for name, (defaults, proxy) in {"no-proxy": (rds, []), "no-rds": ([], proxies)}.items():
        tarball = _npm_tarball(tmp_path / f"{name}.tgz", defaults, proxy)
        with pytest.raises(LayerBuildError, match="lacks the Amazon RDS CAs or Amazon Root CA 1"):
            database_ca_bundle(tarball)


def test_a_tarball_other_than_the_pinned_one_is_refused(tmp_path: Path) -> None:
    tarball = _npm_tarball(tmp_path / "p.tgz", [], [])
    with pytest.raises(LayerBuildError, match="not the pinned sha512-pinned"):
        check_integrity(tarball, NpmPackage("p", "1.0.0", "sha512-pinned"))
