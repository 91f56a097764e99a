"""Streaming on local[2]: the pgmq source (acks incl. the last availableNow batch, delayed
messages held back, replay after a sink failure, a late-committing producer) and the
exactly-once pgmq sink across a restart."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

import json
import threading
import time
from pathlib import Path

import psycopg

from tests.helpers import run_threads

pytestmark = pytest.mark.spark


@pytest.fixture
def sink_table(conn: psycopg.Connection) -> str:
    conn.execute("CREATE TABLE sink_rows (batch_id bigint, msg_id bigint, message jsonb)")
    return "sink_rows"


def pg_sink(dsn: str, fail_file: Path | None = None):
    """A foreachBatch sink writing (batch_id, msg_id, message) rows; if fail_file exists when
    batch 1 arrives, it writes half of that batch, removes the file and raises."""

    def write(batch_df, batch_id: int) -> None:
        rows = [(batch_id, r.msg_id, r.message) for r in batch_df.select("msg_id", "message").collect()]
        failing = fail_file is not None and batch_id == 1 and fail_file.exists()
        if failing:
            rows = rows[: len(rows) // 2]
        with psycopg.connect(dsn, autocommit=True) as c, c.cursor() as cur:
            cur.executemany("INSERT INTO sink_rows VALUES (%s, %s, %s::jsonb)", rows)
        if failing:
            fail_file.unlink()
            raise RuntimeError("sink failed half-way through batch 1")

    return write


def stream(spark, dsn: str, queue: str, **options: object):
    reader = spark.readStream.format("pgmq").option("dsn", dsn).option("queue", queue)
    for k, v in options.items():
        reader = reader.option(k, str(v))
    return reader.load()


def last_offset(checkpoint: Path) -> dict:
    files = sorted((checkpoint / "offsets").glob("[0-9]*"), key=lambda p: int(p.name))
    return json.loads(files[-1].read_text().splitlines()[-1])


def run_available_now(df, checkpoint: Path, sink) -> None:
    q = (df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination(180)
    if q.exception() is not None:
        raise q.exception()


def test_available_now_acks_every_batch_and_holds_back_delayed(spark, dsn, make_queue, sql,
                                                              sink_table, tmp_path):
    make_queue("src")
    sql("SELECT pgmq.send_batch('src', ARRAY(SELECT jsonb_build_object('i', g) "
        "FROM generate_series(1, 2500) g))")
    (delayed,), = sql("SELECT * FROM pgmq.send('src', '{\"later\": true}', 3600)")
    sql("SELECT pgmq.send_batch('src', array_fill('{\"tail\": 1}'::jsonb, ARRAY[5]))")
    ck = tmp_path / "ck"

    run_available_now(stream(spark, dsn, "src", maxRowsPerBatch=1000), ck, pg_sink(dsn))

    assert sql("SELECT count(*), count(DISTINCT msg_id), count(DISTINCT batch_id) FROM sink_rows") \
        == [(2505, 2505, 3)]
    assert sql("SELECT count(*) FROM sink_rows WHERE msg_id = %s", delayed) == [(0,)]
    # every delivered message is archived, the last batch too; the delayed one waits
    assert sql("SELECT msg_id FROM pgmq.q_src") == [(delayed,)]
    assert sql("SELECT count(*) FROM pgmq.a_src") == [(2505,)]
    assert last_offset(ck) == {"msg_id": 2506, "pending": [delayed]}

    # once it is visible, the next run delivers and acks it
    sql("SELECT * FROM pgmq.set_vt('src', %s::bigint, 0)", delayed)
    run_available_now(stream(spark, dsn, "src", maxRowsPerBatch=1000), ck, pg_sink(dsn))
    assert sql("SELECT count(*) FROM sink_rows WHERE msg_id = %s", delayed) == [(1,)]
    assert sql("SELECT count(*) FROM pgmq.q_src") == [(0,)]
    assert sql("SELECT count(*) FROM pgmq.a_src") == [(2506,)]


def test_replay_after_sink_failure_loses_nothing(spark, dsn, make_queue, sql, sink_table, tmp_path):
    make_queue("src")
    sql("SELECT pgmq.send_batch('src', ARRAY(SELECT jsonb_build_object('i', g) "
        "FROM generate_series(1, 3000) g))")
    ck, fail = tmp_path / "ck", tmp_path / "fail-once"
    fail.touch()
    df = stream(spark, dsn, "src", maxRowsPerBatch=1000, onCommit="delete")

    with pytest.raises(Exception, match="half-way"):
        run_available_now(df, ck, pg_sink(dsn, fail))
    # batch 0 was committed (and deleted); batch 1 failed after writing half of its rows
    assert sql("SELECT count(*) FROM pgmq.q_src") == [(2000,)]
    assert sql("SELECT count(*) FROM sink_rows") == [(1500,)]

    run_available_now(df, ck, pg_sink(dsn, fail))  # restart: batch 1 is re-run, then batch 2
    assert sql("SELECT count(*), count(DISTINCT msg_id) FROM sink_rows") == [(3500, 3000)]
    assert sql("SELECT count(*) FROM pgmq.q_src") == [(0,)]
    assert sql("SELECT count(*) FROM pgmq.a_src") == [(0,)]


def test_late_committing_producer_is_not_skipped(spark, dsn, make_queue, sql, sink_table,
                                                 connect, tmp_path):
    make_queue("src")
    q = (stream(spark, dsn, "src", inflightWaitSeconds=0.2).writeStream
         .foreachBatch(pg_sink(dsn)).option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="200 milliseconds").start())
    try:
        deadline = time.monotonic() + 60
        while q.lastProgress is None and time.monotonic() < deadline:  # the stream is running
            time.sleep(0.1)
        late = connect(autocommit=False)
        (late_id,), = late.execute("SELECT * FROM pgmq.send('src', '{\"late\": true}')").fetchall()
        sql("SELECT pgmq.send_batch('src', ARRAY(SELECT jsonb_build_object('i', g) "
            "FROM generate_series(1, 100) g))")  # higher ids, committed first
        time.sleep(3)  # many triggers while the first producer is still open
        # a max(msg_id) high-water mark would have delivered and acked 2..101 by now and then
        # skipped msg 1 for good; the safe one waits for the open transaction
        assert sql("SELECT count(*) FROM sink_rows") == [(0,)]
        late.commit()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sql("SELECT count(*) FROM sink_rows") == [(101,)]:
                break
            assert q.exception() is None, q.exception()
            time.sleep(0.2)
    finally:
        q.stop()
    assert sql("SELECT count(*), count(DISTINCT msg_id) FROM sink_rows") == [(101, 101)]
    assert sql("SELECT count(*) FROM sink_rows WHERE msg_id = %s", late_id) == [(1,)]
    # nothing was removed undelivered: what is not in the queue any more was delivered
    delivered = {r for (r,) in sql("SELECT msg_id FROM sink_rows")}
    left = {r for (r,) in sql("SELECT msg_id FROM pgmq.q_src")}
    archived = {r for (r,) in sql("SELECT msg_id FROM pgmq.a_src")}
    assert archived <= delivered and left | archived == delivered


def test_exactly_once_sink_across_restart(spark, dsn, make_queue, sql, tmp_path):
    make_queue("src")
    make_queue("dst")
    sql("SELECT pgmq.send_batch('src', ARRAY(SELECT jsonb_build_object('i', g) "
        "FROM generate_series(1, 2500) g))")
    ck = tmp_path / "ck"

    def run() -> None:
        # onCommit=none: the source keeps its rows, so a re-run batch really re-sends them
        df = stream(spark, dsn, "src", maxRowsPerBatch=1000, onCommit="none")
        q = (df.select("message", "headers").writeStream.format("pgmq")
             .option("dsn", dsn).option("queue", "dst").option("checkpointLocation", str(ck))
             .trigger(availableNow=True).start())
        q.awaitTermination(180)
        assert q.exception() is None, q.exception()

    run()
    assert sql("SELECT count(*), count(DISTINCT message) FROM pgmq.q_dst") == [(2500, 2500)]
    batches = sql("SELECT batch_id, rows FROM pgmq_spark.sink_batches ORDER BY batch_id")
    assert batches == [(0, 1000), (1, 1000), (2, 500)]

    # Spark crashed after the sink committed batch 2 but before its commit log entry: on restart
    # it re-runs batch 2 with the same id and the same rows; the sink publishes nothing again.
    for f in (ck / "commits" / "2", ck / "commits" / ".2.crc"):
        f.unlink(missing_ok=True)
    run()
    assert sql("SELECT count(*), count(DISTINCT message) FROM pgmq.q_dst") == [(2500, 2500)]
    assert (ck / "commits" / "2").exists()

    sql("SELECT pgmq.send_batch('src', ARRAY(SELECT jsonb_build_object('i', g) "
        "FROM generate_series(2501, 2800) g))")
    run()
    assert sql("SELECT count(*), count(DISTINCT message) FROM pgmq.q_dst") == [(2800, 2800)]
    assert sql("SELECT max(batch_id) FROM pgmq_spark.sink_batches") == [(3,)]
    assert sql("SELECT count(*) FROM pgmq_spark.staging") == [(0,)]


def test_writes_from_another_thread_after_register(spark, dsn, make_queue, sql, tmp_path):
    # Spark looks a Python data source up for a write in the thread's active session only, so
    # a thread other than the session's (a supervisor restarting a query: the chaos suite's)
    # got DATA_SOURCE_NOT_FOUND; register(), which publish() calls, makes the session active there
    from pgmq_build import spark as pgmq_spark

    make_queue("src")
    make_queue("dst")
    failures: list[BaseException] = []

    def in_a_thread() -> None:
        try:
            pgmq_spark.publish(spark.range(20).withColumnRenamed("id", "n"), dsn=dsn, queue="src")
            pgmq_spark.register(spark)
            q = (stream(spark, dsn, "src").select("message").writeStream.format("pgmq")
                 .option("dsn", dsn).option("queue", "dst")
                 .option("checkpointLocation", str(tmp_path / "ck"))
                 .trigger(availableNow=True).start())
            q.awaitTermination(180)
            if q.exception() is not None:
                raise q.exception()
        except BaseException as exc:  # noqa: BLE001 (reported by the assert below)
            failures.append(exc)

    run_threads([threading.Thread(target=in_a_thread)])
    assert [str(getattr(e, "java_exception", e))[:200] for e in failures] == []
    assert sql("SELECT count(*), count(DISTINCT message) FROM pgmq.q_dst") == [(20, 20)]


@pytest.mark.parametrize("options, words", [
    ({"queue": "nope"}, "queue 'nope' does not exist"),
    ({"stream": "nope", "subscription": "s"}, "stream 'nope' does not exist"),
])
def test_a_stream_reader_that_cannot_start_says_why(spark, dsn, tmp_path, options, words):
    """A reader that fails as it is made (no such queue or stream, no connection) fails the
    query with its own error: PySpark's source runner would hide it behind
    UnboundLocalError ('reader', its `finally: reader.stop()`)."""
    reader = spark.readStream.format("pgmq").option("dsn", dsn)
    for k, v in options.items():
        reader = reader.option(k, v)
    query = (reader.load().writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "ck")).start())
    with pytest.raises(Exception, match=words) as failed:
        query.awaitTermination(120)
    assert "UnboundLocalError" not in str(failed.value)
