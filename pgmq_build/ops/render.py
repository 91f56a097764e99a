"""What the admin commands print: one JSON document on stdout with --json, else rich tables on
stdout; progress bars, spinners, prompts and errors go to stderr so stdout stays parseable.
Text a role chose (names, payloads, database errors quoting them) is shown through
`printable()`, escaped, and never read as rich markup or emoji codes."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ..printable import printable
from .fitted import DASH, Fitted
from .numbers import Number

PIPE_WIDTH = 200


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, timedelta):  # intervals (a stream's retention) in seconds
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_line(doc: Any) -> str:
    """One JSON document on one line (tail --json)."""
    return json.dumps(doc, default=_jsonable)


class Output:
    """Where a command's results go: JSON (``as_json``) or rich text."""

    def __init__(self, as_json: bool = False) -> None:
        self.as_json = as_json
        # no markup or emoji codes: queue names and payloads are printed as they are, brackets
        # and colons included (control characters escaped: printable())
        self.out = Console(highlight=False, markup=False, emoji=False)
        self.err = Console(stderr=True, highlight=False, markup=False, emoji=False)
        if not self.out.is_terminal:  # piped or captured: whole rows, not a squeezed 80 columns
            self.out.width = PIPE_WIDTH

    def json(self, doc: Any) -> None:
        click.echo(json.dumps(doc, indent=2, default=_jsonable))

    def print(self, *things: Any) -> None:
        self.out.print(*(printable(t) if isinstance(t, str) else t for t in things))

    def result(self, doc: Any, text: str) -> None:
        """A command's outcome: the document with --json, else the sentence."""
        if self.as_json:
            self.json(doc)
        else:
            self.print(text)

    def note(self, text: str) -> None:
        """A human line on stderr (never pollutes --json output)."""
        self.err.print(printable(text))

    @contextmanager
    def progress(self, description: str, total: int | None) -> Iterator[Callable[[int], None]]:
        """A bar (M of N, elapsed, remaining) on stderr, yielding advance(n); total None: a
        spinner with the elapsed time."""
        if total is None:
            columns: Sequence[Any] = (SpinnerColumn(), TextColumn("{task.description}", markup=False),
                                      TimeElapsedColumn())
        else:
            columns = (TextColumn("{task.description}", markup=False), BarColumn(), MofNCompleteColumn(),
                       TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=self.err) as bar:
            task = bar.add_task(printable(description), total=total)

            def advance(n: int) -> None:
                done = bar.tasks[0].completed + n
                if total is not None and done > (bar.tasks[0].total or 0):
                    bar.update(task, total=done)  # more arrived than counted at the start
                bar.update(task, completed=done)

            yield advance

def table(columns: Sequence[str], body: Sequence[Sequence[Any]], *, title: str | None = None,
          right: Sequence[str] = (), whole: Sequence[str] = (), drop: Sequence[str] = ()) -> Fitted:
    """A plain table; the columns named in ``right`` are right-aligned, they and the ``whole``
    ones are never cut (numbers, states, times); ``drop``: the columns to hide, first one first,
    when the numbers abbreviated do not fit (fitted.py)."""
    return Fitted(columns, body, right=right, whole=whole, drop=drop, title=title)


def fields(row: dict[str, Any]) -> Table:
    """One record as a two-column key/value table."""
    t = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    t.add_column(style="bold")
    t.add_column()
    for key, v in row.items():
        t.add_row(cell(key), cell(v))
    return t


def cell(value: Any) -> Text:
    """A table cell: Text (no markup), control characters escaped."""
    return Text(DASH if value is None else printable(str(value)))


def count(n: int | None) -> Number | str:
    """A count cell: exact or abbreviated as the table's width allows; str() is exact."""
    return DASH if n is None else Number(int(n))


def counted(row: dict[str, Any], key: str) -> Number | str:
    """A count of a pgmq.queue_metrics() row, marked ~ when the row's counts are estimates."""
    if row[key] is None:
        return DASH
    return Number(int(row[key]), "~" if row.get("estimated") else "")


def rate(r: float | None) -> Number | str:
    return DASH if r is None else Number(float(r))


def age(seconds: float | None) -> str:
    """3.2s, 42s, 4m05s, 2h03m, 3d04h."""
    if seconds is None:
        return DASH
    s = max(0.0, float(seconds))
    if s < 10:
        return f"{s:.1f}s"
    s = int(s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def size(n: int | None) -> str:
    if n is None:
        return DASH
    value = float(n)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def clip(value: Any, width: int = 60) -> str:
    """A JSON value on one line, cut to ``width`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, default=_jsonable)
    return text if len(text) <= width else text[: width - 1] + "…"
