"""`pgmq-build demo --spark`: the queue as a Spark data pipeline, narrated.

    python -m pgmq_build.spark.demo [DSN]

Publishes orders from a DataFrame, snapshots the queue, streams orders into a shipments queue
exactly-once, then works the shipments as competing consumers (claim, ack, nack). Without a
DSN it runs on a throwaway PostgreSQL server, like `pgmq-build demo`.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable

import psycopg

Echo = Callable[[str], None]


def run(dsn: str | None = None, echo: Echo = print, keep: bool = False, spark=None) -> None:
    """Run the Spark tour against ``dsn`` (a database where pgmq is or can be installed), or a
    throwaway server when ``dsn`` is None. ``spark``: an existing SparkSession to use."""
    from ..demo import _server
    from ..install import ensure_pgmq

    with _server(dsn, keep, echo) as url:
        with psycopg.connect(url, autocommit=True) as conn:
            echo(f"pgmq: {ensure_pgmq(conn)}")
        own = spark is None
        if own:
            echo("Starting Spark (local[2]); the first start takes 10-20 s...")
            from ._session import local_session

            t = time.monotonic()
            spark = local_session("pgmq-spark-demo")
            echo(f"  SparkSession ready in {time.monotonic() - t:.1f} s, Spark {spark.version}")
        try:
            _tour(spark, url, echo)
        finally:
            if own:
                spark.stop()


def _tour(spark, dsn: str, echo: Echo) -> None:
    from pyspark.sql import functions as F

    from . import ack, consume, nack

    suffix = os.getpid()
    orders, shipments = f"demo_orders_{suffix}", f"demo_shipments_{suffix}"
    conn = psycopg.connect(dsn, autocommit=True)

    def show(query: str, *params: object) -> None:
        echo("  sql> " + query.replace("%s", "{}").format(*(repr(p) for p in params)))
        for row in conn.execute(query, params or None).fetchall():
            echo("       " + " | ".join(str(v) for v in row))

    try:
        conn.execute("SELECT pgmq.create(%s)", (orders,))
        conn.execute("SELECT pgmq.create(%s)", (shipments,))

        echo(f"\n1. Publish 10,000 orders from a DataFrame into queue {orders!r} (COPY fast path).")
        echo("   Columns message (a struct, sent as JSON) and priority (header x-pgmq-priority).")
        df = spark.range(10_000).select(
            F.struct(F.col("id").alias("order_id"),
                     F.element_at(F.array(F.lit("eu"), F.lit("us"), F.lit("apac")),
                                  (F.col("id") % 3 + 1).cast("int")).alias("region"),
                     F.round(F.rand(seed=7) * 100, 2).alias("amount")).alias("message"),
            F.when(F.col("id") % 100 == 0, -1).otherwise(0).alias("priority"))
        t = time.monotonic()
        (df.write.format("pgmq").option("dsn", dsn).option("queue", orders)
           .mode("append").save())
        echo(f"   published in {time.monotonic() - t:.1f} s")
        show("SELECT queue_length, total_messages FROM pgmq.metrics(%s)", orders)

        echo("\n2. A non-destructive snapshot of the queue as a DataFrame (msg_id range partitions).")
        snap = (spark.read.format("pgmq").option("dsn", dsn).option("queue", orders)
                .option("numPartitions", 4).load())
        parsed = snap.select("msg_id", "priority",
                             F.from_json("message", "order_id long, region string, amount double")
                             .alias("o"))
        totals = (parsed.groupBy("o.region")
                  .agg(F.count("*").alias("n"), F.round(F.sum("o.amount"), 2).alias("total"))
                  .orderBy("region").collect())
        for r in totals:
            echo(f"   region={r.region:5} orders={r.n:5} total={r.total}")
        echo("   (reading changed nothing: every message is still there, read_ct 0)")

        echo(f"\n3. Stream {orders!r} -> {shipments!r}: readStream (this query is the queue's only")
        echo("   consumer; messages are archived once their batch is committed, the last one too),")
        echo("   a transformation, and the exactly-once pgmq sink. Trigger.AvailableNow, 4000 per batch.")
        with tempfile.TemporaryDirectory(prefix="pgmq-demo-ck-") as ck:
            stream = (spark.readStream.format("pgmq").option("dsn", dsn).option("queue", orders)
                      .option("maxRowsPerBatch", 4000).load())
            out = (stream.select(F.from_json("message", "order_id long, region string, amount double")
                                 .alias("o"), "priority")
                   .where("o.amount >= 10")
                   .select(F.to_json(F.struct("o.order_id", "o.region",
                                              F.lit("ship").alias("action"))).alias("message"),
                           "priority"))
            t = time.monotonic()
            q = (out.writeStream.format("pgmq").option("dsn", dsn).option("queue", shipments)
                 .option("checkpointLocation", ck).trigger(availableNow=True).start())
            q.awaitTermination()
            if q.exception():
                raise q.exception()
            echo(f"   streamed in {time.monotonic() - t:.1f} s")
        show("SELECT (SELECT count(*) FROM pgmq." + f"q_{orders}) AS orders_left, "
             f"(SELECT count(*) FROM pgmq.a_{orders}) AS orders_archived, "
             f"(SELECT count(*) FROM pgmq.q_{shipments}) AS shipments")
        show("SELECT batch_id, rows FROM pgmq_spark.sink_batches WHERE target = %s ORDER BY batch_id",
             f"queue:{shipments}")

        echo("\n4. Competing consumers: claim 1,000 shipments for 5 minutes (pgmq.read in 2 partitions,")
        echo("   materialized once), ack the EU ones (archive), nack the rest (they come back).")
        batch = consume(spark, dsn=dsn, queue=shipments, vt=300, max_messages=1000, partitions=2)
        eu = batch.where(F.get_json_object("message", "$.region") == "eu")
        other = batch.where(F.get_json_object("message", "$.region") != "eu")
        echo(f"   claimed {batch.count()} (a second count claims nothing more: {batch.count()})")
        echo(f"   ack(eu)     -> {ack(eu)}")
        echo(f"   nack(other) -> {nack(other, 'not our region')}")
        show("SELECT queue_length, queue_visible_length FROM pgmq.metrics(%s)", shipments)
        echo("\nSpark demo finished: publish, snapshot, exactly-once stream, claim/ack/nack.")
    finally:
        with contextlib.suppress(Exception):
            conn.execute("SELECT pgmq.drop_queue(%s)", (orders,))
            conn.execute("SELECT pgmq.drop_queue(%s)", (shipments,))
            conn.execute("DELETE FROM pgmq_spark.sink_batches WHERE target = %s",
                         (f"queue:{shipments}",))
        conn.close()


if __name__ == "__main__":
    run(sys.argv[1] if len(sys.argv) > 1 else None)
