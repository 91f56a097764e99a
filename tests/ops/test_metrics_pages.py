"""Every queue's metrics a page at a time (pgmq.queue_metrics_page, and the exporter's, `top`'s
and the dashboard's reads through ops/db.py): a server whose lock table cannot hold the locks of
every queue's tables in one transaction is still measured whole."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.rows import dict_row

from pgmq_build.cluster import TempCluster
from pgmq_build.ops import db

QUEUES = 300


@pytest.fixture(scope="module")
def small_lock_table():
    # 10 locks per transaction x ~40 backend slots: a few hundred locks in all, fewer than one
    # statement measuring 300 queues takes (their tables and indexes)
    with TempCluster(settings={"max_locks_per_transaction": "10", "max_connections": "20"}) as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as conn:
            conn.execute("CREATE EXTENSION pgmq")
            for i in range(QUEUES):
                conn.execute("SELECT pgmq.create(%s), pgmq.send(%s, '{}')", (f"q{i:03d}", f"q{i:03d}"))
        yield cluster


def test_all_queues_at_once_runs_out_of_lock_slots(small_lock_table):
    with psycopg.connect(small_lock_table.dsn(), autocommit=True) as conn:
        with pytest.raises(psycopg.errors.OutOfMemory, match="shared memory"):
            conn.execute("SELECT count(*) FROM pgmq.queue_metrics()")


def test_the_pages_measure_every_queue_in_order(small_lock_table, monkeypatch):
    monkeypatch.setattr(db, "METRICS_PAGE", 20)
    with db.open_connection(small_lock_table.dsn()) as conn:
        got = db.queue_metrics(conn)
    assert [r["queue_name"] for r in got] == [f"q{i:03d}" for i in range(QUEUES)]
    assert {r["depth"] for r in got} == {1}
    assert list(got[0]) == list(db.QUEUE_METRICS_COLUMNS)


def test_a_page_starts_after_the_name_given_and_refuses_a_bad_size(small_lock_table):
    with psycopg.connect(small_lock_table.dsn(), autocommit=True, row_factory=dict_row) as conn:
        names = [r["queue_name"] for r in conn.execute("SELECT queue_name FROM pgmq.queue_metrics_page('q097', 3)")]
        assert names == ["q098", "q099", "q100"]
        for bad in (0, 10001, None):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match="max_queues must be between 1 and 10000"):
                conn.execute("SELECT * FROM pgmq.queue_metrics_page(NULL, %s)", (bad,))
