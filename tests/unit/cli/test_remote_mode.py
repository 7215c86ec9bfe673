"""Which mode a command runs in: over the API when an API URL is given (``--api-url`` before or
after the command, or ``TIDINGS_API_URL``), with a token; on the database otherwise. What cannot
be meant is a usage error (2)."""

from __future__ import annotations

import pytest

from tidings.cli import UsageError, build_parser, main
from tidings.cli.backend import remote_settings

URL = "https://abc.execute-api.eu-west-1.amazonaws.com/prod/v1/"
TOKEN = "tdg_" + "t" * 43
RECOVER = ["--api-url", URL, "--token", TOKEN, "endpoints", "recover", "1", "--since", "1h"]


def _settings(argv: list[str], environ: dict[str, str]) -> tuple[str, str] | None:
    return remote_settings(build_parser().parse_args(argv), environ)


def test_the_api_url_and_token_come_from_the_options_or_the_environment() -> None:
    assert _settings(["status"], {}) is None
    assert _settings(["--api-url", URL, "--token", TOKEN, "status"], {}) == (URL, TOKEN)
    assert _settings(["status", "--api-url", URL, "--token", TOKEN], {}) == (URL, TOKEN)
    env = {"TIDINGS_API_URL": URL, "TIDINGS_TOKEN": TOKEN}
    assert _settings(["endpoints", "list"], env) == (URL, TOKEN)
    # An option wins over the environment.
    other = "https://other.example/prod"
    assert _settings(["--api-url", other, "apps", "list"], env) == (other, TOKEN)
    assert _settings(["apps", "list", "--api-url", other], env) == (other, TOKEN)


def test_what_cannot_be_meant_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="needs a token"):
        _settings(["--api-url", URL, "status"], {})
    with pytest.raises(UsageError, match="--token goes with --api-url"):
        _settings(["--token", TOKEN, "status"], {})
    with pytest.raises(UsageError, match="works on the database or the local runtime"):
        _settings(["--api-url", URL, "--token", TOKEN, "migrate"], {})


def test_a_stack_url_left_in_the_environment_does_not_stop_a_local_command() -> None:
    env = {"TIDINGS_API_URL": URL, "TIDINGS_TOKEN": TOKEN}
    assert _settings(["schema"], env) is None
    assert _settings(["secrets", "where"], env) is None


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--api-url", URL, "status"], "--api-url needs a token"),
        (["--api-url", "ftp://nowhere", "--token", TOKEN, "status"], "http(s)"),
        (["--api-url", URL, "--token", TOKEN, "openapi"], "not over the API"),
        # Refused before any request: the batch size is the database mode's.
        ([*RECOVER, "--batch-size", "5"], "--batch-size is for the database mode"),
    ],
)
def test_usage_errors_exit_2_naming_the_problem(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert named in captured.err


def test_the_command_line_reads_the_variables_the_client_reads() -> None:
    from tidings.cli import backend
    from tidings.client import client

    assert (backend.API_URL_VARIABLE, backend.TOKEN_VARIABLE) == (
        client.API_URL_VARIABLE,
        client.TOKEN_VARIABLE,
    )
