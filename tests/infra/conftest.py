"""Synthesize each stage once per session; every infra test reads these results."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")

from aws_cdk import App
from aws_cdk.assertions import Template

from infra.app import build_app, cdk_json_context
from infra.config import StageConfig
from infra.stack import TidingsStack

PRODUCER_SECURITY_GROUP = "sg-0123456789abcdef0"
MIGRATIONS_RUN_TOKEN = "forced-run-1"


@dataclass(frozen=True)
class Synthesized:
    stack: TidingsStack
    config: StageConfig
    outdir: Path
    template_path: Path
    raw: dict[str, Any]
    template: Template

    def resources(self, resource_type: str) -> dict[str, dict[str, Any]]:
        return {
            logical_id: resource
            for logical_id, resource in self.raw["Resources"].items()
            if resource["Type"] == resource_type
        }

    def logical_id(self, construct: Any) -> str:
        return str(self.stack.resolve(construct.node.default_child.logical_id))


def synthesize(outdir: Path, **context: Any) -> Synthesized:
    app = App(context={**cdk_json_context(), **context}, outdir=str(outdir))
    _, stack = build_app(app)
    assembly = app.synth()
    artifact = assembly.get_stack_by_name(stack.stack_name)
    raw: dict[str, Any] = json.loads(Path(artifact.template_full_path).read_text())
    return Synthesized(
        stack=stack,
        config=stack.config,
        outdir=Path(assembly.directory),
        template_path=Path(artifact.template_full_path),
        raw=raw,
        template=Template.from_json(raw),
    )


@pytest.fixture(scope="session")
def dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    yield synthesize(tmp_path_factory.mktemp("cdk-dev"))


@pytest.fixture(scope="session")
def prod(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synthesized]:
    yield synthesize(
        tmp_path_factory.mktemp("cdk-prod"),
        stage="prod",
        alarmEmail="ops@example.com",
        producerSecurityGroupIds=PRODUCER_SECURITY_GROUP,
        migrationsRunToken=MIGRATIONS_RUN_TOKEN,
        endpointPorts="443,8443",
        metricsApplications="acme,globex",
    )
