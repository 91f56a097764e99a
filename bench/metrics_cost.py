"""What a metrics scrape costs on a large queue: ``python3 -m bench metrics``
(`make bench-metrics`).

    python3 -m bench metrics [--messages 1000000] [--leased 500] [--repeat 20]
        [--no-upstream] [--dsn DSN] [--json PATH]

One queue of --messages messages (written straight into its table, the same rows for both
systems, then VACUUM ANALYZE as autovacuum would leave it), --leased of them leased by a read, in
our database and in upstream PGMQ's (its SQL from the PyPI package, as `make bench` installs it).
Each function is called --repeat times after two untimed calls; the report gives the median and
the slowest call in milliseconds, measured by the server (clock_timestamp around the call), and
what each call returned, so that an estimate can be compared with the exact count:

- ours ``pgmq.queue_metrics(q)``: every column of the dashboards (exact below ~5 MB, estimated
  from statistics above: README, API overview);
- ours and upstream's ``pgmq.metrics(q)``: upstream's function, a full count.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import asdict, dataclass

import psycopg

from .run import drop_bench_databases, log, on_server, prepare_database, prepare_upstream_database

QUEUE = "bench_metrics"
# One call timed by the server: the caller's round trip and result transfer do not count.
TIMED = """
DO $$
DECLARE t0 timestamptz;
BEGIN
    t0 := clock_timestamp();
    PERFORM * FROM {call};
    PERFORM set_config('bench.ms', (extract(epoch FROM clock_timestamp() - t0) * 1000)::text, false);
END $$"""


@dataclass
class Row:
    system: str
    call: str
    median_ms: float
    max_ms: float
    depth: int  # what the call said the queue holds
    estimated: bool


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench metrics",
                                description="the cost of a metrics call on a large queue")
    p.add_argument("--messages", type=int, default=1_000_000, help="messages in the queue (default 1M)")
    p.add_argument("--leased", type=int, default=500, help="of which leased by a read (default 500)")
    p.add_argument("--repeat", type=int, default=20, help="timed calls per function (default 20)")
    p.add_argument("--no-upstream", action="store_true", help="skip upstream PGMQ")
    p.add_argument("--dsn", help="use this server instead of a throwaway one (databases "
                                 "pgmq_bench and pgmq_bench_upstream are dropped and made again)")
    p.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    args = p.parse_args(argv)
    for name in ("messages", "repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be at least 1")
    if not 0 <= args.leased <= args.messages:
        p.error("--leased must be between 0 and --messages")
    return args


def fill(dsn: str, messages: int, leased: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pgmq.create(%s)", (QUEUE,))
        log(f"writing {messages} messages ...")
        conn.execute(f"INSERT INTO pgmq.q_{QUEUE} (vt, message) SELECT now(), jsonb_build_object("
                     "'order_id', g, 'note', repeat('x', 64)) FROM generate_series(1, %s) g", (messages,))
        conn.execute(f"VACUUM ANALYZE pgmq.q_{QUEUE}")
        if leased:
            conn.execute("SELECT count(*) FROM pgmq.read(%s, 3600, %s)", (QUEUE, leased))


def measure(dsn: str, system: str, call: str, depth_sql: str, repeat: int) -> Row:
    with psycopg.connect(dsn, autocommit=True) as conn:
        times = []
        for i in range(repeat + 2):
            conn.execute(TIMED.format(call=call))
            if i >= 2:
                times.append(float(conn.execute("SELECT current_setting('bench.ms')").fetchone()[0]))
        depth, estimated = conn.execute(depth_sql).fetchone()
    return Row(system, call, round(statistics.median(times), 2), round(max(times), 2), depth, estimated)


def run(args: argparse.Namespace, dsn: str, where: str) -> int:
    try:
        rows = measure_all(args, dsn)
    finally:
        drop_bench_databases(dsn)
    print(f"metrics calls on a queue of {args.messages} messages ({args.leased} leased), {where}, "
          f"{args.repeat} calls each (server time)")
    print(f"{'system':<16} {'call':<36} {'median ms':>10} {'max ms':>8} {'depth':>9}  estimated")
    for r in rows:
        print(f"{r.system:<16} {r.call:<36} {r.median_ms:>10.2f} {r.max_ms:>8.2f} {r.depth:>9}  {r.estimated}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) for r in rows], out, indent=2)
    return 0


def measure_all(args: argparse.Namespace, dsn: str) -> list[Row]:
    ours, how = prepare_database(dsn)
    log(f"ours: {how}")
    fill(ours, args.messages, args.leased)
    q = f"'{QUEUE}'"
    rows = [
        measure(ours, "ours", f"pgmq.queue_metrics({q})",
                f"SELECT depth, estimated FROM pgmq.queue_metrics({q})", args.repeat),
        measure(ours, "ours", f"pgmq.metrics({q})",
                f"SELECT queue_length, false FROM pgmq.metrics({q})", args.repeat),
    ]
    if not args.no_upstream:
        up, version = prepare_upstream_database(dsn)
        log(f"upstream PGMQ {version}")
        fill(up, args.messages, args.leased)
        rows.append(measure(up, f"upstream {version}", f"pgmq.metrics({q})",
                            f"SELECT queue_length, false FROM pgmq.metrics({q})", args.repeat))
    return rows


def main(argv: list[str] | None = None) -> int:
    return on_server(parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
