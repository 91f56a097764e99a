"""Hostile names in the terminal views, the way an operator sees them: queues made before 2.9.0
(tests/hostile_names.py) whose names hold ESC, CR/LF, a C1 CSI, DEL or rich markup are shown
escaped (`\\x1b`, `\\r\\n`) in a real terminal (tmux) by `pgmq-build queues` and `top`, every other
row intact; the other commands, the metrics text and the worker's text log escape them too."""

from __future__ import annotations

import shlex
import sys

import pytest

from pgmq_build.printable import printable
from tests.helpers import send_n, wait_for
from tests.hostile_names import HOSTILE, SHOWN, legacy_queues
from tests.ops.support import REPO, spawn
from tests.ops.test_top import Tmux

RAW = ("\x1b", "\r", "\x9b", "\x7f")  # what no output may hold
DEPTH = {label: i + 1 for i, label in enumerate(HOSTILE)}  # each hostile queue's own depth
JOBS = 7


@pytest.fixture
def hostile(conn):
    """The hostile queues (each with its DEPTH), `jobs` with JOBS messages, `jobs` dead-lettering
    into the ESC queue, and a stream whose subscription name holds CR/LF."""
    legacy_queues(conn, list(HOSTILE.values()), {"log\x1b[8m": ["sub\r\nforged"]})
    conn.execute("SELECT pgmq.create('jobs')")
    send_n(conn, "jobs", JOBS)
    for label, name in HOSTILE.items():
        send_n(conn, name, DEPTH[label])
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 3, dead_letter_queue => %s)", (HOSTILE["esc"],))
    return HOSTILE


def terminal(dsn: str, tmp_path, *args: str, width: int = 160) -> Tmux:
    command = (f"cd {shlex.quote(str(REPO))} && unset COLUMNS LINES; PYTHONPATH=. {shlex.quote(sys.executable)} "
               f"-m pgmq_build {' '.join(map(shlex.quote, args))} --dsn {shlex.quote(dsn)}; "
               "echo EXITED $?; sleep 60")
    return Tmux(command, tmp_path / "tmux.sock", width)


def cells_after(screen: str, shown: str) -> list[list[str]]:
    """The cells that follow `shown` on each screen line it begins."""
    return [line.split(shown, 1)[1].split() for line in screen.splitlines() if line.strip().startswith(shown)]


def assert_rows_intact(session: Tmux) -> None:
    """Each hostile name on one line, escaped, with its own depth (the first number: the state
    column is blank while a queue runs); `jobs` on one line with its depth (no forged `jobs` row,
    none erased); nothing the names hold was obeyed."""
    screen = session.screen()
    for label, shown in SHOWN.items():
        rows = cells_after(screen, shown)
        assert len(rows) == 1, (label, screen)
        assert rows[0][0] == str(DEPTH[label]), (label, screen)
    jobs = [line.split() for line in screen.splitlines() if line.split()[:1] == ["jobs"]]
    assert len(jobs) == 1 and jobs[0][1] == str(JOBS), screen
    assert "[red]x[/red]:x:" in screen and "[link=http://e.x]y[/link]" in screen  # markup, literally
    coloured = session._tmux("capture-pane", "-p", "-e", "-t", "top")  # with the terminal's attributes
    assert "\x1b[31m" not in coloured and "\x1b[7m" not in coloured and "\x1b[8m" not in coloured


def test_queues_in_a_terminal(hostile, dsn, tmp_path):
    session = terminal(dsn, tmp_path, "queues", "--no-rates")
    try:
        wait_for(lambda: "EXITED 0" in session.screen(), timeout=30, what="pgmq-build queues to finish")
        assert_rows_intact(session)
    finally:
        session.close()


def test_top_in_a_terminal(hostile, dsn, tmp_path):
    session = terminal(dsn, tmp_path, "top", "--interval", "0.5")
    try:
        wait_for(lambda: SHOWN["link"] in session.screen() and "jobs" in session.screen(), timeout=30,
                 what="top's rows")
        assert_rows_intact(session)
        session.keys("q")
        wait_for(lambda: "EXITED 0" in session.screen(), timeout=15, what="top to quit on q")
    finally:
        session.close()


def test_the_other_commands_escape_names(hostile, ops, conn):
    esc, crlf = HOSTILE["esc"], HOSTILE["crlf"]
    outputs = {
        "queue metrics": ops("queue", "metrics", esc),
        "dlq list": ops("dlq", "list"),
        "queue peek": ops("queue", "peek", crlf),
        "stream list": ops("stream", "list"),
        "stream info": ops("stream", "info"),
        "queue pause": ops("queue", "pause", crlf),
        "unknown queue": ops("queue", "pause", "nope\x1b[2J"),
        "exchange bind": ops("exchange", "bind", "pgmq.topic", esc, "--key", "a.b"),
    }
    for what, result in outputs.items():
        assert not any(c in result.output for c in RAW), (what, result.output)
    assert SHOWN["esc"] in outputs["queue metrics"].stdout and SHOWN["esc"] in outputs["dlq list"].stdout
    assert printable("log\x1b[8m") in outputs["stream list"].stdout
    assert printable("sub\r\nforged") in outputs["stream info"].stdout
    assert SHOWN["crlf"] in outputs["queue pause"].stdout
    assert outputs["unknown queue"].exit_code == 3 and "nope\\x1b[2J" in outputs["unknown queue"].output
    # --json stays the exact names (JSON escapes control characters its own way)
    doc = ops("queues", "--json", "--no-rates")
    assert doc.exit_code == 0 and not any(c in doc.stdout for c in RAW)
    assert "evil\\u001b[31mred" in doc.stdout and "fake\\r\\njobs  999" in doc.stdout


def test_metrics_text_escapes_labels(hostile, ops):
    result = ops("metrics")
    assert result.exit_code == 0 and not any(c in result.stdout for c in RAW)
    assert f'pgmq_queue_depth_messages{{queue="{SHOWN["esc"]}"}} {float(DEPTH["esc"])}' in result.stdout
    assert f'pgmq_queue_depth_messages{{queue="{SHOWN["hide"]}"}} {float(DEPTH["hide"])}' in result.stdout


def test_worker_text_log_escapes_names(hostile, dsn):
    """A queue without a callback: the worker logs it (no_callback, dispatch_error quoting the
    database's error) on one line each, the name escaped."""
    proc = spawn("worker", "--dsn", dsn, "--once", "--queue", HOSTILE["hide"], "--log-format", "text")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert not any(c in err for c in RAW), err
    assert f" no_callback queue={SHOWN['hide']}" in err
    lines = err.splitlines()
    assert all(line[:4].isdigit() for line in lines), err  # every line is a record: ts level event ...
