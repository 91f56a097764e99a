"""The demo (`make demo`, `pgmq-build demo --dsn`) runs against a live server and says what it did."""

from __future__ import annotations

from pgmq_build.demo import run_demo
from tests.helpers import run_cli, scalar


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


def test_migrate_demo_runs_and_shows_the_messages_kept(dsn, conn):
    """`make demo-migrate` / `pgmq-build demo --migrate`: upstream from the PyPI package, a queue
    in use, migrated in place, in a scratch database that is dropped afterwards."""


    result = run_cli("demo", "--migrate", "--dsn", dsn)
    assert result.exit_code == 0, result.output
    text = result.output
    for step in range(1, 7):
        assert f"\n{step}. " in text
    assert "Dry run: nothing was changed." in text
    assert "Done: schema pgmq is now pgmq" in text
    after = text[text.index("\n5. "):]
    assert "1 | 1 | {\"order\": 1}" in after and "2 | {\"order\": 2}" in after  # leased, archived: kept
    assert "5 | {\"order\": 5, \"rush\": true}" in after.split("pgmq.read('orders'")[1]  # priority first
    assert text.rstrip().endswith("Migration demo finished: upstream PGMQ became pgmq in place, messages kept.")
    assert scalar(conn, "SELECT count(*) FROM pg_database WHERE datname LIKE 'pgmq_migrate_demo_%'") == 0
