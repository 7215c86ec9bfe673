"""Live delivery progress drawn as text: a progress bar and the per-endpoint table.

Drawing is plain text: on a terminal the block is redrawn in place with ANSI cursor movement;
elsewhere (CI logs, pipes), and on a terminal when ``NO_COLOR`` is set (https://no-color.org) or
``TERM`` is ``dumb``, a full block is printed every few seconds instead, with no escape sequence.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Protocol, TextIO


class EndpointRow(Protocol):
    """An endpoint's figures as the table shows them (the database's ``EndpointProgress``, or the
    API's ``EndpointFigures``)."""

    @property
    def endpoint_id(self) -> int: ...
    @property
    def url(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def circuit(self) -> str: ...
    @property
    def total(self) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def in_flight(self) -> int: ...
    @property
    def retrying(self) -> int: ...
    @property
    def delivered(self) -> int: ...
    @property
    def dead_letter(self) -> int: ...
    @property
    def p95_ms(self) -> float | None: ...
    @property
    def settled(self) -> int: ...


def progress_bar(done: int, total: int, width: int = 30) -> str:
    """``[#########.........]  48%  1,234/2,560``"""
    if width < 1:
        raise ValueError(f"width must be positive, got {width}")
    share = 1.0 if total <= 0 else min(1.0, max(0.0, done / total))
    filled = round(share * width)
    return f"[{'#' * filled}{'.' * (width - filled)}] {share:4.0%}  {done:,}/{total:,}"


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain text table: text columns left-aligned, numbers right-aligned."""
    cells = [[_cell(value) for value in row] for row in rows]
    widths = [
        max([len(header), *(len(row[index]) for row in cells)])
        for index, header in enumerate(headers)
    ]
    numeric = [
        bool(rows) and all(isinstance(row[i], int | float) or row[i] is None for row in rows)
        for i in range(len(headers))
    ]

    def line(values: Sequence[str]) -> str:
        parts = [
            value.rjust(width) if is_number else value.ljust(width)
            for value, width, is_number in zip(values, widths, numeric, strict=True)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([line(list(headers)), rule, *(line(row) for row in cells)])


def _cell(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


ENDPOINT_HEADERS = (
    "endpoint",
    "delivered",
    "retrying",
    "pending",
    "in flight",
    "dead",
    "circuit",
    "p95 ms",
)


def endpoint_rows(
    endpoints: Sequence[EndpointRow], names: dict[int, str] | None = None
) -> list[list[object]]:
    rows: list[list[object]] = []
    for e in endpoints:
        name = (names or {}).get(e.endpoint_id) or e.description or e.url
        circuit = e.circuit if e.enabled else "disabled"
        rows.append(
            [
                name,
                e.delivered,
                e.retrying,
                e.pending,
                e.in_flight,
                e.dead_letter,
                circuit,
                e.p95_ms,
            ]
        )
    return rows


def render(
    endpoints: Sequence[EndpointRow],
    expected_total: int,
    elapsed_s: float,
    names: dict[int, str] | None = None,
) -> str:
    """The progress block: a bar over all messages, then the per-endpoint table."""
    settled = sum(e.settled for e in endpoints)
    total = max(expected_total, sum(e.total for e in endpoints))
    header = f"{progress_bar(settled, total)}  {elapsed_s:5.0f}s"
    return header + "\n" + table(ENDPOINT_HEADERS, endpoint_rows(endpoints, names))


def plain_output_asked(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the environment asks for output without escape sequences: ``NO_COLOR`` set to
    anything but the empty string, or ``TERM=dumb``."""
    env = os.environ if environ is None else environ
    return bool(env.get("NO_COLOR")) or env.get("TERM") == "dumb"


class LiveDisplay:
    """Redraws a block in place on a terminal; on anything else, or when the environment asks for
    plain output (``NO_COLOR``, ``TERM=dumb``), prints it every ``every_s``."""

    def __init__(
        self,
        stream: TextIO,
        *,
        every_s: float = 5.0,
        tty: bool | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.stream = stream
        if tty is None:
            tty = stream.isatty() and not plain_output_asked(environ)
        self.tty = tty
        self.every_s = every_s
        self._lines = 0
        self._printed_at: float | None = None

    def show(self, block: str, *, final: bool = False) -> None:
        if self.tty:
            # Up to the first line of the previous block, clear to the end, draw the new one.
            prefix = f"\x1b[{self._lines}F\x1b[J" if self._lines else ""
            self.stream.write(prefix + block + "\n")
            self._lines = block.count("\n") + 1
        else:
            now = time.monotonic()
            if final or self._printed_at is None or now - self._printed_at >= self.every_s:
                self.stream.write(block + "\n\n")
                self._printed_at = now
        self.stream.flush()
