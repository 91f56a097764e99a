"""`pgmq-build top`: a live view of every queue, refreshed every --interval seconds; rates are
the change since the previous refresh (rates.py). q quits, Ctrl-C too."""

from __future__ import annotations

import contextlib
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import click
import psycopg
from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from ..printable import printable
from . import db, render
from .options import dsn_option, handled
from .rates import Rate, rates

COLUMNS = ["queue", "state", "depth", "visible", "in flight", "delayed", "oldest age",
           "send/s", "consume/s", "DLQ depth"]
# hidden in this order when the numbers, abbreviated, still do not fit the terminal
DROP = ["delayed", "visible", "in flight", "DLQ depth", "consume/s"]


def view(rows: list[dict[str, Any]], per: dict[str, Rate], *, interval: float,
         error: str | None = None) -> Group:
    body = [[r["queue_name"], "PAUSED" if r["paused"] else "", render.counted(r, "depth"),
             render.counted(r, "visible"), render.counted(r, "in_flight"), render.counted(r, "delayed"),
             render.age(r["oldest_msg_age_sec"]), render.rate(per[r["queue_name"]].send),
             render.rate(per[r["queue_name"]].consume),
             None if r["dead_letter_queue"] is None else render.count(r["dead_letter_depth"])]
            for r in rows]
    table = render.table(COLUMNS, body, right=COLUMNS[2:], whole=["state"], drop=DROP)
    when = rows[0]["measured_at"].strftime("%H:%M:%S") if rows else time.strftime("%H:%M:%S")
    head = Text(f"pgmq top  {when}  {len(rows)} queue(s)  every {interval:g}s  (q quits)",
                style="bold")
    parts: list[Any] = [head, table]
    if error:
        parts.append(Text(printable(f"database error: {error} (retrying)"), style="red"))
    return Group(*parts)


@contextlib.contextmanager
def _keys() -> Iterator[Callable[[float], bool]]:
    """wait(seconds) -> True when q was pressed meanwhile. The terminal is in cbreak mode (keys
    arrive unbuffered, Ctrl-C still interrupts) while the view runs."""
    if not sys.stdin.isatty():
        yield lambda seconds: bool(time.sleep(seconds))
        return
    import termios
    import tty

    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    tty.setcbreak(fd)

    def wait(seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([fd], [], [], left)
            if ready and os.read(fd, 1) in (b"q", b"Q"):
                return True
        return False

    try:
        yield wait
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _follow_terminal_size(console: Console) -> None:
    """Size the view to the terminal as it is now (resizes included): rich would otherwise keep
    the size it found at start-up, or believe a stale COLUMNS/LINES in the environment."""
    try:
        console.size = os.get_terminal_size(sys.stdout.fileno())
    except (OSError, ValueError):  # not a terminal: keep rich's guess
        pass


@click.command("top")
@dsn_option
@click.option("--interval", type=click.FloatRange(min=0.2), default=2.0, show_default=True,
              help="Seconds between refreshes.")
@handled
def top_command(dsn: str, interval: float) -> None:
    """A live view of the queues: depth, in flight, oldest age, send and consume rates."""
    conn: db.Conn | None = db.connect(dsn)
    previous: list[dict[str, Any]] | None = None
    rows: list[dict[str, Any]] = []
    console = Console(highlight=False)
    try:
        with _keys() as wait, Live(console=console, screen=True, auto_refresh=False) as live:
            while True:
                error = None
                try:
                    if conn is None:
                        conn = db.open_connection(dsn)
                    rows = db.queue_metrics(conn)
                except psycopg.Error as exc:
                    error = db.database_error(exc).message
                    if conn is not None and (conn.broken or conn.closed):
                        conn.close()
                        conn = None
                    previous = None  # rates restart after a gap
                _follow_terminal_size(console)
                live.update(view(rows, rates(previous, rows), interval=interval, error=error),
                            refresh=True)
                if error is None:
                    previous = rows
                if wait(interval):
                    return
    except KeyboardInterrupt:
        return
    finally:
        if conn is not None:
            conn.close()
