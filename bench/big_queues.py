"""What send, read + delete, pop and metrics cost on a queue holding millions of messages:
``python3 -m bench big`` (`make bench-big`).

    python3 -m bench big [--sizes 1000000,10000000] [--ops 2000] [--no-partitioned | --no-plain]
        [--partition-interval 1000000] [--no-read-floor] [--dsn DSN] [--json PATH]

For each size, a plain queue (pgmq.create) and, when pg_partman is installed, a partitioned one
(pgmq.create_partitioned by msg_id, --partition-interval ids a partition, maintenance run between
the fill's chunks so that every row lands in its partition, and once after, which confirms its
read floor) are filled straight into their
tables (INSERT ... generate_series, chunks of CHUNK rows), then VACUUM ANALYZE, as autovacuum
would leave them. Then, on one connection: --ops sends, --ops read + delete pairs, --ops pops,
each timed by the client (µs per operation, wall: round trip included) and by the server (the
backend's CPU from /proc, as the other benches measure it: 10 ms ticks, so --ops sets the
resolution); pgmq.queue_metrics and pgmq.metrics timed by the server (median of REPEAT calls);
the queue table's size on disk with its indexes. Nothing is asserted: it reports.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass

import psycopg

from .metrics_cost import TIMED
from .run import check_dsn, drop_bench_databases, log, on_server, prepare_database
from .server import backend_ticks, partitions_and_mb, ticks_to_us
from .workloads import MESSAGE

CHUNK = 1_000_000
PARTITION_INTERVAL = 1_000_000
REPEAT = 5


@dataclass
class Row:
    kind: str  # "plain", "partitioned" or "partitioned, no read floor"
    size: int  # messages queued when measured
    send_us: float  # client wall µs per call
    read_delete_us: float
    pop_us: float
    send_cpu_us: float | None  # server CPU µs per call (None: not measurable)
    read_delete_cpu_us: float | None
    pop_cpu_us: float | None
    queue_metrics_ms: float
    metrics_ms: float
    table_mb: float  # the queue table with its indexes (and partitions)
    fill_s: float
    partitions: int = 0  # the partitioned queue's partitions when measured (0: plain)
    read_floor: int | None = None  # the partitioned queue's read floor when measured (None: none)


def fill(conn: psycopg.Connection, queue: str, size: int, partitioned: bool) -> None:
    table = f"pgmq.q_{queue}"
    for start in range(0, size, CHUNK):
        n = min(CHUNK, size - start)
        conn.execute(f"INSERT INTO {table} (vt, message) SELECT now(), %s::jsonb FROM generate_series(1, %s)",
                     (MESSAGE, n))
        if partitioned:  # the partitions ahead of the next chunk
            conn.execute("SELECT pgmq.run_partition_maintenance(%s)", (queue,))
        log(f"  {queue}: {start + n:,} / {size:,}")
    if partitioned:  # once more, as a scheduler would: it confirms the read floor proposed last
        conn.execute("SELECT pgmq.run_partition_maintenance(%s)", (queue,))
    conn.execute(f"VACUUM ANALYZE {table}")


def per_op(conn: psycopg.Connection, ops: int, op) -> tuple[float, float | None]:
    """(client wall µs per op, server CPU µs per op) of `ops` calls of op(conn)."""
    pid = conn.info.backend_pid
    for _ in range(20):  # warm: plans, caches
        op(conn)
    ticks0 = backend_ticks([pid])
    t0 = time.perf_counter()
    for _ in range(ops):
        op(conn)
    wall = (time.perf_counter() - t0) * 1e6 / ops
    ticks1 = backend_ticks([pid])
    cpu = ticks_to_us(ticks1 - ticks0) / ops if ticks0 is not None and ticks1 is not None else None
    return round(wall, 1), None if cpu is None else round(cpu, 1)


def server_ms(conn: psycopg.Connection, call: str) -> float:
    times = []
    for i in range(REPEAT + 1):
        conn.execute(TIMED.format(call=call))
        if i:  # the first call is untimed
            times.append(float(conn.execute("SELECT current_setting('bench.ms')").fetchone()[0]))
    return round(statistics.median(times), 2)


def measure(dsn: str, size: int, partitioned: bool, ops: int, interval: int = PARTITION_INTERVAL,
            read_floor: bool = True) -> Row:
    queue = "bench_bigp" if partitioned else "bench_big"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgmq.drop_queue(%s) FROM pgmq.meta WHERE queue_name = %s", (queue, queue))
        if partitioned:
            conn.execute("SELECT pgmq.create_partitioned(%s, %s, %s)",
                         (queue, str(interval), str(interval * 1000)))
        else:
            conn.execute("SELECT pgmq.create(%s)", (queue,))
        t0 = time.monotonic()
        fill(conn, queue, size, partitioned)
        fill_s = round(time.monotonic() - t0, 1)
        if partitioned and not read_floor:  # what the read floor buys: reads as without one
            conn.execute("UPDATE pgmq.queue_settings SET read_floor = NULL, floor_candidate = NULL "
                         "WHERE queue_name = %s", (queue,))
        floor = conn.execute("SELECT read_floor FROM pgmq.queue_settings WHERE queue_name = %s",
                             (queue,)).fetchone()

        def send(c: psycopg.Connection) -> None:
            c.execute("SELECT pgmq.send(%s, %s::jsonb)", (queue, MESSAGE)).fetchall()

        def read_delete(c: psycopg.Connection) -> None:
            (msg_id,) = c.execute("SELECT msg_id FROM pgmq.read(%s, 30, 1)", (queue,)).fetchone()
            c.execute("SELECT pgmq.delete(%s, %s::bigint)", (queue, msg_id)).fetchall()

        def pop(c: psycopg.Connection) -> None:
            c.execute("SELECT * FROM pgmq.pop(%s)", (queue,)).fetchall()

        costs = [per_op(conn, ops, op) for op in (send, read_delete, pop)]
        q = f"'{queue}'"
        qm = server_ms(conn, f"pgmq.queue_metrics({q})")
        m = server_ms(conn, f"pgmq.metrics({q})")
        parts, mb = partitions_and_mb(conn, f"pgmq.q_{queue}")
        conn.execute("SELECT pgmq.drop_queue(%s)", (queue,))
    kind = "plain" if not partitioned else "partitioned" if read_floor else "partitioned, no read floor"
    return Row(kind, size, *[c[0] for c in costs],
               *[c[1] for c in costs], qm, m, mb, fill_s, parts if partitioned else 0, floor and floor[0])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench big",
                                description="send/read/pop/metrics cost on queues of millions of messages")
    p.add_argument("--sizes", default="1000000,10000000", help="queued messages, comma-separated "
                   "(default 1000000,10000000)")
    p.add_argument("--ops", type=int, default=2000, help="calls per operation (default 2000)")
    kinds = p.add_mutually_exclusive_group()
    kinds.add_argument("--no-partitioned", action="store_true", help="plain queues only")
    kinds.add_argument("--no-plain", action="store_true", help="partitioned queues only (needs pg_partman)")
    p.add_argument("--partition-interval", type=int, default=PARTITION_INTERVAL,
                   help=f"msg_ids a partition of the partitioned queue (default {PARTITION_INTERVAL:,})")
    p.add_argument("--no-read-floor", action="store_true",
                   help="measure the partitioned queue with its read floor cleared (reads look at every partition)")
    p.add_argument("--dsn", help="use this server (database pgmq_bench is made again)")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = p.parse_args(argv)
    try:
        args.sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    except ValueError:
        p.error("--sizes takes integers, e.g. 1000000,10000000")
    if not args.sizes or min(args.sizes) < 1000:
        p.error("--sizes needs sizes of at least 1000")
    if args.ops < 1:
        p.error("--ops must be at least 1")
    if args.partition_interval < 1000:
        p.error("--partition-interval needs at least 1000 ids a partition")
    check_dsn(p, args.dsn)
    return args


def run(args: argparse.Namespace, dsn: str, where: str) -> int:
    rows: list[Row] = []
    try:
        ours, how = prepare_database(dsn)
        log(f"ours: {how}")
        with psycopg.connect(ours, autocommit=True) as conn:
            partman = bool(conn.execute("SELECT count(*) FROM pg_available_extensions "
                                        "WHERE name = 'pg_partman'").fetchone()[0])
            if partman and not args.no_partitioned:
                conn.execute("CREATE SCHEMA IF NOT EXISTS partman")
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_partman SCHEMA partman")
        if args.no_plain and not partman:
            log("--no-plain: pg_partman is not installed on this server")
            return 2
        kinds = ([] if args.no_plain else [False]) + ([True] if partman and not args.no_partitioned else [])
        if not partman and not args.no_partitioned:
            log("pg_partman is not installed: plain queues only")
        for size in args.sizes:
            for partitioned in kinds:
                rows.append(measure(ours, size, partitioned, args.ops, args.partition_interval,
                                    read_floor=not args.no_read_floor))
                log(f"{rows[-1]}")
    finally:
        drop_bench_databases(dsn)
    print(f"Big queues, {where}, {args.ops} calls per operation on one connection (µs per call: "
          "client wall / server CPU); metrics: server time, median of 5")
    print()
    print("| queue | queued | send µs | read+delete µs | pop µs | queue_metrics ms | metrics ms | "
          "table + indexes MB | fill s |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        kind = f"{r.kind} ({r.partitions} partitions)" if r.partitions else r.kind
        print(f"| {kind} | {r.size:,} | {r.send_us:,.0f} / {_cpu(r.send_cpu_us)} | "
              f"{r.read_delete_us:,.0f} / {_cpu(r.read_delete_cpu_us)} | {r.pop_us:,.0f} / "
              f"{_cpu(r.pop_cpu_us)} | {r.queue_metrics_ms:,.2f} | {r.metrics_ms:,.1f} | "
              f"{r.table_mb:,.0f} | {r.fill_s:,.0f} |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(r) for r in rows], fh, indent=2)
    return 0


def _cpu(v: float | None) -> str:
    return "?" if v is None else f"{v:,.0f}"


def main(argv: list[str] | None = None) -> int:
    return on_server(parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
