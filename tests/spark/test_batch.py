"""Batch directions on local[2]: publish (COPY path, special headers, exactly-once, topics),
snapshot reads of queue and archive, and the competing-consumer claim with ack and nack."""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed: pip install -e '.[spark]'")

import json
from datetime import datetime, timezone

from pyspark.sql import Row
from pyspark.sql import functions as F
from pyspark.sql import types as T

from pgmq_build import spark as pgmq_spark

pytestmark = pytest.mark.spark


def test_auto_registration_and_register(spark):
    # pyspark_pgmq (top-level, on the workers' path) is found by Spark's data source lookup
    # without any register() call; register() is harmless on top.
    assert spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists("pgmq")
    pgmq_spark.register(spark)
    assert spark._jsparkSession.sessionState().dataSourceManager().dataSourceExists("pgmq")


def test_publish_then_snapshot_round_trip(spark, dsn, make_queue, sql):
    make_queue("orders")
    schema = T.StructType([
        T.StructField("message", T.StructType([T.StructField("n", T.LongType()),
                                               T.StructField("tag", T.StringType())])),
        T.StructField("headers", T.MapType(T.StringType(), T.StringType())),
        T.StructField("priority", T.IntegerType()),
        T.StructField("delay", T.IntegerType()),
    ])
    rows = [Row(message=Row(n=i, tag=f"t{i}"), headers={"src": "spark"} if i % 2 else None,
                priority=(i % 3) - 1, delay=None) for i in range(300)]
    rows.append(Row(message=Row(n=1000, tag="later"), headers=None, priority=None, delay=3600))
    # dedup goes through pgmq.send: the second copy resolves to the first message
    rows += [Row(message=Row(n=2000 + i, tag="dup"), headers={"x-pgmq-dedup-id": "once"},
                 priority=None, delay=None) for i in range(2)]
    df = spark.createDataFrame(rows, schema).repartition(2)

    (df.write.format("pgmq").option("dsn", dsn).option("queue", "orders").mode("append").save())

    assert sql("SELECT count(*) FROM pgmq.q_orders") == [(302,)]
    by_n = {m["n"]: (h, p) for m, h, p in sql("SELECT message, headers, priority FROM pgmq.q_orders")}
    assert by_n[0] == ({"x-pgmq-priority": -1}, -1)
    assert by_n[1] == ({"src": "spark"}, 0)  # priority 0 stays out of the headers
    assert by_n[2] == ({"x-pgmq-priority": 1}, 1)
    assert by_n[5] == ({"src": "spark", "x-pgmq-priority": 1}, 1)
    assert len([n for n in by_n if n >= 2000]) == 1
    later = sql("SELECT vt - enqueued_at > interval '59 minutes' FROM pgmq.q_orders "
                "WHERE message->>'tag' = 'later'")
    assert later == [(True,)]
    assert sql("SELECT count(*) FROM pgmq.q_orders WHERE vt > clock_timestamp()") == [(1,)]
    # a pgmq reader sees the priorities the connector set: -1 first
    first = sql("SELECT (message->>'n')::int FROM pgmq.read('orders', 30, 3)")
    assert all(n % 3 == 0 for (n,) in first)

    snap = (spark.read.format("pgmq").option("dsn", dsn).option("queue", "orders")
            .option("numPartitions", 3).load())
    assert snap.columns == ["msg_id", "read_ct", "enqueued_at", "last_read_at", "vt", "message",
                            "headers", "priority"]
    got = snap.collect()
    assert len(got) == 302 and len({r.msg_id for r in got}) == 302
    assert sorted(json.loads(r.message)["n"] for r in got if json.loads(r.message)["n"] < 300) \
        == list(range(300))
    assert sum(r.read_ct for r in got) == 3  # reading the snapshot changed nothing
    assert {r.priority for r in got} == {-1, 0, 1}
    parsed = snap.select(F.from_json("message", "n long, tag string").alias("m")) \
        .where("m.tag = 't7'").collect()
    assert parsed[0].m.n == 7

    sql("SELECT pgmq.archive('orders', ARRAY(SELECT msg_id FROM pgmq.q_orders ORDER BY msg_id LIMIT 10))")
    arch = (spark.read.format("pgmq").option("dsn", dsn).option("queue", "orders")
            .option("table", "archive").load())
    assert "archived_at" in arch.columns
    assert arch.count() == 10
    assert snap.count() == 292  # a new action reads the table again


