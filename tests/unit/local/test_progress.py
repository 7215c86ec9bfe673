"""Progress drawing: the bar, the table, and in-place redraw versus periodic lines."""

from __future__ import annotations

import io

import pytest

from tidings.dal.operator import EndpointProgress
from tidings.local.progress import LiveDisplay, progress_bar, render, table


def _endpoint(endpoint_id: int, **counts: int) -> EndpointProgress:
    figures = {
        "total": 0,
        "pending": 0,
        "in_flight": 0,
        "retrying": 0,
        "delivered": 0,
        "dead_letter": 0,
        "attempts": 0,
    }
    figures.update(counts)
    return EndpointProgress(
        endpoint_id=endpoint_id,
        url=f"http://127.0.0.1:9/{endpoint_id}",
        description="",
        enabled=True,
        circuit="closed",
        p95_ms=1234.4,
        **figures,
    )


def test_bar_shows_share_and_counts() -> None:
    assert progress_bar(0, 10, width=10) == "[..........]   0%  0/10"
    assert progress_bar(5, 10, width=10) == "[#####.....]  50%  5/10"
    assert progress_bar(2500, 2500, width=4) == "[####] 100%  2,500/2,500"
    assert progress_bar(0, 0, width=2) == "[##] 100%  0/0"


def test_bar_refuses_a_useless_width() -> None:
    with pytest.raises(ValueError, match="width"):
        progress_bar(1, 2, width=0)


def test_table_aligns_text_left_and_numbers_right() -> None:
    text = table(("name", "count"), [["a", 5], ["longer", 1234]])
    assert text.splitlines() == [
        "name    count",
        "------  -----",
        "a           5",
        "longer  1,234",
    ]


def test_render_counts_settled_messages_against_the_expected_total() -> None:
    block = render(
        [_endpoint(1, total=10, delivered=6, dead_letter=1), _endpoint(2, total=5, pending=5)],
        expected_total=20,
        elapsed_s=3,
        names={1: "healthy"},
    )
    first, *rest = block.splitlines()
    assert "7/20" in first
    assert rest[2].split()[:2] == ["healthy", "6"]
    assert "1,234" in rest[2]


def test_terminal_display_redraws_in_place() -> None:
    stream = io.StringIO()
    display = LiveDisplay(stream, tty=True)
    display.show("a\nb")
    display.show("c\nd")
    assert stream.getvalue() == "a\nb\n\x1b[2F\x1b[Jc\nd\n"


def test_log_display_prints_every_few_seconds_and_always_the_final_block() -> None:
    stream = io.StringIO()
    display = LiveDisplay(stream, tty=False, every_s=3600)
    display.show("one")
    display.show("two")
    display.show("three", final=True)
    assert stream.getvalue() == "one\n\nthree\n\n"
    assert "\x1b" not in stream.getvalue()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_terminal_is_redrawn_in_place_unless_plain_output_is_asked() -> None:
    stream = _Terminal()
    display = LiveDisplay(stream, environ={"TERM": "xterm-256color"})
    display.show("a")
    display.show("b")
    assert stream.getvalue() == "a\n\x1b[1F\x1b[Jb\n"
    # NO_COLOR set to the empty string asks for nothing (https://no-color.org).
    assert LiveDisplay(stream, environ={"NO_COLOR": ""}).tty


@pytest.mark.parametrize("environ", [{"NO_COLOR": "1"}, {"TERM": "dumb"}])
def test_no_color_and_a_dumb_terminal_make_the_display_plain(environ: dict[str, str]) -> None:
    stream = _Terminal()
    display = LiveDisplay(stream, every_s=3600, environ=environ)
    assert not display.tty
    display.show("one\nrow")
    display.show("two\nrow")
    display.show("three\nrow", final=True)
    assert stream.getvalue() == "one\nrow\n\nthree\nrow\n\n"
    assert "\x1b" not in stream.getvalue()
