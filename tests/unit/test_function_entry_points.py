"""Each deployed function's entry point (``functions/<name>/app.py``, the code asset the CDK app
packages) is one import of its handler from ``tidings.handlers``, so that the handlers run the
same from the Lambda layer and from an installed package."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

from tidings.deployment import FUNCTION_SPECS
from tidings.local.lambda_env import handler_names

ROOT = Path(__file__).resolve().parents[2]
# The portal's page function is deployed beside the others (infra/portal.py: outside the VPC,
# without a database), not from FUNCTION_SPECS.
NAMES = sorted([*(spec.name for spec in FUNCTION_SPECS), "portal"])


def test_every_function_has_an_entry_point_and_a_handler_module_and_nothing_else_does() -> None:
    entry_points = sorted(p.parent.name for p in (ROOT / "functions").glob("*/app.py"))
    assert entry_points == NAMES
    assert handler_names() == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_an_entry_point_only_imports_its_handler(name: str) -> None:
    path = ROOT / "functions" / name / "app.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstring, *statements = tree.body
    assert isinstance(docstring, ast.Expr) and isinstance(docstring.value, ast.Constant)
    imports = [s for s in statements if isinstance(s, ast.ImportFrom)]
    assert [(i.module, [a.name for a in i.names]) for i in imports] == [
        (f"tidings.handlers.{name}", ["handler"])
    ]
    others = [s for s in statements if not isinstance(s, ast.ImportFrom)]
    assert [ast.unparse(s) for s in others] == ["__all__ = ['handler']"]

    spec = importlib.util.spec_from_file_location(f"entry_point_{name}", path)
    assert spec is not None and spec.loader is not None
    entry_point = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(entry_point)
    handler_module = importlib.import_module(f"tidings.handlers.{name}")
    assert entry_point.handler is handler_module.handler
