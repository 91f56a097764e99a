"""Does a partitioned queue's archive stay bounded, and its cost flat, while retention drops the
old partitions? ``python3 -m bench archive`` (`make bench-archive`).

    python3 -m bench archive [--messages 2000000] [--cycle 100000] [--partition 100000]
        [--retention 500000] [--batch 1000] [--dsn DSN] [--json PATH]

One queue made by pgmq.create_partitioned (queue and archive partitioned by msg_id, --partition
ids a partition, partitions older than --retention ids dropped by maintenance). In cycles of
--cycle messages: a producer sends them with send_batch (--batch a call), a consumer reads
--batch at a time and archives what it read, then pgmq.run_partition_maintenance runs, as a
scheduler would between cycles. After each cycle: the server CPU per message of the send and of
the read + archive (each backend's CPU from /proc, 10 ms ticks), the maintenance's wall time, the
archive's and the queue's partitions and their size on disk with indexes. Nothing is asserted:
it reports, and says how the last cycles compare with the first ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass

import psycopg

from .run import check_dsn, drop_bench_databases, log, on_server, prepare_database
from .server import backend_ticks, partitions_and_mb, ticks_to_us
from .workloads import MESSAGE

QUEUE = "bench_retention"


@dataclass
class Cycle:
    n: int  # cycle number, from 1
    archived: int  # messages archived so far
    send_cpu_us: float | None  # server CPU µs per message sent
    consume_cpu_us: float | None  # server CPU µs per message read and archived
    maintenance_ms: float  # wall ms of run_partition_maintenance
    archive_partitions: int
    archive_mb: float  # the archive with its partitions and indexes
    queue_partitions: int
    queue_mb: float


def _cpu_per(pid: int, t0: int | None, messages: int) -> float | None:
    t1 = backend_ticks([pid])
    return None if t0 is None or t1 is None else round(ticks_to_us(t1 - t0) / messages, 1)


def one_cycle(producer: psycopg.Connection, consumer: psycopg.Connection, args: argparse.Namespace,
              n: int, archived: int) -> Cycle:
    batch = [MESSAGE] * args.batch
    t0 = backend_ticks([producer.info.backend_pid])
    for _ in range(args.cycle // args.batch):
        producer.execute("SELECT count(*) FROM pgmq.send_batch(%s, %s::jsonb[])", (QUEUE, batch)).fetchone()
    send_cpu = _cpu_per(producer.info.backend_pid, t0, args.cycle)
    t0 = backend_ticks([consumer.info.backend_pid])
    done = 0
    while done < args.cycle:
        ids = [r[0] for r in consumer.execute("SELECT msg_id FROM pgmq.read(%s, 30, %s)", (QUEUE, args.batch))]
        if not ids:
            raise RuntimeError(f"the queue ran dry after {done:,} of {args.cycle:,} messages of cycle {n}")
        consumer.execute("SELECT count(*) FROM pgmq.archive(%s, %s::bigint[])", (QUEUE, ids)).fetchone()
        done += len(ids)
    consume_cpu = _cpu_per(consumer.info.backend_pid, t0, done)
    t = time.perf_counter()
    consumer.execute("SELECT pgmq.run_partition_maintenance(%s)", (QUEUE,))
    maintenance_ms = round((time.perf_counter() - t) * 1000, 1)
    a_parts, a_mb = partitions_and_mb(consumer, f"pgmq.a_{QUEUE}")
    q_parts, q_mb = partitions_and_mb(consumer, f"pgmq.q_{QUEUE}")
    return Cycle(n, archived + done, send_cpu, consume_cpu, maintenance_ms, a_parts, a_mb, q_parts, q_mb)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench archive",
                                description="archive size and cost of a partitioned queue under retention")
    p.add_argument("--messages", type=int, default=2_000_000, help="messages through the queue (default 2,000,000)")
    p.add_argument("--cycle", type=int, default=100_000, help="messages per cycle (default 100,000)")
    p.add_argument("--partition", type=int, default=100_000, help="ids a partition (default 100,000)")
    p.add_argument("--retention", type=int, default=500_000, help="ids kept before maintenance drops "
                   "a partition (default 500,000)")
    p.add_argument("--batch", type=int, default=1000, help="messages a send_batch, a read (default 1000)")
    p.add_argument("--dsn", help="use this server (database pgmq_bench is made again)")
    p.add_argument("--json", metavar="PATH", help="also write the cycles as JSON")
    args = p.parse_args(argv)
    if min(args.batch, args.partition, args.retention) < 1:
        p.error("--batch, --partition and --retention must be at least 1")
    if args.cycle < args.batch or args.cycle % args.batch:
        p.error("--cycle must be a multiple of --batch")
    if args.messages < args.cycle:
        p.error("--messages must be at least one --cycle")
    check_dsn(p, args.dsn)
    return args


def run(args: argparse.Namespace, dsn: str, where: str) -> int:
    cycles: list[Cycle] = []
    try:
        ours, how = prepare_database(dsn)
        log(f"ours: {how}")
        with psycopg.connect(ours, autocommit=True) as producer, psycopg.connect(ours, autocommit=True) as consumer:
            if not producer.execute("SELECT count(*) FROM pg_available_extensions "
                                    "WHERE name = 'pg_partman'").fetchone()[0]:
                log("pg_partman is not installed: nothing to measure")
                return 1
            producer.execute("CREATE SCHEMA IF NOT EXISTS partman")
            producer.execute("CREATE EXTENSION IF NOT EXISTS pg_partman SCHEMA partman")
            producer.execute("SELECT pgmq.create_partitioned(%s, %s, %s)",
                             (QUEUE, str(args.partition), str(args.retention)))
            for n in range(1, args.messages // args.cycle + 1):
                cycles.append(one_cycle(producer, consumer, args, n, cycles[-1].archived if cycles else 0))
                c = cycles[-1]
                log(f"cycle {n}: {c.archived:,} archived; archive {c.archive_partitions} partitions, "
                    f"{c.archive_mb:,} MB; consume {c.consume_cpu_us} µs/msg")
    finally:
        drop_bench_databases(dsn)
    report(args, cycles, where)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump([asdict(c) for c in cycles], fh, indent=2)
    return 0


def report(args: argparse.Namespace, cycles: list[Cycle], where: str) -> None:
    print(f"Archive under retention, {where}: {args.partition:,} ids a partition, retention "
          f"{args.retention:,} ids, {args.cycle:,} messages a cycle (send_batch / read + archive of "
          f"{args.batch:,}), maintenance after each cycle")
    print()
    print("| cycle | archived | send µs/msg | read+archive µs/msg | maintenance ms | archive partitions | "
          "archive MB | queue partitions | queue MB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in cycles:
        print(f"| {c.n} | {c.archived:,} | {_num(c.send_cpu_us)} | {_num(c.consume_cpu_us)} | "
              f"{c.maintenance_ms:,.0f} | {c.archive_partitions} | {c.archive_mb:,.1f} | "
              f"{c.queue_partitions} | {c.queue_mb:,.1f} |")
    print()
    print(summary(cycles))


def summary(cycles: list[Cycle]) -> str:
    """How the last third of the cycles compares with the first third (after the first cycle,
    which warms caches and plans)."""
    steady = cycles[1:] or cycles
    k = max(1, len(steady) // 3)
    first, last = steady[:k], steady[-k:]

    def mean(rows: list[Cycle], field: str) -> float | None:
        vals = [getattr(r, field) for r in rows if getattr(r, field) is not None]
        return sum(vals) / len(vals) if vals else None

    parts = [f"archive: at most {max(c.archive_mb for c in cycles):,.1f} MB in "
             f"{max(c.archive_partitions for c in cycles)} partitions over {cycles[-1].archived:,} archived"]
    for field, what in (("consume_cpu_us", "read + archive"), ("send_cpu_us", "send")):
        a, b = mean(first, field), mean(last, field)
        if a and b:
            parts.append(f"{what} {a:,.1f} -> {b:,.1f} µs/msg ({(b - a) / a:+.0%}, first vs last {k} cycles)")
    return "; ".join(parts)


def _num(v: float | None) -> str:
    return "?" if v is None else f"{v:,.1f}"


def main(argv: list[str] | None = None) -> int:
    return on_server(parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
