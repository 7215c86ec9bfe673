"""What the environment may hold: finite numbers only, and no TIDINGS_* variable Tidings does
not read (a misspelt setting is named at start, with the closest known name, in every function
and the CLI, instead of being silently ignored)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tidings import wiring
from tidings.cli import main
from tidings.config import (
    ConfigError,
    Settings,
    check_environment,
    get_settings,
    known_variables,
)
from tidings.local.lambda_env import handler_module, handler_names

ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = handler_names()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("TIDINGS_LEASE_S", "nan"),
        ("TIDINGS_HTTP_TIMEOUT_S", "inf"),
        ("TIDINGS_CIRCUIT_COOLDOWN_S", "-inf"),
        ("TIDINGS_LEASE_QUEUE_ALLOWANCE_S", "NaN"),
        ("TIDINGS_DEAD_LETTER_PATTERN_SHARE", "nan"),
        ("TIDINGS_BACKOFF_BASE_S", "infinity"),
        ("TIDINGS_RETRY_SCHEDULE", "5,nan,60"),
    ],
)
def test_a_number_that_is_not_finite_stops_the_start(variable: str, value: str) -> None:
    with pytest.raises(ConfigError, match=f"{variable}='{value}' is not a finite number"):
        Settings.from_env({variable: value})


@pytest.mark.parametrize("field", ["lease_s", "http_timeout_s", "secret_rotation_overlap_s"])
def test_a_setting_made_in_code_must_be_finite_too(field: str) -> None:
    for value in (float("nan"), float("inf")):
        with pytest.raises(ConfigError, match="must be a finite number"):
            Settings().replace(**{field: value})


def test_a_misspelt_variable_is_named_with_the_closest_setting() -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"TIDINGS_HTTP_TIMOUT_S": "5", "TIDINGS_LEASE": "30"})
    assert str(refused.value) == (
        "TIDINGS_HTTP_TIMOUT_S is not a Tidings setting (did you mean TIDINGS_HTTP_TIMEOUT_S?); "
        "TIDINGS_LEASE is not a Tidings setting (did you mean TIDINGS_LEASE_S?)"
    )
    with pytest.raises(ConfigError, match=r"^TIDINGS_ZZZ is not a Tidings setting$"):
        check_environment({"TIDINGS_ZZZ": "1"})


def test_every_variable_tidings_reads_is_known() -> None:
    """Each TIDINGS_* name written anywhere in the repository (code, CDK, tests, docs) is a
    setting or one of the other variables: none that is read would be refused."""
    pattern = re.compile(r"\bTIDINGS_[A-Z0-9_]+\b")
    # Names that are not variables: a constant of the layer build (infra/build_layers.py), and
    # the README's example of a misspelt one.
    not_variables = {"TIDINGS_SOURCE", "TIDINGS_LEASE"}
    suffixes = {".py", ".md", ".json", ".sql", ".js", ".toml", ".cfg", ".sh", ".yml", ".yaml"}
    found: set[str] = set()
    for path in ROOT.rglob("*"):
        parts = path.relative_to(ROOT).parts
        if any(part.startswith(".") or part in {"node_modules", "cdk.out"} for part in parts):
            continue
        if path == Path(__file__) or not path.is_file():
            continue  # this file writes misspellings on purpose
        if path.suffix in suffixes or path.name == "Makefile":
            found |= set(pattern.findall(path.read_text(encoding="utf-8", errors="replace")))
    assert "TIDINGS_SECRETS_KEY" in found and "TIDINGS_LEASE_S" in found
    assert found - not_variables - known_variables() == set()
    # ... and every known name is accepted.
    check_environment(dict.fromkeys(known_variables(), ""))


@pytest.fixture
def fresh_settings() -> Iterator[None]:
    """The process-wide settings read again from the environment, and forgotten afterwards."""
    wiring.reset()
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("fresh_settings")
@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_with_a_misspelt_variable_fails_to_start(
    function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDINGS_LEASE", "30")
    with pytest.raises(ConfigError, match=r"TIDINGS_LEASE is not a Tidings setting"):
        handler_module(function, module_name=f"unknown_variable_{function}")


@pytest.mark.usefixtures("fresh_settings")
@pytest.mark.parametrize("function", FUNCTIONS)
def test_a_function_with_an_infinite_timeout_fails_to_start(
    function: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIDINGS_HTTP_TIMEOUT_S", "inf")
    with pytest.raises(ConfigError, match="TIDINGS_HTTP_TIMEOUT_S='inf' is not a finite number"):
        handler_module(function, module_name=f"infinite_timeout_{function}")


@pytest.mark.parametrize("argv", [["status"], ["openapi"], ["dev", "--no-api"]])
def test_the_cli_names_a_misspelt_variable_and_exits_2(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TIDINGS_SECRET_KEY", "x")
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        "tidings: TIDINGS_SECRET_KEY is not a Tidings setting (did you mean TIDINGS_SECRETS_KEY?)\n"
    )
