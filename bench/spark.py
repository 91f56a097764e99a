"""Spark publish and consume throughput (rows/s) for `make bench`.

    python3 -m bench.spark [--dsn DSN] [--rows 200000] [--repeat 1]
                                      [--only raw_copy,publish,...] [--json out.json]
    python3 -m bench.spark --drain 300 [--drain-rate 100000]

``run(dsn, rows)`` returns one :class:`Result` per path; every path is warmed up with a small
run first (the first Python data-source operation of a session pays worker start-up, pyarrow
import and JIT: seconds), then timed ``repeat`` times (the median is reported) on ``rows``
messages of ~100 bytes of JSON. Timings include Spark's job scheduling; the streaming one
includes the query's start and its last (empty) trigger. The first row, ``raw COPY``, is the
baseline without Spark: the same messages COPYed (CSV, prepared beforehand, one connection)
into a plain table made ``LIKE`` the queue table (same columns, identity, defaults and indexes),
in the same run. Without --dsn a throwaway server is started (fsync=off, which flatters writes).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import psycopg

# Fails without the spark extra (pgmq_build.spark imports pyspark): run.py skips the Spark rows.
from pgmq_build.spark import ack, consume
from pgmq_build.spark._session import local_session

from .run import check_dsn

QUEUE = "bench_spark"
RAW_TABLE = "bench_spark_raw"  # the raw COPY baseline's table, LIKE the queue table
WARMUP_ROWS = 2_000
# --only names of the paths, in the order they run
PATHS = ("raw_copy", "publish", "publish_send", "publish_exactly_once", "snapshot", "stream",
         "claim", "stream_publish", "stream_publish_send", "stream_range", "stream_subscription")
STREAM = "bench_spark_stream"  # the stream_* paths' pgmq stream


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


def _run_available_now(reader, checkpoint: str, log: Callable[[str], None]) -> None:
    """Run a streaming read to a noop sink with Trigger.AvailableNow and log where its time went
    (docs/performance/spark-consumption.md): from start() to the first trigger (Spark starts the
    reader's Python process), the triggers by Spark's own phases (durationMs of the progress
    reports; latestOffset includes the source's planning, walCommit its commit of the batch
    before), and what followed the last trigger (the last, empty trigger and the query's end)."""
    t0 = time.time()
    q = (reader.load().writeStream.format("noop").option("checkpointLocation", checkpoint)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    t1 = time.time()
    if q.exception():
        raise q.exception()
    progress = q.recentProgress
    if not progress:
        return
    first = datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00")).timestamp()
    phases: dict[str, int] = {}
    for p in progress:
        for k, v in p["durationMs"].items():
            phases[k] = phases.get(k, 0) + v
    triggers = phases.pop("triggerExecution", 0)
    log(f"  query {t1 - t0:.2f} s: start to first trigger {first - t0:.2f} s, {len(progress)} "
        f"trigger(s) {triggers / 1000:.2f} s ("
        + ", ".join(f"{k} {v / 1000:.2f}" for k, v in sorted(phases.items(), key=lambda kv: -kv[1]) if v)
        + f"), after them {t1 - first - triggers / 1000:.2f} s")


def _raw_copy_data(rows: int, first: int = 0) -> bytes:
    """CSV (vt, message) rows with the same JSON as _messages (what Spark's to_json writes)."""
    buf = io.StringIO()
    note = "x" * 48
    vt = datetime.now(timezone.utc).isoformat()
    for i in range(first, first + rows):
        msg = f'{{"order_id":{i},"customer":"c-42","items":[1,2,3],"note":"{note}"}}'
        buf.write(vt + ',"' + msg.replace('"', '""') + '"\n')
    return buf.getvalue().encode()


def run(dsn: str, rows: int = 200_000, spark=None, log: Callable[[str], None] = print,
        partitions: int = 2, repeat: int = 1, only: tuple[str, ...] | None = None) -> list[Result]:
    """Measure every path (or those named in ``only``, see PATHS) against the database at
    ``dsn`` (pgmq installed), each ``repeat`` times (median). Uses and drops the queue
    bench_spark and the table bench_spark_raw."""
    unknown = set(only or ()) - set(PATHS)
    if unknown:
        raise ValueError(f"unknown path(s) {sorted(unknown)}; available: {', '.join(PATHS)}")
    wanted = set(only or PATHS)
    own = spark is None and bool(wanted - {"raw_copy"})  # the baseline runs without Spark
    if own:
        spark = local_session("pgmq-spark-bench", cores=partitions)
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
    conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,)) if conn.execute(
        "SELECT 1 FROM pgmq.meta WHERE queue_name = %s", (QUEUE,)).fetchone() else None
    conn.execute("SELECT pgmq.create(%s)", (QUEUE,))

    def reset() -> None:
        conn.execute("SELECT pgmq.purge_queue(%s)", (QUEUE,))
        conn.execute(f"TRUNCATE pgmq.a_{QUEUE}")
        conn.execute(f"VACUUM ANALYZE pgmq.q_{QUEUE}")

    def timed(name: str, desc: str, n: int, prepare: Callable[[], None], fn: Callable[[], None],
              check: Callable[[], None]) -> None:
        took: list[float] = []
        for _ in range(repeat):
            prepare()
            t = time.monotonic()
            fn()
            took.append(time.monotonic() - t)
            check()
        runs = "" if repeat == 1 else (f" (median of {repeat}: "
                                       + ", ".join(f"{n / x:,.0f}" for x in took) + ")")
        results.append(Result(name, n, statistics.median(took), desc + runs))
        log(f"{name}: {n / statistics.median(took):,.0f} rows/s{runs}")

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
            _run_available_now(spark.readStream.format("pgmq").option("dsn", dsn)
                               .option("queue", QUEUE).option("maxRowsPerBatch", 50_000)
                               .option("numPartitions", partitions).option("onCommit", "archive"),
                               ck, log)

    def claim_ack(n: int) -> None:
        batch = consume(spark, dsn=dsn, queue=QUEUE, vt=600, max_messages=n, partitions=partitions)
        ack(batch, mode="delete")

    results: list[Result] = []
    try:
        if "raw_copy" in wanted:
            conn.execute(f"DROP TABLE IF EXISTS {RAW_TABLE}")
            conn.execute(f"CREATE TABLE {RAW_TABLE} (LIKE pgmq.q_{QUEUE} INCLUDING ALL)")
            data = _raw_copy_data(rows)

            def raw_reset() -> None:
                conn.execute(f"TRUNCATE {RAW_TABLE}")
                conn.execute(f"VACUUM ANALYZE {RAW_TABLE}")

            def raw_copy(payload: bytes = data) -> None:
                with conn.cursor().copy(f"COPY {RAW_TABLE} (vt, message) FROM STDIN (FORMAT csv)") as cp:
                    cp.write(payload)

            def raw_check() -> None:
                got = conn.execute(f"SELECT count(*) FROM {RAW_TABLE}").fetchone()[0]
                if got != rows:
                    raise RuntimeError(f"raw COPY: {got} rows in {RAW_TABLE}, expected {rows}")

            raw_reset()
            raw_copy(_raw_copy_data(WARMUP_ROWS))
            timed("raw COPY (no Spark)", "baseline: one connection, COPY csv of prepared rows "
                  "into a plain table LIKE the queue table (same indexes)", rows, raw_reset,
                  raw_copy, raw_check)
            conn.execute(f"DROP TABLE {RAW_TABLE}")
        if wanted == {"raw_copy"}:
            return results
        big, small = _messages(spark, rows), _messages(spark, WARMUP_ROWS)
        writes = [
            ("publish", "spark publish (COPY)", {}, "df.write.format('pgmq'): Arrow -> binary "
             "COPY, one COPY and one transaction per task"),
            ("publish_send", "spark publish (send_batch)", {"writeMode": "send"},
             "writeMode=send: every row through pgmq.send_batch"),
            ("publish_exactly_once", "spark publish (exactly-once)", {"exactlyOnce": "true"},
             "exactlyOnce=true: binary COPY into staging, one INSERT ... SELECT at commit"),
        ]
        for key, name, opts, desc in writes:
            if key not in wanted:
                continue
            reset()
            publish(small, **opts)  # warm-up

            def check(name: str = name) -> None:
                got = count()
                if got != rows:
                    raise RuntimeError(f"{name}: {got} rows in the queue, expected {rows}")

            timed(name, desc, rows, reset, lambda opts=opts: publish(big, **opts), check)
        reads: list[tuple[str, str, Callable[[int], None], str, int]] = [
            ("snapshot", "spark snapshot read", read_snapshot, "spark.read.format('pgmq') -> "
             "noop sink (COPY csv -> Arrow)", rows),
            ("stream", "spark stream consume", stream_consume, "readStream availableNow, 50k per "
             "batch, archive on commit -> noop sink", 0),
            ("claim", "spark claim + ack", claim_ack, "consume() (pgmq.read, 2 partitions, "
             "localCheckpoint) + ack(delete)", 0),
        ]
        for key, name, fn, desc, left in reads:
            if key not in wanted:
                continue
            fill(WARMUP_ROWS)
            fn(WARMUP_ROWS)

            def check_left(name: str = name, left: int = left) -> None:
                got = count()
                if got != left:
                    raise RuntimeError(f"{name}: {got} rows left in the queue, expected {left}")

            timed(name, desc, rows, lambda: fill(rows), lambda fn=fn: fn(rows), check_left)
        if wanted & {p for p in PATHS if p.startswith("stream_")}:
            _stream_paths(spark, conn, dsn, big, small, rows, wanted, partitions, timed, log)
    finally:
        if conn.execute("SELECT 1 FROM pgmq.streams WHERE stream_name = %s", (STREAM,)).fetchone():
            conn.execute("SELECT pgmq.drop_stream(%s)", (STREAM,))
        conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))
        conn.close()
        if own:
            spark.stop()
    return results


