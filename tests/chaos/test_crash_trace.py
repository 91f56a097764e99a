"""A documented limit (docs/concepts/delivery-guarantees.md; found by the chaos suite's restart
scenario): a take whose transaction dies in a server crash before its WAL reached the disk
leaves no trace, so the next delivery is not counted as a second one. Each such crash can add at
most one uncounted delivery per message; counting them for sure would need a WAL flush per take.
If this test fails, the limit is gone: update that page and docs/reliability.md."""

from __future__ import annotations

import psycopg
import pytest

from pgmq_build.cluster import TempCluster


@pytest.mark.chaos
def test_a_take_lost_in_a_crash_before_its_wal_was_flushed_goes_uncounted():
    # the WAL writer must not flush the take's record before the crash (it would survive it)
    with TempCluster(settings={"wal_writer_delay": "10s"}) as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            admin.execute("SELECT pgmq.create('q')")
            admin.execute("SELECT pgmq.create('dlq')")
            admin.execute("SELECT pgmq.set_retry_policy('q', 3, 0, 1, NULL, 'dlq')")
            msg_id = admin.execute("SELECT pgmq.send('q', '{}')").fetchone()[0]
        taker = psycopg.connect(dsn)  # not autocommit: the take stays uncommitted
        try:
            first = taker.execute("SELECT msg_id, read_ct FROM pgmq.read('q', 30, 1)").fetchone()
            assert first == (msg_id, 1)  # delivered once
            cluster.pg_ctl("stop", mode="immediate")  # the taking transaction dies in a crash
            cluster.pg_ctl("start")
        finally:
            taker.close()
        with psycopg.connect(dsn, autocommit=True) as admin:
            again = admin.execute("SELECT msg_id, read_ct FROM pgmq.read('q', 30, 1)").fetchone()
        # delivered again as if for the first time: the lost take left no trace
        assert again == (msg_id, 1), f"delivered again as {again}"
