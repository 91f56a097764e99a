"""The demo (`make demo`, `pgmq-build demo --dsn`) runs against a live server and says what it did."""

from __future__ import annotations

from pgmq_build.demo import run_demo
from tests.helpers import scalar


def test_demo_runs_every_step_and_cleans_up(dsn, conn):
    lines: list[str] = []
    run_demo(dsn, echo=lines.append)
    text = "\n".join(lines)
    assert text.strip().endswith("Demo finished: create, send, read with a lease, archive, set_vt, pop, "
                                 "metrics, exchanges.")
    for step in range(1, 9):
        assert f"\n{step}. " in text
    assert "| 1 | 0 | 3" in text  # metrics: the delayed message left, three sent
    assert "queues_left" in text
    assert scalar(conn, "SELECT count(*) FROM pgmq.meta") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.exchanges WHERE exchange_name LIKE 'demo%'") == 0