def _stream_paths(spark, conn: psycopg.Connection, dsn: str, big, small, rows: int,
                  wanted: set[str], partitions: int, timed: Callable[..., None],
                  log: Callable[[str], None]) -> None:
    """The stream_* paths: publishing into a pgmq stream (COPY into its current segment, or
    pgmq.stream_send_batch), a batch read of every event, and a subscription consumed by
    readStream (availableNow, the subscription moved on commit)."""

    def recreate() -> None:
        if conn.execute("SELECT 1 FROM pgmq.streams WHERE stream_name = %s", (STREAM,)).fetchone():
            conn.execute("SELECT pgmq.drop_stream(%s)", (STREAM,))
        conn.execute("SELECT pgmq.create_stream(%s)", (STREAM,))

    def events() -> int:
        return conn.execute(f"SELECT count(*) FROM pgmq.s_{STREAM}").fetchone()[0]

    def publish(df, **opts: str) -> None:
        (df.write.format("pgmq").option("dsn", dsn).option("stream", STREAM).options(**opts)
         .mode("append").save())

    for key, name, opts, desc in (
            ("stream_publish", "spark stream publish (COPY)", {}, "df.write.format('pgmq')"
             ".option('stream', ...): Arrow -> binary COPY into the current segment"),
            ("stream_publish_send", "spark stream publish (send_batch)", {"writeMode": "send"},
             "writeMode=send: every row through pgmq.stream_send_batch")):
        if key not in wanted:
            continue
        recreate()
        publish(small, **opts)  # warm-up

        def check(name: str = name) -> None:
            if events() != rows:
                raise RuntimeError(f"{name}: {events()} events in the stream, expected {rows}")

        timed(name, desc, rows, recreate, lambda opts=opts: publish(big, **opts), check)

    def fill(n: int) -> None:
        recreate()
        conn.execute("SELECT count(*) FROM pgmq.stream_send_batch(%s, ARRAY(SELECT jsonb_build_object("
                     "'order_id', g, 'customer', 'c-42', 'items', jsonb_build_array(1, 2, 3), 'note', "
                     "repeat('x', 48)) FROM generate_series(1, %s) g))", (STREAM, n))
        conn.execute("SELECT pgmq.stream_tick(%s)", (STREAM,))
        conn.execute("SELECT pgmq.subscribe(%s, 'bench', 'earliest')", (STREAM,))
        conn.execute(f"VACUUM ANALYZE pgmq.s_{STREAM}")

    def read_range(_n: int) -> None:
        (spark.read.format("pgmq").option("dsn", dsn).option("stream", STREAM)
         .option("numPartitions", partitions).load().write.format("noop").mode("overwrite").save())

    def consume_subscription(_n: int) -> None:
        with tempfile.TemporaryDirectory(prefix="pgmq-bench-ck-") as ck:
            _run_available_now(spark.readStream.format("pgmq").option("dsn", dsn)
                               .option("stream", STREAM).option("subscription", "bench")
                               .option("numPartitions", partitions), ck, log)

    def lag() -> int:
        return conn.execute("SELECT lag_events FROM pgmq.stream_info(%s)", (STREAM,)).fetchone()[0]

    for key, name, fn, desc, left in (
            ("stream_range", "spark stream range read", read_range, "spark.read.format('pgmq')"
             ".option('stream', ...): every event, 2 partitions -> noop sink", rows),
            ("stream_subscription", "spark subscription consume", consume_subscription,
             "readStream of a subscription, availableNow -> noop sink, position moved", 0)):
        if key not in wanted:
            continue
        fill(WARMUP_ROWS)
        fn(WARMUP_ROWS)

        def check_lag(name: str = name, left: int = left) -> None:
            if lag() != left:
                raise RuntimeError(f"{name}: subscription lag {lag()}, expected {left}")

        timed(name, desc, rows, lambda: fill(rows), lambda fn=fn: fn(rows), check_lag)


