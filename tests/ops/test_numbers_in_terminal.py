"""Numbers are never cut: `top` and `queues` in a real terminal (tmux) at 80 and 120 columns,
with a queue of 120,000 messages (its depth is the statistics' live-row count, as for any
queue of more than 640 pages: 23 million would read the same way) and a dead-letter queue of
23,145. Each number shows whole, exact or abbreviated (23.1k); a column that does not fit is
hidden and named under the table; only the queue name may be cut."""

from __future__ import annotations

import re
import shlex
import sys

import pytest

from tests.helpers import wait_for
from tests.ops.support import REPO
from tests.ops.test_top import Tmux

BIG = "backlog_of_the_eu_orders"  # longer than the 12 characters a name is cut to
DEPTH, DEAD = 120_000, 23_145
SHOWN = {"depth": ("~120,000", "~120.0k"), "visible": ("~120,000", "~120.0k"),
         "DLQ depth": ("23,145", "23.1k")}
NUMBER = re.compile(r"^~?-?[\d,]+(\.\d)?[kMGTPE]?$|^–$|^\d+(\.\d)?[smhd](\d\d[smh])?$")


@pytest.fixture
def backlog(conn):
    conn.execute("SELECT pgmq.create(%s)", (BIG,))
    conn.execute("SELECT pgmq.create('backlog_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy(%s, 3, dead_letter_queue => 'backlog_dlq')", (BIG,))
    conn.execute("SELECT pgmq.send_batch(%s, array_fill('{}'::jsonb, ARRAY[%s]))", (BIG, DEPTH))
    conn.execute("SELECT pgmq.send_batch('backlog_dlq', array_fill('{}'::jsonb, ARRAY[%s]))", (DEAD,))
    # the live-row count the depth is read from reaches the statistics within a second
    wait_for(lambda: conn.execute("SELECT depth FROM pgmq.queue_metrics(%s)", (BIG,)).fetchone()[0] == DEPTH,
             timeout=10, what="the statistics to count the backlog")
    return BIG


def run(dsn: str, tmp_path, width: int, *args: str) -> Tmux:
    command = (f"cd {shlex.quote(str(REPO))} && unset COLUMNS LINES; PYTHONPATH=. {shlex.quote(sys.executable)} "
               f"-m pgmq_build {' '.join(map(shlex.quote, args))} --dsn {shlex.quote(dsn)}; "
               "echo EXITED $?; sleep 60")
    return Tmux(command, tmp_path / f"tmux-{width}.sock", width)


def parse(screen: str, state: str) -> tuple[dict[str, str], str]:
    """The backlog row as {column: cell} (the name under "queue") and the text after the table.
    The header's columns are split at two spaces; the row at any: its `state` column is blank."""
    lines = screen.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[:1] == ["queue"])
    columns = re.split(r"\s{2,}", lines[at].strip())
    row = next(line.split() for line in lines[at + 1:] if line.split()[:1] and line.split()[0].startswith(BIG[:10]))
    assert columns[1] == state
    cells = dict(zip([columns[0], *columns[2:]], row, strict=True))
    return cells, "\n".join(lines[at + 2:])


def check(screen: str, state: str, width: int) -> dict[str, str]:
    cells, below = parse(screen, state)
    for column, cell in cells.items():
        if column not in ("queue", "DLQ"):
            assert NUMBER.match(cell), (column, cell, screen)  # whole: no ellipsis, no cut digits
    for column, forms in SHOWN.items():
        if column in cells:
            assert cells[column] in forms, (column, cells, screen)
    assert cells["queue"] in (BIG, ) or (cells["queue"].endswith("…") and BIG.startswith(cells["queue"][:-1]))
    assert "depth" in cells  # the depth is never the column hidden
    hidden = [c for c in ("visible", "in flight", "delayed", "DLQ depth") if c not in cells]
    if hidden:
        assert "hidden at this width:" in below, screen
    assert max(len(line.rstrip()) for line in screen.splitlines()) <= width
    return cells


@pytest.mark.parametrize("width", [80, 120])
def test_top_never_cuts_a_number(backlog, dsn, tmp_path, width):
    session = run(dsn, tmp_path, width, "top", "--interval", "0.5")
    try:
        wait_for(lambda: BIG[:10] in session.screen(), timeout=20, what="the backlog row")
        screen = session.screen()
        (tmp_path.parent / f"top-{width}.txt").write_text(screen)  # the capture, for a look
        cells = check(screen, "state", width)
        if width == 120:  # room for every column, the numbers exact
            assert "hidden" not in screen and (cells["depth"], cells["DLQ depth"]) == ("~120,000", "23,145")
        else:  # abbreviated, three columns hidden
            assert (cells["depth"], cells["DLQ depth"]) == ("~120.0k", "23.1k")
            assert "hidden at this width: delayed, visible, in flight" in screen
        session.keys("q")
        wait_for(lambda: "EXITED 0" in session.screen(), timeout=10, what="top to exit on q")
    finally:
        session.close()


@pytest.mark.parametrize("width", [80, 120])
def test_queues_never_cuts_a_number(backlog, dsn, tmp_path, width):
    session = run(dsn, tmp_path, width, "queues", "--no-rates")
    try:
        wait_for(lambda: "EXITED 0" in session.screen(), timeout=30, what="pgmq-build queues to finish")
        screen = session.screen()
        (tmp_path.parent / f"queues-{width}.txt").write_text(screen)
        check(screen, "paused", width)
    finally:
        session.close()


def test_piped_output_shows_exact_numbers(backlog, ops):
    """Piped (200 columns): every number exact."""
    result = ops("queues", "--no-rates")
    cells, _ = parse(result.stdout, "paused")
    assert (cells["depth"], cells["DLQ depth"], cells["DLQ"]) == ("~120,000", "23,145", "backlog_dlq")