def test_publish_json_strings_send_mode_and_errors(spark, dsn, make_queue, sql):
    make_queue("raw")
    df = spark.createDataFrame([(json.dumps({"i": i}), "2030-01-01T00:00:00Z") for i in range(50)],
                               "body string, not_before string") \
        .withColumn("not_before", F.to_timestamp("not_before"))
    (df.write.format("pgmq").option("dsn", dsn).option("queue", "raw")
       .option("messageColumn", "body").option("delayColumn", "not_before")
       .option("writeMode", "send").mode("append").save())
    assert sql("SELECT count(*), min(vt), max(vt) FROM pgmq.q_raw") == [
        (50, datetime(2030, 1, 1, tzinfo=timezone.utc), datetime(2030, 1, 1, tzinfo=timezone.utc))]

    with pytest.raises(Exception, match="does not exist"):
        df.write.format("pgmq").option("dsn", dsn).option("queue", "nope") \
            .option("messageColumn", "body").mode("append").save()
    with pytest.raises(Exception, match="only be appended"):
        df.write.format("pgmq").option("dsn", dsn).option("queue", "raw") \
            .option("messageColumn", "body").mode("overwrite").save()
    # createQueue makes the queue on the way
    df.select(F.col("body").alias("message")).write.format("pgmq").option("dsn", dsn) \
        .option("queue", "made").option("createQueue", "true").mode("append").save()
    assert sql("SELECT count(*) FROM pgmq.q_made") == [(50,)]


def test_publish_exactly_once_all_or_nothing_and_idempotency_key(spark, dsn, make_queue, sql):
    make_queue("eo")
    good = spark.range(0, 400, numPartitions=2).select(
        F.to_json(F.struct(F.col("id").alias("i"))).alias("message"))

    def save(df, **opts):
        w = df.write.format("pgmq").option("dsn", dsn).option("queue", "eo").mode("append")
        for k, v in opts.items():
            w = w.option(k, v)
        w.save()

    # one bad row in one partition: the exactly-once job publishes nothing at all
    bad = good.union(spark.createDataFrame([("{not json",)], "message string"))
    with pytest.raises(Exception, match="(?i)json"):
        save(bad, exactlyOnce="true")
    assert sql("SELECT count(*) FROM pgmq.q_eo") == [(0,)]
    assert sql("SELECT count(*) FROM pgmq_spark.staging") == [(0,)]

    save(good, exactlyOnce="true")
    assert sql("SELECT count(*), count(DISTINCT message) FROM pgmq.q_eo") == [(400, 400)]
    save(good, idempotencyKey="load-2024-01-01")
    save(good, idempotencyKey="load-2024-01-01")  # a re-run of the same job: no-op
    assert sql("SELECT count(*) FROM pgmq.q_eo") == [(800,)]
    assert sql("SELECT sink_id, batch_id, rows FROM pgmq_spark.sink_batches") == [
        ("batch:load-2024-01-01", 0, 400)]
    assert sql("SELECT count(*) FROM pgmq_spark.staging") == [(0,)]


def test_publish_through_topics(spark, dsn, make_queue, sql):
    make_queue("eu")
    make_queue("all")
    sql("SELECT pgmq.bind_topic('orders.eu.*', 'eu')")
    sql("SELECT pgmq.bind_topic('orders.#', 'all')")
    df = spark.createDataFrame([('{"x": 1}', "orders.eu.fr"), ('{"x": 2}', "orders.us.ny")],
                               "message string, routing_key string")
    df.write.format("pgmq").option("dsn", dsn).option("routingKeyColumn", "routing_key") \
        .mode("append").save()
    assert sql("SELECT count(*) FROM pgmq.q_eu") == [(1,)]
    assert sql("SELECT count(*) FROM pgmq.q_all") == [(2,)]
    lost = spark.createDataFrame([('{"x": 3}', "nobody.listens")], "message string, routing_key string")
    with pytest.raises(Exception, match="matched no queue binding"):
        lost.write.format("pgmq").option("dsn", dsn).option("routingKeyColumn", "routing_key") \
            .mode("append").save()


def test_claim_is_materialized_once_then_ack_and_nack(spark, dsn, make_queue, sql):
    make_queue("jobs")
    sql("SELECT pgmq.send_batch('jobs', ARRAY(SELECT jsonb_build_object('i', g) "
        "FROM generate_series(1, 30) g))")

    batch = pgmq_spark.consume(spark, dsn=dsn, queue="jobs", vt=120, max_messages=20, partitions=2)
    assert batch.count() == 20
    assert batch.count() == 20  # no second claim
    ids = [r.msg_id for r in batch.collect()]
    assert len(set(ids)) == 20
    assert sql("SELECT count(*) FROM pgmq.q_jobs WHERE read_ct = 1") == [(20,)]
    assert sql("SELECT count(*) FROM pgmq.q_jobs WHERE read_ct = 0") == [(10,)]

    done = batch.where(F.get_json_object("message", "$.i").cast("int") % 2 == 0)
    failed = batch.where(F.get_json_object("message", "$.i").cast("int") % 2 == 1)
    n_done, n_failed = done.count(), failed.count()
    assert pgmq_spark.ack(done) == pgmq_spark.Finished(n_done, 0)
    assert sql("SELECT count(*) FROM pgmq.a_jobs") == [(n_done,)]
    assert pgmq_spark.nack(failed, "boom") == pgmq_spark.Finished(n_failed, 0)
    # nacked without a retry policy: back after a second (not at once: a failing job would get
    # them again on every claim), with the error recorded
    assert sql("SELECT count(*) FROM pgmq.q_jobs WHERE headers->>'x-pgmq-last-error' = 'boom' "
               "AND vt > clock_timestamp() AND vt <= clock_timestamp() + interval '1 s'") == [(n_failed,)]
    sql("UPDATE pgmq.q_jobs SET vt = now() WHERE headers->>'x-pgmq-last-error' = 'boom'")

    # the next claim gets the 10 never-claimed plus the nacked ones; delete them
    rest = pgmq_spark.consume(spark, dsn=dsn, queue="jobs", vt=120, max_messages=100)
    assert rest.count() == 10 + n_failed
    assert pgmq_spark.ack(rest, mode="delete").done == 10 + n_failed
    assert sql("SELECT count(*) FROM pgmq.q_jobs") == [(0,)]
    assert sql("SELECT count(*) FROM pgmq.a_jobs") == [(n_done,)]


