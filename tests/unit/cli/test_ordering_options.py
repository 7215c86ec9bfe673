"""The ordered-delivery options of the command line, as parsed: ``endpoints add|update
--ordering --fifo-batch-size --fifo-on-dead-letter``, ``send --ordering-key``, ``endpoints
lines`` and ``endpoints resume``; refused before anything is reached when they cannot be meant;
their choices those of the use cases; and ``resume`` over the API within its limit on keys."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tidings.cli import UsageError, build_parser, main
from tidings.cli import endpoints as endpoints_cli
from tidings.cli import messages as messages_cli
from tidings.cli.backend import RESUME_CHUNK, ApiBackend
from tidings.client.models import ResumedLines

ADD = ["endpoints", "add", "https://receiver.example/hook", "--event-type", "*"]


def test_the_choices_are_the_use_cases() -> None:
    from tidings.logic import lines, messages

    assert endpoints_cli.ORDERINGS == lines.ORDERINGS
    assert endpoints_cli.ON_DEAD_LETTER == lines.ON_DEAD_LETTER
    assert messages_cli.STATUSES == messages.STATUSES
    assert "waiting" in messages_cli.STATUSES
    assert RESUME_CHUNK == 100


def test_add_and_update_take_the_ordering_options() -> None:
    args = build_parser().parse_args(
        [*ADD, "--ordering", "fifo", "--fifo-batch-size", "100", "--fifo-on-dead-letter", "pause"]
    )
    assert (args.ordering, args.fifo_batch_size, args.fifo_on_dead_letter) == ("fifo", 100, "pause")
    args = build_parser().parse_args(ADD)
    assert (args.ordering, args.fifo_batch_size, args.fifo_on_dead_letter) == (None, None, None)
    # An update leaves what it is not given as it is.
    args = build_parser().parse_args(["endpoints", "update", "3", "--fifo-batch-size", "1"])
    assert args.fifo_batch_size == 1
    assert args.ordering is endpoints_cli._KEEP
    assert args.fifo_on_dead_letter is endpoints_cli._KEEP


def test_send_takes_an_ordering_key() -> None:
    args = build_parser().parse_args(["send", "t", "{}", "--ordering-key", "cus_1"])
    assert args.ordering_key == "cus_1"
    assert build_parser().parse_args(["send", "t", "{}"]).ordering_key is None


def test_lines_and_resume_are_parsed() -> None:
    args = build_parser().parse_args(["endpoints", "lines", "3", "--paused", "--app", "acme"])
    assert (args.endpoint_id, args.paused, args.app) == (3, True, "acme")
    assert build_parser().parse_args(["endpoints", "lines", "3"]).paused is False
    args = build_parser().parse_args(
        ["endpoints", "resume", "3", "--ordering-key", "a", "--ordering-key", "b", "--no-key"]
    )
    assert (args.ordering_keys, args.no_key) == (["a", "b"], True)
    args = build_parser().parse_args(["endpoints", "resume", "3"])
    assert (args.ordering_keys, args.no_key) == (None, False)


@pytest.mark.parametrize("size", ["0", "101", "-1", "2.5", "ten", "", "٣"])
@pytest.mark.parametrize("command", [ADD, ["endpoints", "update", "3"]])
def test_a_bad_fifo_batch_size_exits_2_naming_the_option(
    size: str,
    command: list[str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Refused as the arguments are read: no database, no API is reached.
    monkeypatch.delenv("DATABASE_URL", raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--fifo-batch-size", size])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "argument --fifo-batch-size:" in err
    assert "must be a whole number 1..100" in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        ([*ADD, "--ordering", "lifo"], "argument --ordering: invalid choice: 'lifo'"),
        ([*ADD, "--fifo-on-dead-letter", "stop"], "argument --fifo-on-dead-letter"),
        (["endpoints", "resume", "x"], "endpoint id 'x' is not a whole number"),
        (["endpoints", "lines", "0"], "endpoint id '0' must be positive"),
        (["messages", "list", "--status", "paused"], "invalid choice: 'paused'"),
    ],
)
def test_what_cannot_be_meant_exits_2(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    assert named in capsys.readouterr().err


def test_messages_can_be_listed_by_the_waiting_status() -> None:
    args = build_parser().parse_args(["messages", "list", "--status", "waiting"])
    assert args.status == "waiting"


@dataclass
class _Lines:
    """A client's line operations: each call recorded, every named key resumed."""

    calls: list[list[str | None] | None] = field(default_factory=list)

    def in_app(self, app: str | None) -> _Lines:
        return self

    def resume_lines(
        self, endpoint_id: int, *, ordering_keys: list[str | None] | None = None
    ) -> ResumedLines:
        self.calls.append(ordering_keys)
        return ResumedLines(endpoint_id=endpoint_id, resumed=list(ordering_keys or ["a"]))


def test_over_the_api_many_lines_are_resumed_in_requests_the_api_takes() -> None:
    client = _Lines()
    backend = ApiBackend(client)  # type: ignore[arg-type]
    keys: list[str | None] = [f"k{n}" for n in range(2 * RESUME_CHUNK + 1)] + [None]
    resumed = backend.resume_lines(None, 7, keys)
    assert [len(call or ()) for call in client.calls] == [RESUME_CHUNK, RESUME_CHUNK, 2]
    assert (resumed.endpoint_id, resumed.resumed) == (7, keys)
    # None: every paused line, in one request that names none.
    client.calls.clear()
    assert backend.resume_lines(None, 7, None).resumed == ["a"]
    assert client.calls == [None]
    # An empty list is not every line.
    with pytest.raises(UsageError, match="name the lines"):
        backend.resume_lines(None, 7, [])
    assert client.calls == [None]


def test_how_an_ordering_is_described() -> None:
    @dataclass
    class Shown:
        ordering: str
        fifo_batch_size: int = 1
        fifo_on_dead_letter: str = "continue"
        paused_lines: int = 0
        id: int = 3

    describe: Any = endpoints_cli.describe_ordering
    assert describe(Shown("none")) == "none (concurrently, in no promised order)"
    assert describe(Shown("fifo")) == (
        "fifo (one message a request; a dead letter lets its line go on)"
    )
    assert describe(Shown("fifo", 20, "pause", 1)) == (
        "fifo (up to 20 messages a request; a dead letter pauses its line; 1 line paused)"
    )
    assert endpoints_cli._short_ordering(Shown("fifo", 20, "pause", 2)) == (
        "fifo (batch 20, pause; 2 paused)"
    )
    assert endpoints_cli._short_ordering(Shown("none")) == "none"
