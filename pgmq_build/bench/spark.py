"""Spark publish and consume throughput (rows/s) for `make bench`.

    python3 -m pgmq_build.bench.spark [--dsn DSN] [--rows 200000] [--json out.json]

``run(dsn, rows)`` returns one :class:`Result` per path; every path is warmed up with a small
run first (the first Python data-source operation of a session pays worker start-up, pyarrow
import and JIT: seconds), then timed once on ``rows`` messages of ~100 bytes of JSON. Timings
include Spark's job scheduling; the streaming one includes the query's start and its last
(empty) trigger. Without --dsn a throwaway server is started (fsync=off, which flatters writes).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import psycopg

# Fails without the spark extra (pgmq_build.spark imports pyspark): run.py skips the Spark rows.
from ..spark import ack, consume
from ..spark._session import local_session

QUEUE = "bench_spark"
WARMUP_ROWS = 2_000


@dataclass(frozen=True)
class Result:
    name: str
    rows: int
    seconds: float
    description: str

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "rows_per_s": round(self.rows_per_s, 1)}


def _messages(spark, rows: int):
    from pyspark.sql import functions as F

    df = spark.range(rows, numPartitions=2).select(F.to_json(F.struct(
        F.col("id").alias("order_id"), F.lit("c-42").alias("customer"),
        F.array(F.lit(1), F.lit(2), F.lit(3)).alias("items"),
        F.lit("x" * 48).alias("note"))).alias("message"))
    df = df.cache()
    df.count()
    return df


def run(dsn: str, rows: int = 200_000, spark=None, log: Callable[[str], None] = print,
        partitions: int = 2) -> list[Result]:
    """Measure every path against the database at ``dsn`` (pgmq installed). Uses and drops the
    queue bench_spark."""
    own = spark is None
    if own:
        spark = local_session("pgmq-spark-bench", cores=partitions)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,)) if conn.execute(
        "SELECT 1 FROM pgmq.meta WHERE queue_name = %s", (QUEUE,)).fetchone() else None
    conn.execute("SELECT pgmq.create(%s)", (QUEUE,))

    def reset() -> None:
        conn.execute("SELECT pgmq.purge_queue(%s)", (QUEUE,))
        conn.execute(f"TRUNCATE pgmq.a_{QUEUE}")
        conn.execute(f"VACUUM ANALYZE pgmq.q_{QUEUE}")

    def fill(n: int) -> None:
        reset()
        conn.execute("SELECT pgmq.send_batch(%s, ARRAY(SELECT jsonb_build_object('order_id', g, "
                     "'customer', 'c-42', 'items', jsonb_build_array(1, 2, 3), 'note', repeat('x', 48)) "
                     "FROM generate_series(1, %s) g))", (QUEUE, n))
        conn.execute(f"VACUUM ANALYZE pgmq.q_{QUEUE}")

    def count() -> int:
        return conn.execute(f"SELECT count(*) FROM pgmq.q_{QUEUE}").fetchone()[0]

    def publish(df, **opts: str) -> None:
        w = df.write.format("pgmq").option("dsn", dsn).option("queue", QUEUE).mode("append")
        for k, v in opts.items():
            w = w.option(k, v)
        w.save()

    def read_snapshot(_n: int) -> None:
        (spark.read.format("pgmq").option("dsn", dsn).option("queue", QUEUE)
         .option("numPartitions", partitions).load().write.format("noop").mode("overwrite").save())

    def stream_consume(_n: int) -> None:
        with tempfile.TemporaryDirectory(prefix="pgmq-bench-ck-") as ck:
            q = (spark.readStream.format("pgmq").option("dsn", dsn).option("queue", QUEUE)
                 .option("maxRowsPerBatch", 50_000).option("numPartitions", partitions)
                 .option("onCommit", "archive").load()
                 .writeStream.format("noop").option("checkpointLocation", ck)
                 .trigger(availableNow=True).start())
            q.awaitTermination()
            if q.exception():
                raise q.exception()

    def claim_ack(n: int) -> None:
        batch = consume(spark, dsn=dsn, queue=QUEUE, vt=600, max_messages=n, partitions=partitions)
        ack(batch, mode="delete")

    results: list[Result] = []
    try:
        big, small = _messages(spark, rows), _messages(spark, WARMUP_ROWS)
        writes = [
            ("spark publish (COPY)", {}, "df.write.format('pgmq'): Arrow -> CSV -> COPY, "
                                         "one transaction per task"),
            ("spark publish (send_batch)", {"writeMode": "send"},
             "writeMode=send: every row through pgmq.send_batch"),
            ("spark publish (exactly-once)", {"exactlyOnce": "true"},
             "exactlyOnce=true: COPY into staging, one INSERT ... SELECT at commit"),
        ]
        for name, opts, desc in writes:
            reset()
            publish(small, **opts)  # warm-up
            reset()
            t = time.monotonic()
            publish(big, **opts)
            took = time.monotonic() - t
            got = count()
            if got != rows:
                raise RuntimeError(f"{name}: {got} rows in the queue, expected {rows}")
            results.append(Result(name, rows, took, desc))
            log(f"{name}: {rows / took:,.0f} rows/s")
        reads: list[tuple[str, Callable[[int], None], str, int]] = [
            ("spark snapshot read", read_snapshot, "spark.read.format('pgmq') -> noop sink "
             "(COPY csv -> Arrow)", rows),
            ("spark stream consume", stream_consume, "readStream availableNow, 50k per batch, "
             "archive on commit -> noop sink", 0),
            ("spark claim + ack", claim_ack, "consume() (pgmq.read, 2 partitions, "
             "localCheckpoint) + ack(delete)", 0),
        ]
        for name, fn, desc, left in reads:
            fill(WARMUP_ROWS)
            fn(WARMUP_ROWS)
            fill(rows)
            t = time.monotonic()
            fn(rows)
            took = time.monotonic() - t
            got = count()
            if got != left:
                raise RuntimeError(f"{name}: {got} rows left in the queue, expected {left}")
            results.append(Result(name, rows, took, desc))
            log(f"{name}: {rows / took:,.0f} rows/s")
    finally:
        conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))
        conn.close()
        if own:
            spark.stop()
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--json")
    args = ap.parse_args(argv)

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    def go(dsn: str) -> list[Result]:
        return run(dsn, args.rows, log=log)

    if args.dsn:
        results = go(args.dsn)
    else:
        from ..cluster import TempCluster
        from ..install import InstallError, ensure_pgmq, install_files

        try:
            install_files()
        except InstallError as exc:
            log(f"(extension files not installed: {exc}; using the standalone script)")
        with TempCluster(settings={"max_wal_size": "8GB", "checkpoint_timeout": "1h"}) as cluster:
            with psycopg.connect(cluster.dsn(), autocommit=True) as c:
                ensure_pgmq(c)
            results = go(cluster.dsn())
    width = max(len(r.name) for r in results)
    for r in results:
        print(f"{r.name:<{width}}  {r.rows_per_s:>10,.0f} rows/s  ({r.rows:,} rows in {r.seconds:.2f} s)"
              f"  {r.description}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([r.as_dict() for r in results], f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
