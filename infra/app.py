"""The CDK app: ``cdk synth -c stage=dev``, or without the CDK CLI
``python -m infra.app -c stage=dev`` (the cloud assembly goes to ``CDK_OUTDIR``, default
``cdk.out``; the context comes from ``cdk.json`` and the ``-c key=value`` arguments).

The layers are built first, on this machine and without Docker (see ``infra.build_layers``);
cdk-nag's AWS Solutions checks run on every synth and fail it on any unacknowledged finding.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aws_cdk import App, Environment, Validations
from cdk_nag import AwsSolutionsChecks

from infra.build_layers import REPO_ROOT, build_layers
from infra.config import stage_config_from_node
from infra.functions import LAYER_PLATFORM
from infra.stack import TidingsStack


def build_app(app: App | None = None) -> tuple[App, TidingsStack]:
    """Define the stack of the stage named in the context, with cdk-nag attached."""
    app = app or App()
    config = stage_config_from_node(app.node)
    layers = build_layers(LAYER_PLATFORM)
    stack = TidingsStack(
        app,
        config.stack_name,
        config=config,
        layers=layers,
        migrations_run_token=str(app.node.try_get_context("migrationsRunToken") or ""),
        description=f"Tidings webhook delivery ({config.stage})",
        env=_environment(),
    )
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def _environment() -> Environment | None:
    account = os.environ.get("CDK_DEFAULT_ACCOUNT")
    region = os.environ.get("CDK_DEFAULT_REGION")
    if account and region:
        return Environment(account=account, region=region)
    return None


def cdk_json_context(cdk_json: Path = REPO_ROOT / "cdk.json") -> dict[str, Any]:
    """The ``context`` block of ``cdk.json``, as the CDK CLI would pass it to the app."""
    context: dict[str, Any] = json.loads(cdk_json.read_text(encoding="utf-8")).get("context", {})
    return context


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "-c",
        "--context",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a context value, as with 'cdk synth -c' (repeatable)",
    )
    args = parser.parse_args(argv)
    if "CDK_CONTEXT_JSON" in os.environ:
        # Run by the CDK CLI, which passes cdk.json and -c values itself.
        app = App()
    else:
        context = cdk_json_context()
        for item in args.context:
            key, separator, value = item.partition("=")
            if not separator or not key:
                parser.error(f"context {item!r} is not KEY=VALUE")
            context[key] = value
        app = App(context=context, outdir=os.environ.get("CDK_OUTDIR", "cdk.out"))
    build_app(app)
    app.synth()


if __name__ == "__main__":
    main()