def test_ack_is_fenced_by_the_lease(spark, dsn, make_queue, sql):
    make_queue("short")
    sql("SELECT pgmq.send_batch('short', array_fill('{}'::jsonb, ARRAY[5]))")
    first = pgmq_spark.consume(spark, dsn=dsn, queue="short", vt=0, max_messages=5, partitions=1)
    assert first.count() == 5
    # the lease (0 s) has expired and another consumer took three of them
    sql("SELECT * FROM pgmq.read('short', 300, 3)")
    result = pgmq_spark.ack(first, mode="delete")
    assert result == pgmq_spark.Finished(2, 3)
    assert sql("SELECT count(*) FROM pgmq.q_short") == [(3,)]
    # a DataFrame that lost the claim tag needs dsn and queue
    rebuilt = first.select((F.col("msg_id") + 0).alias("msg_id"), "vt")
    with pytest.raises(pgmq_spark.PgmqSparkError, match="dsn= and queue="):
        pgmq_spark.ack(rebuilt)
    assert pgmq_spark.ack(rebuilt, dsn=dsn, queue="short") == pgmq_spark.Finished(0, 5)


def test_publish_helper_serializes_columns_in_the_jvm(spark, dsn, make_queue, sql):
    make_queue("helper")
    df = spark.createDataFrame([(1, "a", 5), (2, "b", 0)], "id long, name string, priority int")
    pgmq_spark.publish(df, dsn=dsn, queue="helper")
    assert sql("SELECT message, priority FROM pgmq.q_helper ORDER BY message->>'id'") == [
        ({"id": 1, "name": "a"}, 5), ({"id": 2, "name": "b"}, 0)]
    ts = datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)
    df2 = spark.createDataFrame([(ts, 1.5)], "at timestamp, amount double")
    pgmq_spark.publish(df2, dsn=dsn, queue="helper", exactly_once=True)
    (msg,), = sql("SELECT message FROM pgmq.q_helper ORDER BY msg_id DESC LIMIT 1")
    assert msg["amount"] == 1.5 and msg["at"].startswith("2024-05-01T12:00:00")


def test_publish_through_an_exchange(spark, dsn, make_queue, sql):
    df = spark.createDataFrame([('{"x": 1}', "eu"), ('{"x": 2}', "eu"), ('{"x": 3}', "us")],
                               "message string, routing_key string")
    save = (df.write.format("pgmq").option("dsn", dsn).option("exchange", "orders_x")
            .option("exactlyOnce", "true").mode("append"))
    make_queue("eu")
    make_queue("us")
    sql("SELECT pgmq.create_exchange('orders_x'::name, 'direct')")
    sql("SELECT pgmq.bind_queue('eu'::name, 'orders_x'::name, 'eu')")
    sql("SELECT pgmq.bind_queue('us'::name, 'orders_x'::name, 'us')")
    save.save()
    assert sql("SELECT count(*) FROM pgmq.q_eu") == [(2,)]
    assert sql("SELECT count(*) FROM pgmq.q_us") == [(1,)]
    lost = spark.createDataFrame([('{"x": 4}', "asia"), ('{"x": 5}', "eu")], "message string, routing_key string")
    plain = lost.coalesce(1).write.format("pgmq").option("dsn", dsn).option("exchange", "orders_x").mode("append")
    with pytest.raises(Exception, match="matched no queue"):
        plain.save()
    assert sql("SELECT count(*) FROM pgmq.q_eu") == [(2,)]  # the failed task (one partition) wrote nothing
    plain.option("allowUnroutable", "true").save()
    assert sql("SELECT count(*) FROM pgmq.q_eu") == [(3,)]
    # a key bound to a stream only is routed (the stream has the event), not unroutable
    sql("SELECT pgmq.create_stream('asia_log')")
    sql("SELECT pgmq.bind_stream('asia_log', 'orders_x', 'asia')")
    lost.coalesce(1).write.format("pgmq").option("dsn", dsn).option("exchange", "orders_x").mode("append").save()
    assert sql("SELECT message->>'x' FROM pgmq.s_asia_log") == [("4",)]
    assert sql("SELECT count(*) FROM pgmq.q_eu") == [(4,)]
