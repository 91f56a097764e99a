"""`pgmq-build top` the way a person sees it: in a real terminal (tmux), its rows and numbers,
their updates after sends, and `q` ending it cleanly."""

from __future__ import annotations

import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.helpers import send_n, wait_for
from tests.ops.support import REPO


class Tmux:
    """A private tmux server (its own socket file) running one command in a window of `width`
    columns and 40 lines."""

    def __init__(self, command: str, socket: Path, width: int = 160) -> None:
        self.socket = str(socket)
        self._tmux("new-session", "-d", "-x", str(width), "-y", "40", "-s", "top", command)

    def _tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-S", self.socket, *args], check=True,
                              capture_output=True, text=True).stdout

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", "top")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", "top", *keys)

    def close(self) -> None:
        subprocess.run(["tmux", "-S", self.socket, "kill-server"], capture_output=True)


def row(screen: str, queue: str) -> list[str] | None:
    """The whitespace-separated cells of a queue's line (empty cells vanish)."""
    for line in screen.splitlines():
        cells = line.split()
        if cells and cells[0] == queue:
            return cells
    return None


@pytest.fixture
def top(dsn, tmp_path):
    command = (f"cd {shlex.quote(str(REPO))} && PYTHONPATH=. {shlex.quote(sys.executable)} "
               f"-m pgmq_build top --dsn {shlex.quote(dsn)} --interval 0.5; "
               "echo EXITED $?; sleep 60")
    session = Tmux(command, tmp_path / "tmux.sock")
    yield session
    session.close()


def test_top_shows_queues_updates_and_quits_on_q(conn, queue, connect, top):
    send_n(conn, queue, 3)
    conn.execute("SELECT pgmq.create('slow')")
    conn.execute("SELECT pgmq.pause('slow')")

    wait_for(lambda: (row(top.screen(), "jobs") or [None, None])[1] == "3", timeout=20,
             what="the jobs row with depth 3")
    screen = top.screen()
    assert "pgmq top" in screen and "q quits" in screen
    assert "send/s" in screen and "consume/s" in screen
    assert row(screen, "slow")[1:3] == ["PAUSED", "0"]  # state, depth

    send_n(conn, queue, 250)
    wait_for(lambda: (row(top.screen(), "jobs") or [None, None])[1] == "253", timeout=10,
             what="the depth to follow the sends")

    # a producer and a consumer at work: both rates show up
    producer, consumer, stop = connect(), connect(), threading.Event()

    def work():
        while not stop.is_set():
            producer.execute("SELECT pgmq.send('jobs', '{}')")
            consumer.execute("SELECT * FROM pgmq.pop('jobs')")
            time.sleep(0.01)

    t = threading.Thread(target=work)
    t.start()
    try:
        def both_rates() -> bool:
            cells = row(top.screen(), "jobs") or []
            # queue, depth, visible, in flight, delayed, oldest age, send/s, consume/s, DLQ
            return len(cells) == 9 and cells[6] not in ("–", "0.0") and cells[7] not in ("–", "0.0")

        wait_for(both_rates, timeout=10, what="send and consume rates")
    finally:
        stop.set()
        t.join()

    top.keys("q")
    wait_for(lambda: "EXITED 0" in top.screen(), timeout=10, what="top to exit on q")
