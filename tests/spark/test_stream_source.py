"""pgmq streams in Spark on local[2]: a batch read of a position range (the same events
pgmq.stream_read hands out), a subscription as a streaming source (positions as offsets, the
subscription following Spark's commits, the last availableNow batch included, replay after a
sink failure, late commits), and writing a DataFrame into a stream (COPY, stream_send_batch,
exactly-once, the exactly-once sink across a restart)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

import json
import time
from pathlib import Path

import psycopg
from pyspark.sql import functions as F

from tests.spark.test_stream import last_offset, pg_sink, run_available_now

pytestmark = pytest.mark.spark


@pytest.fixture
def ev(sql) -> str:
    sql("SELECT pgmq.create_stream('ev')")
    return "ev"


@pytest.fixture
def sink_table(sql) -> str:
    sql("CREATE TABLE sink_rows (batch_id bigint, msg_id bigint, message jsonb)")
    return "sink_rows"


def send(sql, first: int, n: int, stream: str = "ev") -> None:
    sql("SELECT pgmq.stream_send_batch(%s, ARRAY(SELECT jsonb_build_object('i', g) "
        "FROM generate_series(%s::int, %s::int) g))", stream, first, first + n - 1)


def tick(sql, stream: str = "ev") -> int:
    sql("SELECT pgmq.stream_tick(%s)", stream)
    return sql("SELECT max(tick_id) FROM pgmq.stream_ticks WHERE stream_name = %s", stream)[0][0]


def events(spark, dsn: str, stream: str = "ev", **options):
    reader = spark.read.format("pgmq").option("dsn", dsn).option("stream", stream)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def subscription_stream(spark, dsn: str, subscription: str, stream: str = "ev", **options):
    reader = (spark.readStream.format("pgmq").option("dsn", dsn).option("stream", stream)
              .option("subscription", subscription))
    for k, v in options.items():
        reader = reader.option(k, str(v))
    # the foreachBatch sink of test_stream.py stores msg_id: here the event's id
    return reader.load().withColumnRenamed("ev_id", "msg_id")


def info(sql, subscription: str) -> tuple:
    return sql("SELECT position, lag_events, batches_out FROM pgmq.stream_info('ev') "
               "WHERE subscription_name = %s", subscription)[0]


def test_a_position_range_reads_what_stream_read_hands_out(spark, dsn, ev, sql, connect):
    sql("SELECT pgmq.subscribe('ev', 'cmp', 'earliest')")
    start = tick(sql)
    send(sql, 1, 100)
    late = connect(autocommit=False)
    late.execute("SELECT pgmq.stream_send('ev', '{\"late\": true}')")  # drawn now, commits later
    send(sql, 101, 100)
    middle = tick(sql)
    late.commit()
    send(sql, 201, 50)
    end = tick(sql)

    first = events(spark, dsn, fromPosition=start, toPosition=middle, numPartitions=3)
    assert first.columns == ["ev_id", "ev_time", "message", "headers"]
    got = sorted(json.loads(r.message)["i"] for r in first.collect())
    assert got == list(range(1, 201))  # the late event was not committed at `middle`
    second = [json.loads(r.message) for r in events(spark, dsn, fromPosition=middle, toPosition=end,
                                                    numPartitions=4).orderBy("ev_id").collect()]
    assert second[0] == {"late": True} and [m["i"] for m in second[1:]] == list(range(201, 251))

    # the same cut as the subscription's batches (made at the same positions)
    batches: list[list[int]] = []
    with psycopg.connect(dsn, autocommit=True) as c:
        while rows := c.execute("SELECT batch_id, ev_id FROM pgmq.stream_read('ev', 'cmp')").fetchall():
            c.execute("SELECT pgmq.stream_ack('ev', 'cmp', %s)", (rows[0][0],))
            batches.append([r[1] for r in rows])
    ranges = [sorted(r.ev_id for r in events(spark, dsn, fromPosition=a, toPosition=b).collect())
              for a, b in ((0, start), (start, middle), (middle, end))]
    assert [b for b in ranges if b] == batches
    # defaults: from the earliest kept position to one made now; nothing was consumed
    assert events(spark, dsn).count() == 251
    assert events(spark, dsn, fromPosition=end).count() == 0
    assert sql("SELECT count(*) FROM pgmq.stream_info('ev') WHERE lag_events > 0") == [(0,)]


def test_available_now_follows_positions_and_moves_the_subscription(spark, dsn, ev, sql, sink_table,
                                                                     tmp_path):
    sql("SELECT pgmq.subscribe('ev', 'spark', 'earliest')")
    for k in range(5):  # five positions of 500 events each
        send(sql, k * 500 + 1, 500)
        tick(sql)
    ck = tmp_path / "ck"
    df = subscription_stream(spark, dsn, "spark", maxRowsPerBatch=1000)
    run_available_now(df, ck, pg_sink(dsn))

    # batches of whole positions: 2 + 2 + 1 (maxRowsPerBatch 1000)
    per_batch = sql("SELECT batch_id, count(*) FROM sink_rows GROUP BY 1 ORDER BY 1")
    assert [n for _, n in per_batch] == [1000, 1000, 500]
    assert sql("SELECT count(DISTINCT msg_id) FROM sink_rows") == [(2500,)]
    # the subscription is at the last batch's end: the last availableNow batch included
    position, lag, out = info(sql, "spark")
    assert (lag, out) == (0, 0) and position == last_offset(ck)["position"]

    send(sql, 2501, 10)  # the next run takes what came since
    run_available_now(subscription_stream(spark, dsn, "spark", maxRowsPerBatch=1000), ck, pg_sink(dsn))
    assert sql("SELECT count(*), count(DISTINCT msg_id) FROM sink_rows") == [(2510, 2510)]
    assert info(sql, "spark")[1] == 0


def test_a_new_query_starts_where_the_subscription_is(spark, dsn, ev, sql, sink_table, tmp_path):
    send(sql, 1, 5)
    # startingOffsets makes the subscription: 'latest' skips what is there
    run_available_now(subscription_stream(spark, dsn, "s", startingOffsets="latest"),
                      tmp_path / "a", pg_sink(dsn))
    assert sql("SELECT count(*) FROM sink_rows") == [(0,)]
    send(sql, 6, 3)
    # an existing subscription keeps its position whatever startingOffsets says
    run_available_now(subscription_stream(spark, dsn, "s", startingOffsets="earliest"),
                      tmp_path / "b", pg_sink(dsn))
    got = sorted(json.loads(m)["i"] for (m,) in sql("SELECT message::text FROM sink_rows"))
    assert got == [6, 7, 8]


def test_replay_after_a_sink_failure_reads_the_same_batch(spark, dsn, ev, sql, sink_table, tmp_path):
    sql("SELECT pgmq.subscribe('ev', 'spark', 'earliest')")
    for k in range(3):
        send(sql, k * 1000 + 1, 1000)
        tick(sql)
    ck, fail = tmp_path / "ck", tmp_path / "fail-once"
    fail.touch()
    df = subscription_stream(spark, dsn, "spark", maxRowsPerBatch=1000)
    with pytest.raises(Exception, match="half-way"):
        run_available_now(df, ck, pg_sink(dsn, fail))
    # batch 0 was committed: the subscription moved past it, not past batch 1
    assert info(sql, "spark")[1] == 2000
    assert sql("SELECT count(*) FROM sink_rows") == [(1500,)]

    run_available_now(df, ck, pg_sink(dsn, fail))  # restart: batch 1 again, then batch 2
    assert sql("SELECT count(*), count(DISTINCT msg_id) FROM sink_rows") == [(3500, 3000)]
    # the half written before the failure came again in the same batch: the replay is identical
    assert sql("SELECT count(*) FROM (SELECT msg_id FROM sink_rows WHERE batch_id = 1 "
               "GROUP BY msg_id HAVING count(*) = 2) d") == [(500,)]
    assert info(sql, "spark")[1] == 0


def test_a_late_commit_is_not_skipped(spark, dsn, ev, sql, sink_table, connect, tmp_path):
    sql("SELECT pgmq.subscribe('ev', 'spark', 'earliest')")
    q = (subscription_stream(spark, dsn, "spark").writeStream.foreachBatch(pg_sink(dsn))
         .option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while q.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.1)
        late = connect(autocommit=False)
        (late_id,), = late.execute("SELECT pgmq.stream_send('ev', '{\"late\": true}')").fetchall()
        send(sql, 1, 100)  # higher ids, committed first: delivered while the first is open

        def delivered() -> int:
            assert q.exception() is None, q.exception()
            return sql("SELECT count(*) FROM sink_rows")[0][0]

        deadline = time.monotonic() + 60
        while delivered() < 100 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert delivered() == 100
        late.commit()
        # the next position is made once another event comes (today's SQL: see
        # tests/integration/test_stream_issues.py); the late one comes with it, never skipped
        send(sql, 101, 1)
        deadline = time.monotonic() + 60
        while delivered() < 102 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        q.stop()
    assert sql("SELECT count(*), count(DISTINCT msg_id) FROM sink_rows") == [(102, 102)]
    assert sql("SELECT count(*) FROM sink_rows WHERE msg_id = %s", late_id) == [(1,)]


def test_write_a_dataframe_to_a_stream(spark, dsn, ev, sql):
    sql("SELECT pgmq.subscribe('ev', 'a', 'earliest')")
    df = spark.range(3000).select(F.to_json(F.struct(F.col("id").alias("i"))).alias("message"),
                                  F.when(F.col("id") % 2 == 0, F.lit('{"src": "spark"}')).alias("headers"),
                                  F.lit(5).alias("priority")).repartition(3)

    def write(**options: str):  # a fresh writer each time (a DataFrameWriter keeps its options)
        return df.write.format("pgmq").option("dsn", dsn).option("stream", "ev").options(**options).mode("append")

    write().save()  # COPY into the current segment
    write(writeMode="send").save()  # pgmq.stream_send_batch
    write(exactlyOnce="true", idempotencyKey="load-1").save()
    write(exactlyOnce="true", idempotencyKey="load-1").save()  # a no-op
    assert sql("SELECT count(*), count(DISTINCT ev_id) FROM pgmq.s_ev") == [(9000, 9000)]
    assert sql("SELECT count(DISTINCT message->>'i') FROM pgmq.s_ev") == [(3000,)]
    assert sql("SELECT count(*) FROM pgmq.s_ev WHERE headers = '{\"src\": \"spark\"}'") == [(4500,)]
    assert sql("SELECT count(*) FROM pgmq.s_ev WHERE headers ? 'x-pgmq-priority'") == [(0,)]  # not a queue
    assert sql("SELECT lag_events FROM pgmq.stream_info('ev')") == [(9000,)]
    # the subscription gets them all, once
    with psycopg.connect(dsn, autocommit=True) as c:
        n = 0
        while rows := c.execute("SELECT batch_id FROM pgmq.stream_read('ev', 'a')").fetchall():
            c.execute("SELECT pgmq.stream_ack('ev', 'a', %s)", (rows[0][0],))
            n += len(rows)
    assert n == 9000

    for options, words in [({"delayColumn": "priority"}, "'delayColumn' applies to queues"),
                           ({"queue": "q"}, "'queue' or option 'stream', not both")]:
        with pytest.raises(Exception, match=words):
            write(**options).save()
    with pytest.raises(Exception, match="stream 'nope' does not exist"):
        df.write.format("pgmq").option("dsn", dsn).option("stream", "nope").mode("append").save()
    assert sql("SELECT count(*) FROM pgmq.s_ev") == [(9000,)]


def test_exactly_once_from_a_subscription_into_a_stream_across_a_restart(spark, dsn, ev, sql,
                                                                        tmp_path: Path):
    sql("SELECT pgmq.create_stream('out'), pgmq.subscribe('ev', 'copy', 'earliest')")
    for k in range(3):
        send(sql, k * 1000 + 1, 1000 if k < 2 else 500)
        tick(sql)
    ck = tmp_path / "ck"

    def run() -> None:
        q = (subscription_stream(spark, dsn, "copy", maxRowsPerBatch=1000).select("message", "headers")
             .writeStream.format("pgmq").option("dsn", dsn).option("stream", "out")
             .option("checkpointLocation", str(ck)).trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None, q.exception()

    run()
    assert sql("SELECT count(*), count(DISTINCT message) FROM pgmq.s_out") == [(2500, 2500)]
    # Spark crashed after the sink committed batch 2 but before its commit log entry: on
    # restart it re-runs batch 2 (the same events, read again) and the sink publishes nothing
    for f in (ck / "commits" / "2", ck / "commits" / ".2.crc"):
        f.unlink(missing_ok=True)
    run()
    assert sql("SELECT count(*), count(DISTINCT message) FROM pgmq.s_out") == [(2500, 2500)]
    assert sql("SELECT count(*) FROM pgmq_spark.sink_batches WHERE target = 'stream:out'") == [(3,)]
