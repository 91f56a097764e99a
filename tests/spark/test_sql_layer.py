"""The connector's SQL side without a Spark session: stream planning (pending ids, limits), the
safe high-water mark, range acks (offsets.py), and the publish encoder's split between COPY and
pgmq.send (publishing.py)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

from datetime import datetime, timezone

import pyarrow as pa

from pgmq_build.spark import connections, offsets, publishing
from pgmq_build.spark.errors import PgmqSparkError
from pgmq_build.spark.offsets import Offset
from pgmq_build.spark.options import write_spec
from tests.helpers import wait_for


@pytest.fixture
def info(dsn, make_queue):
    make_queue("s")
    with connections.connect(dsn, autocommit=True) as c:
        return connections.resolve_queue(c, "s")


def test_plan_batch_limits_and_pending(dsn, info, sql):
    sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[10]))")  # 1..10
    sql("SELECT pgmq.set_vt('s', ARRAY[3, 4]::bigint[], 3600)")  # leased / delayed
    with connections.connect(dsn, autocommit=True) as c:
        start = Offset()
        end = offsets.plan_batch(c, info, start, 10, max_rows=4, honor_vt=True, max_pending=100)
        assert end == Offset(6, [3, 4])  # 1, 2, 5, 6 visible; 3, 4 held back
        assert offsets.stream_parts(start, end, 2) == [(0, 3, [3], []), (3, 6, [4], [])]
        sql("SELECT pgmq.set_vt('s', 3::bigint, 0)")
        nxt = offsets.plan_batch(c, info, end, 10, max_rows=2, honor_vt=True, max_pending=100)
        assert nxt == Offset(7, [4])  # the now-visible 3 first, then 7
        assert offsets.stream_parts(end, nxt, 2) == [(6, 7, [], [3])]
        # nothing new: the same offset comes back (no batch)
        sql("SELECT pgmq.set_vt('s', ARRAY[8, 9, 10]::bigint[], 3600)")
        last = offsets.plan_batch(c, info, nxt, 10, max_rows=None, honor_vt=True, max_pending=2)
        assert last == Offset(8, [4, 8])  # at most 2 pending: stop before 9
        assert offsets.plan_batch(c, info, last, 8, None, True, 2) is last
        # the ack never touches pending ids
        assert offsets.ack_range(c, info, Offset(), last, "archive") == 6
        assert sorted(r for (r,) in sql("SELECT msg_id FROM pgmq.q_s")) == [4, 8, 9, 10]
        assert offsets.ack_range(c, info, last, last, "archive") == 0


def test_safe_high_water_mark_waits_for_open_producers(dsn, info, sql, connect):
    with connections.connect(dsn, autocommit=True) as c:
        assert offsets.safe_high_water_mark(c, info, 0) == (0, True)
        open_tx = connect(autocommit=False)
        open_tx.execute("SELECT pgmq.send('s', '{}')")  # id 1, not committed
        sql("SELECT pgmq.send('s', '{}')")  # id 2, committed
        assert offsets.safe_high_water_mark(c, info, 0.2) == (2, False)
        open_tx.commit()
        assert offsets.safe_high_water_mark(c, info, 0.2) == (2, True)
        # readers hold the same lock: a finished one does not hold anything back
        sql("SELECT * FROM pgmq.read('s', 30, 1)")
        assert offsets.safe_high_water_mark(c, info, 0.2) == (2, True)
        # an open ack holds it too; the reader's own acks draw no id and are not waited for
        ack = connect(autocommit=False)
        ack.execute("DELETE FROM pgmq.q_s WHERE msg_id = 1")
        assert offsets.safe_high_water_mark(c, info, 0.2) == (2, False)
        assert offsets.safe_high_water_mark(c, info, 0.2, ignore=[ack.info.backend_pid]) == (2, True)
        ack.rollback()


def test_encode_sends_special_rows_through_pgmq_send(dsn, info, sql):
    now = datetime.now(timezone.utc)
    batch = pa.record_batch({
        "message": ['{"a": 1}', '{"a": 2}', '{"a": 3}', '{"a": 4}', '{"a": 5}'],
        "headers": [None, '{"x-pgmq-priority": 3}', '{"x-pgmq-dedup-id": "k"}',
                    '{"x-pgmq-priority": "7"}', '{"x-pgmq-ttl": 60}'],
    })
    spec = write_spec({"dsn": dsn, "queue": "s"}, batch.schema.names, streaming=False)
    enc = publishing.encode(batch, spec.columns, now, routed=False)
    assert enc.special == [2, 3, 4]
    assert enc.priority.to_pylist()[:2] == [0, 3]
    with connections.connect(dsn) as c, c.cursor() as cur:
        assert publishing.copy_rows(cur, info, enc) == 5
        c.commit()
    assert sql("SELECT message->>'a', priority FROM pgmq.q_s ORDER BY 1") == [
        ("1", 0), ("2", 3), ("3", 0), ("4", 7), ("5", 0)]
    # the ttl header marked the queue, as pgmq.send does
    assert sql("SELECT message_limits FROM pgmq.queue_settings WHERE queue_name = 's'") == [(True,)]


def test_options_are_validated():
    with pytest.raises(PgmqSparkError, match="dsn"):
        write_spec({"queue": "q"}, ["message"], streaming=False)
    with pytest.raises(PgmqSparkError, match="messageColumn"):
        write_spec({"dsn": "x", "queue": "q"}, ["body"], streaming=False)
    with pytest.raises(PgmqSparkError, match="either"):
        write_spec({"dsn": "x", "queue": "q", "exchange": "e"}, ["message"], streaming=False)
    spec = write_spec({"dsn": "x", "queue": "q", "headersColumn": ""},
                      ["message", "headers", "priority"], streaming=True)
    assert spec.columns.headers is None and spec.columns.priority == "priority"
    assert spec.exactly_once


def _terminate(sql, conn) -> None:
    """End the backend of conn and wait until it is gone (the next use meets a closed socket)."""
    pid = conn.info.backend_pid
    sql("SELECT pg_terminate_backend(%s)", pid)
    wait_for(lambda: sql("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", pid) == [(0,)],
             what="the terminated backend to exit")


def test_a_stream_reader_replaces_its_broken_driver_connection(dsn, info, sql):
    # a server restart or a terminated backend between two triggers used to fail the query at
    # the next latestOffset / commit (found by the chaos suite's restart scenario)
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pgmq_build.spark.options import stream_spec
    from pgmq_build.spark.stream import PgmqStreamReader

    reader = PgmqStreamReader(stream_spec({"dsn": dsn, "queue": "s"}))
    try:
        start = reader.initialOffset()
        sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[3]))")
        first = reader.latestOffset(start, ReadAllAvailable())
        assert first["msg_id"] == 3
        _terminate(sql, reader._conn)
        sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[2]))")
        # acks the first batch (in the background) and plans the next on a new connection
        assert reader.latestOffset(first, ReadAllAvailable())["msg_id"] == 5
        wait_for(lambda: sql("SELECT count(*) FROM pgmq.a_s") == [(3,)], what="the first ack")
        _terminate(sql, reader._conn)
        reader.commit({"msg_id": 5, "pending": []})
        wait_for(lambda: sql("SELECT count(*) FROM pgmq.q_s") == [(0,)], what="the second ack")
    finally:
        reader.stop()


def _stream_reader(dsn: str, **options: str):
    from pgmq_build.spark.options import stream_spec
    from pgmq_build.spark.stream import PgmqStreamReader

    return PgmqStreamReader(stream_spec({"dsn": dsn, "queue": "s", **options}))


def test_a_stream_reader_acks_in_the_background_and_settles_when_caught_up(dsn, info, sql):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    reader = _stream_reader(dsn)
    try:
        start = reader.initialOffset()
        sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[4]))")
        first = reader.latestOffset(start, ReadAllAvailable())
        sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[2]))")
        second = reader.latestOffset(first, ReadAllAvailable())  # acks 1..4 meanwhile
        assert second["msg_id"] == 6
        # nothing new: the answer waits for every ack, so a query stopping here (the last
        # trigger of an availableNow run) leaves nothing delivered in the queue
        assert reader.latestOffset(second, ReadAllAvailable()) == second
        assert sql("SELECT count(*) FROM pgmq.q_s") == [(0,)]
        assert sql("SELECT count(*) FROM pgmq.a_s") == [(6,)]
        # the reader Spark pickles to its executors carries no acker, thread or connection
        import pickle

        copy = pickle.loads(pickle.dumps(reader))
        assert copy._acker is None and copy._conn is None
    finally:
        reader.stop()


def test_a_failed_background_ack_is_raised_and_made_again(dsn, info, sql):
    import psycopg
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    reader = _stream_reader(dsn)
    try:
        start = reader.initialOffset()
        sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[3]))")
        first = reader.latestOffset(start, ReadAllAvailable())
        sql("ALTER TABLE pgmq.a_s ADD CONSTRAINT no_rows CHECK (false) NOT VALID")
        # the ack of 1..3 fails in the background; the caught-up answer waits for it and
        # raises its error (the query fails as it did when the ack ran in the foreground)
        with pytest.raises(psycopg.errors.CheckViolation):
            reader.latestOffset(first, ReadAllAvailable())
        assert sql("SELECT count(*) FROM pgmq.q_s") == [(3,)]
        sql("ALTER TABLE pgmq.a_s DROP CONSTRAINT no_rows")
        # the failed range is acked again by the next call
        assert reader.latestOffset(first, ReadAllAvailable()) == first
        assert sql("SELECT count(*) FROM pgmq.a_s") == [(3,)]
    finally:
        reader.stop()


def test_a_subscription_reader_replaces_its_broken_driver_connection(dsn, sql):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pgmq_build.spark.options import stream_spec
    from pgmq_build.spark.stream import SubscriptionStreamReader

    sql("SELECT pgmq.create_stream('ev')")
    reader = SubscriptionStreamReader(stream_spec({"dsn": dsn, "stream": "ev",
                                                   "subscription": "sub"}))
    try:
        start = reader.initialOffset()
        sql("SELECT pgmq.stream_send('ev', '{}')")
        _terminate(sql, reader._conn)
        end = reader.latestOffset(start, ReadAllAvailable())
        assert end["position"] > start["position"]
        _terminate(sql, reader._conn)
        reader.commit(end)
        assert sql("SELECT position FROM pgmq.stream_info('ev')") == [(end["position"],)]
    finally:
        reader.stop()


def test_spark_still_sees_latest_offsets_parameters():
    # Spark calls latestOffset(start, limit) only when its signature has them (else the 4.0 way)
    import inspect

    from pgmq_build.spark.stream import PgmqStreamReader, SubscriptionStreamReader

    for reader in (PgmqStreamReader, SubscriptionStreamReader):
        assert list(inspect.signature(reader.latestOffset).parameters) == ["self", "start", "limit"]


def test_the_stream_reader_imports_no_pandas():
    # Spark starts a new Python process for every streaming query's reader; pandas (imported by
    # pyarrow's first scalar) added ~0.2 s to each query's start (spark-consumption.md)
    import subprocess
    import sys

    code = ("import sys, pyspark.sql.streaming.python_streaming_source_runner, "
            "pgmq_build.spark.stream; print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_starting_at_latest_never_acks_what_came_before(dsn, info, sql):
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[3]))")  # before the query
    reader = _stream_reader(dsn, startingOffsets="latest")
    try:
        start = reader.initialOffset()
        assert start["msg_id"] == 3
        sql("SELECT pgmq.send_batch('s', array_fill('{}'::jsonb, ARRAY[2]))")
        # Spark asks for it again when it plans the first batch: the same answer
        assert reader.initialOffset() == start
        end = reader.latestOffset(start, ReadAllAvailable())
        reader.commit(end)
        assert reader.latestOffset(end, ReadAllAvailable()) == end  # caught up: acks settled
        # only what the query delivered (4, 5) is archived; 1..3 were never its messages
        assert sql("SELECT msg_id FROM pgmq.a_s ORDER BY 1") == [(4,), (5,)]
        assert sql("SELECT msg_id FROM pgmq.q_s ORDER BY 1") == [(1,), (2,), (3,)]
    finally:
        reader.stop()
