"""Spark snapshot reads from a hot standby (issue 33: read offload): the queue and its archive
as DataFrames, the same rows as on the primary, nothing written (a standby refuses writes)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

import psycopg

pytestmark = pytest.mark.spark


def test_snapshot_reads_from_the_standby(spark, standby_pair):
    standby_pair.seeded("SELECT pgmq.create('orders');"
                        "SELECT pgmq.send_batch('orders', array_agg(jsonb_build_object('n', n))) "
                        "FROM generate_series(1, 50) n;"
                        "SELECT pgmq.archive('orders', ARRAY[1, 2, 3]::bigint[])")
    dsn = standby_pair.standby.dsn()
    queue = spark.read.format("pgmq").option("dsn", dsn).option("queue", "orders").load()
    assert sorted(r.msg_id for r in queue.select("msg_id").collect()) == list(range(4, 51))
    archive = (spark.read.format("pgmq").option("dsn", dsn).option("queue", "orders")
               .option("table", "archive").load())
    assert sorted(r.msg_id for r in archive.select("msg_id").collect()) == [1, 2, 3]
    with psycopg.connect(dsn, autocommit=True) as standby:
        assert standby.execute("SELECT pg_is_in_recovery()").fetchone()[0]
