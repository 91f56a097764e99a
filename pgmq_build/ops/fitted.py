"""Tables that never cut a number. rich squeezes every column of a table wider than the
terminal and cuts what no longer fits (a depth of 23,145,678 became `23…`). A Fitted table
picks, when it is drawn and for the width it is drawn in, the first layout that fits:

1. every column, numbers exact;
2. every column, numbers abbreviated (numbers.abbreviate: 23.1M);
3. then columns hidden one by one in the order the command gave (`drop`), named in a caption.

Right-aligned columns (numbers, ages, sizes) and the `whole` ones (states, timestamps) keep their
full width in every layout; only the other text columns (names, payloads) give up room, down to TEXT_MIN characters, cut with
an ellipsis. When even the last layout is too wide, it is drawn as rich would draw it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from ..printable import printable
from .numbers import Number

DASH = "–"  # a value that does not apply (no DLQ, empty queue, no rate yet)
TEXT_MIN = 12  # a text column is cut no narrower than this (or its header)
WRAPPED = ("message", "headers")  # text columns that wrap instead of being cut
UNBOUNDED = 10**6


def _text(value: Any, short: bool) -> str:
    if value is None:
        return DASH
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float)):
        value = Number(value)
    if isinstance(value, Number):
        return value.short if short else value.exact
    return printable(str(value))


class Fitted:
    """A plain table (see the module) that fits the width it is drawn in."""

    def __init__(self, columns: Sequence[str], body: Sequence[Sequence[Any]], *,
                 right: Sequence[str] = (), whole: Sequence[str] = (), drop: Sequence[str] = (),
                 title: str | None = None) -> None:
        unknown = [c for c in (*right, *whole, *drop) if c not in columns]
        if unknown:
            raise ValueError(f"no such column(s): {unknown}")
        self.columns = list(columns)
        self.body = [list(row) for row in body]
        self.right = set(right)
        self.whole = self.right | set(whole)
        self.drop = list(drop)
        self.title = title

    def layouts(self) -> list[tuple[bool, list[str]]]:
        """(abbreviated, hidden columns) in the order they are tried."""
        return [(False, []), *((True, self.drop[:n]) for n in range(len(self.drop) + 1))]

    def table(self, width: int, console: Console, options: ConsoleOptions) -> Table:
        """The table drawn at `width` columns."""
        for short, hidden in self.layouts():
            shown = [i for i, c in enumerate(self.columns) if c not in hidden]
            cells = [[_text(row[i], short) for i in shown] for row in self.body]
            names = [self.columns[i] for i in shown]
            natural = [max([cell_len(n), *(cell_len(r[j]) for r in cells)]) for j, n in enumerate(names)]
            text = [j for j, n in enumerate(names) if n not in self.whole]
            floor = {j: min(natural[j], max(TEXT_MIN, cell_len(names[j]))) for j in text}
            narrowest = self._build(names, cells, floor, hidden)
            need = Measurement.get(console, options.update_width(UNBOUNDED), narrowest).maximum
            if need <= width or (short, hidden) == self.layouts()[-1]:
                break
        # the room left goes to the text columns, first one first, up to their natural width
        room = max(0, width - need)
        allotted = {}
        for j in text:
            allotted[j] = floor[j] + min(room, natural[j] - floor[j])
            room -= allotted[j] - floor[j]
        return self._build(names, cells, allotted, hidden)

    def _build(self, names: list[str], cells: list[list[str]], text_width: dict[int, int],
               hidden: list[str]) -> Table:
        caption = None if not hidden else f"hidden at this width: {', '.join(hidden)}"
        t = Table(box=box.SIMPLE_HEAD, title=None if self.title is None else Text(printable(self.title)),
                  title_justify="left", caption=caption, caption_justify="left", pad_edge=False)
        for j, name in enumerate(names):
            if name in self.whole:
                t.add_column(name, justify="right" if name in self.right else "left", no_wrap=True)
            else:
                wraps = name in WRAPPED
                t.add_column(name, justify="left", no_wrap=not wraps, max_width=text_width[j],
                             overflow="fold" if wraps else "ellipsis")
        for row in cells:
            t.add_row(*(Text(c) for c in row))
        return t

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width, console, options)

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        return Measurement.get(console, options, self.table(options.max_width, console, options))