DRAIN_QUEUE, DRAIN_SINK = "bench_spark_drain", "bench_spark_drain_sink"


def drain(dsn: str, seconds: float, rate: int, spark=None, partitions: int = 2,
          log: Callable[[str], None] = print) -> dict:
    """The long drain (issue 34): a producer sends ``rate`` messages/s (send_batch every 0.1 s,
    its own connection) for ``seconds`` while a streaming query consumes the queue (archive on
    commit; batches of up to two seconds of production, as a micro-batch's fixed cost is about a
    second) into another queue through the exactly-once pgmq sink; then the producer stops and
    the query drains the rest. Returns the counts and the backlog seen every second; raises when
    a message is lost or written twice, or the query cannot keep up (it fails to drain within
    max(``seconds``, 60) s after the producer stopped)."""
    own = spark is None
    if own:
        spark = local_session("pgmq-spark-drain", cores=partitions)
    conn = psycopg.connect(dsn, autocommit=True)
    for q in (DRAIN_QUEUE, DRAIN_SINK):
        if conn.execute("SELECT 1 FROM pgmq.meta WHERE queue_name = %s", (q,)).fetchone():
            conn.execute("SELECT pgmq.drop_queue(%s)", (q,))
        conn.execute("SELECT pgmq.create(%s)", (q,))
    sent = [0]
    stop = threading.Event()

    def produce() -> None:
        per_tick = max(1, rate // 10)
        with psycopg.connect(dsn, autocommit=True) as p:
            t = time.monotonic()
            while not stop.is_set():
                p.execute("SELECT count(*) FROM pgmq.send_batch(%s, ARRAY(SELECT jsonb_build_object("
                          "'n', g) FROM generate_series(%s::bigint, %s::bigint) g))",
                          (DRAIN_QUEUE, sent[0] + 1, sent[0] + per_tick))
                sent[0] += per_tick
                t += 0.1
                time.sleep(max(0.0, t - time.monotonic()))

    def backlog() -> int:
        return conn.execute(f"SELECT count(*) FROM pgmq.q_{DRAIN_QUEUE}").fetchone()[0]

    samples: list[int] = []
    producer = threading.Thread(target=produce, daemon=True)
    try:
        with tempfile.TemporaryDirectory(prefix="pgmq-drain-ck-") as ck:
            query = (spark.readStream.format("pgmq").option("dsn", dsn).option("queue", DRAIN_QUEUE)
                     .option("numPartitions", partitions).option("maxRowsPerBatch", max(2 * rate, 10_000))
                     .option("onCommit", "archive").load().select("message", "headers")
                     .writeStream.format("pgmq").option("dsn", dsn).option("queue", DRAIN_SINK)
                     .option("checkpointLocation", ck).start())
            producer.start()
            end = time.monotonic() + seconds
            while time.monotonic() < end and query.isActive:
                time.sleep(1)
                samples.append(backlog())
                last = query.lastProgress or {}
                log(f"drain: {sent[0]:,} sent, backlog {samples[-1]:,}; last batch "
                    f"{last.get('batchId')}: {last.get('numInputRows')} rows, {last.get('durationMs')}")
            stop.set()
            producer.join()
            deadline = time.monotonic() + max(seconds, 60)
            while query.isActive and backlog() and time.monotonic() < deadline:
                time.sleep(1)
            left = backlog()
            query.stop()
            if query.exception():
                raise RuntimeError(f"drain: the query failed: {query.exception()}")
        got, distinct = conn.execute(f"SELECT count(*), count(DISTINCT message->>'n') "
                                     f"FROM pgmq.q_{DRAIN_SINK}").fetchone()
        out = {"seconds": seconds, "rate": rate, "sent": sent[0], "in_sink": got,
               "distinct_in_sink": distinct, "left": left, "max_backlog": max(samples, default=0),
               "backlog_every_second": samples}
        log(f"drain: {out['sent']:,} sent, {got:,} in the sink ({distinct:,} distinct), {left:,} left, "
            f"backlog at most {out['max_backlog']:,}")
        if left or got != sent[0] or distinct != got:
            raise RuntimeError(f"drain: lost or doubled messages, or not drained: {out}")
        return out
    finally:
        stop.set()
        for q in (DRAIN_QUEUE, DRAIN_SINK):
            conn.execute("SELECT pgmq.drop_queue(%s)", (q,))
        conn.close()
        if own:
            spark.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn")
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=1, help="timed runs per path; the median is "
                    "reported (default 1)")
    ap.add_argument("--only", help="comma-separated paths: " + ", ".join(PATHS))
    ap.add_argument("--json")
    ap.add_argument("--drain", type=float, default=0, metavar="SECONDS",
                    help="instead of the paths: the long drain (a producer at --drain-rate messages/s "
                    "and a streaming consumer for SECONDS; issue 34 asks for 300)")
    ap.add_argument("--drain-rate", type=int, default=100_000)
    args = ap.parse_args(argv)
    only = tuple(x.strip() for x in args.only.split(",") if x.strip()) if args.only else None
    if only and set(only) - set(PATHS):
        ap.error(f"unknown path(s) in --only; available: {', '.join(PATHS)}")
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    if args.rows < 1:
        ap.error(f"--rows must be at least 1, got {args.rows}")
    check_dsn(ap, args.dsn)  # before Spark starts: a typo should not cost a JVM start

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    if args.drain < 0 or args.drain_rate < 1:
        ap.error("--drain must not be negative and --drain-rate must be at least 1")

    def go(dsn: str) -> list[Result]:
        if args.drain:
            out = drain(dsn, args.drain, args.drain_rate, log=log)
            return [Result("spark drain", out["in_sink"], args.drain,
                           f"max backlog {out['max_backlog']:,}, {out['left']} left, "
                           f"{out['distinct_in_sink']:,} distinct in the sink")]
        return run(dsn, args.rows, log=log, repeat=args.repeat, only=only)

    if args.dsn:
        results = go(args.dsn)
    else:
        from pgmq_build.cluster import TempCluster
        from pgmq_build.install import InstallError, ensure_pgmq, install_files

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
