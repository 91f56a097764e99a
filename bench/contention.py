"""Many consumers on one full queue: ``python3 -m bench contention``
(`make bench-contention`).

    python3 -m bench contention [--consumers 1,4,16,64,256] [--seconds 10]
        [--series raw,upstream_read_delete,...] [--prefill 200000] [--dsn DSN]
        [--out contention.md] [--plot contention.png] [--json contention.json]

Each point is one series at one consumer count: pgbench (PostgreSQL's, prepared statements,
autocommit: every statement its own transaction) runs that many connections for --seconds on a
queue prefilled with --prefill messages and topped up while it runs by a refiller of its own
(so it never drains during a point: the head of the queue is where consumers meet). pgbench,
not Python threads: at 256 connections a Python client would measure its GIL.

Per point: messages/s and the p99 (and p50) latency of a transaction, from pgbench's
per-transaction log, counted over a window of --seconds that opens when every consumer's
backend is connected (pgbench runs a few seconds longer); server CPU per message, utime + stime
of those backends over the same window (server.py, as the main bench measures it). A
read_delete transaction is two statements (read, then delete of the id it got): its latency is
both. Series: raw (DELETE ... LIMIT 1 FOR UPDATE SKIP LOCKED on a plain table), upstream PGMQ's
and ours' read + delete and pop, and ours' read_unordered + delete (no msg_id order).

Without --dsn a throwaway server is started with max_connections above the largest consumer
count and fsync on (the durability a real queue runs with; the issue's table was made so;
--fsync off takes a busy disk out of the figures).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass

import psycopg

from pgmq_build.cluster import pg_bindir

from .contention_report import Point, markdown, plot
from .run import (
    CLUSTER_SETTINGS,
    check_dsn,
    drop_bench_databases,
    log,
    on_server,
    prepare_database,
    prepare_upstream_database,
)
from .server import backend_ticks, ticks_to_us
from .workloads import (
    MESSAGE,
    PGMQ,
    PGMQ_TABLE,
    QUEUE,
    RAW,
    RAW_CONSUME_ONE,
    RAW_TABLE,
    fill_queue,
    reset_queue,
)

APP = "pgmq_contention"  # application_name of pgbench's connections: how their backends are found
CONSUMERS = (1, 4, 16, 64, 256)
READ_DELETE = (f"SELECT msg_id FROM pgmq.read('{QUEUE}', 30, 1) \\gset\n"
               f"SELECT pgmq.delete('{QUEUE}', :msg_id::bigint);\n")
POP = f"SELECT msg_id FROM pgmq.pop('{QUEUE}');\n"
# ours for consumers that need no msg_id order: the visible messages in vt order
READ_UNORDERED_DELETE = READ_DELETE.replace("pgmq.read(", "pgmq.read_unordered(")


@dataclass(frozen=True)
class Series:
    name: str
    system: str  # "ours" or "upstream": the database it runs in (raw lives in ours')
    side: str  # workloads' side: RAW (plain table) or PGMQ
    script: str  # pgbench script: one transaction consumes one message


SERIES = (
    Series("raw", "ours", RAW, RAW_CONSUME_ONE + ";\n"),
    Series("upstream read+delete", "upstream", PGMQ, READ_DELETE),
    Series("ours read+delete", "ours", PGMQ, READ_DELETE),
    Series("ours read_unordered+delete", "ours", PGMQ, READ_UNORDERED_DELETE),
    Series("upstream pop", "upstream", PGMQ, POP),
    Series("ours pop", "ours", PGMQ, POP),
)
SLUG = {s.name: s.name.replace("+", "_").replace(" ", "_") for s in SERIES}
# pgbench runs this much longer than the window: its clients connect before its clock starts
# on some versions, after on others; the window must close while all of them still run
RUN_MARGIN = 3
# pgbench's threads: on a busy machine a few threads serving 64 connections each are starved
# of CPU by the 256 backends they drive, and the figures measure pgbench
PGBENCH_THREADS = 16
# seconds between the refiller's looks at a queue it found full enough: one consumer on an idle
# machine takes ~10k messages a second, four with fsync off ~20k (and a read + delete on an
# empty queue aborts its pgbench client); below its mark it refills without waiting
REFILL_EVERY = 0.05
WAIT_SAMPLE_EVERY = 0.1  # seconds between samples of the consumers' wait events
# A consumer's state in one sample: its wait event, "CPU" when running a statement without one,
# "idle" between statements (client round trip, pgbench itself).
WAITS = """SELECT CASE WHEN state <> 'active' THEN 'idle'
                   WHEN wait_event IS NULL THEN 'CPU'
                   ELSE wait_event_type || ':' || wait_event END
            FROM pg_stat_activity WHERE application_name = %s"""


# --- keeping the queue full ----------------------------------------------------------------------

class Refiller(threading.Thread):
    """Tops the queue up by `chunk` messages whenever fewer than `low` are left, on a connection
    of its own (not metered). The depth is max(msg_id) - min(msg_id): two index probes, not a
    count (msg_ids come from one sequence, in the order the refills sent them)."""

    def __init__(self, dsn: str, side: str, low: int, chunk: int) -> None:
        super().__init__(daemon=True)
        self.dsn, self.side, self.low, self.chunk = dsn, side, low, chunk
        self.stop = threading.Event()
        self.sent = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        table = PGMQ_TABLE if self.side == PGMQ else RAW_TABLE
        try:
            with psycopg.connect(self.dsn, autocommit=True) as conn:
                while not self.stop.is_set():
                    lo, hi = conn.execute(f"SELECT min(msg_id), max(msg_id) FROM {table}").fetchone()
                    if lo is None or hi - lo < self.low:
                        # and look again at once: a few fast consumers (fsync off) drain a chunk
                        # of a small queue in less than a tick
                        self._send(conn)
                        continue
                    self.stop.wait(REFILL_EVERY)
        except BaseException as exc:  # reported by the point that started it
            self.error = exc

    def _send(self, conn: psycopg.Connection) -> None:
        if self.side == PGMQ:
            conn.execute("SELECT count(*) FROM pgmq.send_batch(%s, "
                         "ARRAY(SELECT %s::jsonb FROM generate_series(1, %s)))",
                         (QUEUE, MESSAGE, self.chunk))
        else:
            conn.execute(f"INSERT INTO {RAW_TABLE} (vt, message) "
                         "SELECT clock_timestamp(), %s::jsonb FROM generate_series(1, %s)",
                         (MESSAGE, self.chunk))
        self.sent += self.chunk


# --- one point -----------------------------------------------------------------------------------

class Window(threading.Thread):
    """Opens when all `n` consumers' backends are connected (ticks of their CPU then), closes
    `seconds` later (ticks again); the points' messages are counted between the two times."""

    def __init__(self, dsn: str, n: int, seconds: float, timeout: float) -> None:
        super().__init__(daemon=True)
        self.dsn, self.n, self.seconds, self.timeout = dsn, n, seconds, timeout
        self.t0 = self.t1 = 0.0
        self.cpu_us: float | None = None
        self.waits: dict[str, int] = {}  # wait event (or "CPU") -> samples

    def run(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            deadline = time.monotonic() + self.timeout
            pids: list[int] = []
            seen: list[int] = []
            # the same n backends twice in a row: pgbench's first connection (a check it makes
            # before its clients connect) has gone by then
            while time.monotonic() < deadline:
                pids = sorted(r[0] for r in conn.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s", (APP,)))
                if len(pids) == self.n and pids == seen:
                    break
                seen = pids
                time.sleep(0.05)
            if len(pids) != self.n or pids != seen:
                return  # pgbench never got its connections: it reports why
            before = backend_ticks(pids)
            self.t0 = time.time()
            end = time.monotonic() + self.seconds
            while time.monotonic() < end:  # what the consumers' backends are doing, sampled
                for (what,) in conn.execute(WAITS, (APP,)):
                    self.waits[what] = self.waits.get(what, 0) + 1
                time.sleep(min(WAIT_SAMPLE_EVERY, max(0.0, end - time.monotonic())))
            after = backend_ticks(pids)
            self.t1 = time.time()
            if before is not None and after is not None:
                self.cpu_us = ticks_to_us(after - before)


def pgbench(dsn: str, script: str, n: int, seconds: float, workdir: str) -> subprocess.Popen:
    path = os.path.join(workdir, "script.sql")
    with open(path, "w") as fh:
        fh.write(script)
    args = [str(pg_bindir() / "pgbench"), "-n", "-M", "prepared", "-c", str(n),
            "-j", str(min(n, PGBENCH_THREADS)), "-T", str(round(seconds)), "-f", path, "-l",
            "--log-prefix", os.path.join(workdir, "tx"), dsn]
    return subprocess.Popen(args, env=dict(os.environ, PGAPPNAME=APP), cwd=workdir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def read_log(workdir: str, t0: float, t1: float) -> tuple[list[float], int]:
    """(latencies in ms of the transactions that ended in [t0, t1], how many of them failed),
    from pgbench's per-transaction log: client, transaction, latency (µs, or a failure's
    name), script, end time (s), end time (µs)."""
    latencies: list[float] = []
    failed = 0
    for name in glob.glob(os.path.join(workdir, "tx.*")):
        with open(name) as fh:
            for line in fh:
                f = line.split()
                if len(f) < 6:
                    continue
                end = int(f[4]) + int(f[5]) / 1e6
                if not t0 <= end <= t1:
                    continue
                if f[2].isdigit():
                    latencies.append(int(f[2]) / 1000)
                else:
                    failed += 1
    return latencies, failed


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def run_point(series: Series, dsn: str, admin: psycopg.Connection, n: int, seconds: float,
              prefill: int) -> Point:
    reset_queue(admin, series.side)
    fill_queue(admin, series.side, prefill)
    admin.execute("CHECKPOINT")
    refiller = Refiller(dsn, series.side, low=prefill // 2, chunk=prefill // 2)
    refiller.start()
    window = Window(dsn, n, seconds, timeout=30 + n * 0.2)
    with tempfile.TemporaryDirectory(prefix="pgmq-contention-") as workdir:
        os.chmod(workdir, 0o755)
        proc = pgbench(dsn, series.script, n, seconds + RUN_MARGIN, workdir)
        window.start()
        out, err = proc.communicate()
        window.join()
        refiller.stop.set()
        refiller.join()
        if refiller.error is not None:  # first: the queue it left empty fails pgbench too
            raise RuntimeError(f"the refiller failed: {refiller.error}")
        if proc.returncode != 0 or "aborted" in err:
            raise RuntimeError(f"pgbench ({series.name}, {n} consumers) failed "
                               f"({proc.returncode}): {(err or out).strip()[-600:]}")
        if not window.t1:
            raise RuntimeError(f"{n} consumers' backends were never all seen in pg_stat_activity")
        latencies, failed = read_log(workdir, window.t0, window.t1)
    msgs = len(latencies)
    return Point(series.name, n, msgs, round(window.t1 - window.t0, 3),
                 None if window.cpu_us is None or not msgs else round(window.cpu_us / msgs, 1),
                 round(percentile(latencies, 0.99), 2),
                 round(statistics.median(latencies), 2) if latencies else 0.0, failed,
                 waits=dict(sorted(window.waits.items(), key=lambda kv: -kv[1])))


# --- the sweep -----------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench contention",
                                description="many consumers on one full queue (pgbench)")
    p.add_argument("--consumers", default=",".join(map(str, CONSUMERS)),
                   help="consumer counts, comma-separated (default 1,4,16,64,256)")
    p.add_argument("--seconds", type=float, default=10.0, help="seconds per point (default 10)")
    p.add_argument("--series", help="comma-separated series (default all): "
                   + ", ".join(SLUG.values()))
    p.add_argument("--prefill", type=int, default=200_000,
                   help="messages queued at the start of a point, topped up to stay above half "
                   "of it (default 200000)")
    p.add_argument("--fsync", choices=("on", "off"), default="on",
                   help="the throwaway server's fsync (default on, as a real queue runs; off "
                   "takes the disk out of the figures)")
    p.add_argument("--dsn", help="use this server (max_connections must exceed the largest "
                   "consumer count; databases pgmq_bench and pgmq_bench_upstream are made again)")
    p.add_argument("--out", metavar="PATH", help="also write the Markdown tables here")
    p.add_argument("--plot", metavar="PATH", help="write the PNG plot here")
    p.add_argument("--json", metavar="PATH", help="also write the points as JSON")
    args = p.parse_args(argv)
    try:
        args.consumers = sorted({int(x) for x in args.consumers.split(",") if x.strip()})
    except ValueError:
        p.error("--consumers takes integers, e.g. 1,4,16")
    if not args.consumers or args.consumers[0] < 1:
        p.error("--consumers needs at least one positive integer")
    if not args.seconds >= 2:
        p.error(f"--seconds must be at least 2 (got {args.seconds})")
    if args.prefill < 1000:
        p.error(f"--prefill must be at least 1000 (got {args.prefill})")
    by_slug = {slug: s for s in SERIES for slug in (SLUG[s.name],)}
    names = [x.strip() for x in (args.series or "").split(",") if x.strip()]
    unknown = [x for x in names if x not in by_slug]
    if unknown:
        p.error(f"unknown series {', '.join(unknown)}; available: {', '.join(by_slug)}")
    args.series = [by_slug[x] for x in names] if names else list(SERIES)
    check_dsn(p, args.dsn)
    return args


def run(args: argparse.Namespace, dsn: str, where: str) -> int:
    t_start = time.monotonic()
    dsns = {"ours": prepare_database(dsn)[0]}
    upstream_version = None
    if any(s.system == "upstream" for s in args.series):
        dsns["upstream"], upstream_version = prepare_upstream_database(dsn)
    points: list[Point] = []
    try:
        with psycopg.connect(dsns["ours"], autocommit=True) as admin:
            settings = {k: admin.execute(f"SHOW {k}").fetchone()[0] for k in
                        ("server_version", "max_connections", "fsync", "synchronous_commit")}
            ours_version = admin.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'").fetchone()[0]
        if int(settings["max_connections"]) < max(args.consumers) + 5:
            raise SystemExit(f"max_connections is {settings['max_connections']}: the sweep needs "
                             f"{max(args.consumers) + 5} or more")
        total = len(args.series) * len(args.consumers)
        for n in args.consumers:  # consumer count outermost: a point's neighbours share the load
            for s in args.series:
                with psycopg.connect(dsns[s.system], autocommit=True) as admin:
                    point = run_point(s, dsns[s.system], admin, n, args.seconds, args.prefill)
                points.append(point)
                log(f"[{len(points)}/{total}] {s.name} x{n}: {point.rate:,.0f} msgs/s, "
                    f"{point.cpu_us_per_msg} µs CPU/msg, p99 {point.p99_ms} ms")
    finally:
        drop_bench_databases(dsn)
    header = (f"Contention sweep | PostgreSQL {settings['server_version']}, {where}, "
              f"fsync={settings['fsync']}, synchronous_commit={settings['synchronous_commit']}, "
              f"max_connections={settings['max_connections']} | ours: pgmq {ours_version}"
              + (f" | upstream: PGMQ {upstream_version}" if upstream_version else "")
              + f" | pgbench -M prepared, {args.seconds:g} s per point, queue kept at "
              f">= {args.prefill // 2:,} messages | {os.cpu_count()} CPUs, "
              f"load average {os.getloadavg()[0]:.1f} at the end")
    text = markdown(points, header)
    print(text)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
    if args.plot:
        plot(points, args.plot, header.split(" | ")[0] + f", {where}, pgmq {ours_version}")
        log(f"wrote {args.plot}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"settings": settings, "pgmq_version": ours_version,
                       "upstream_version": upstream_version, "seconds": args.seconds,
                       "prefill": args.prefill, "where": where,
                       "points": [p.as_dict() for p in points]}, fh, indent=2)
    log(f"done in {time.monotonic() - t_start:.0f} s")
    return 0


def cluster_settings(consumers: list[int], fsync: str = "on") -> dict[str, str]:
    return {**CLUSTER_SETTINGS, "fsync": fsync,
            "max_connections": str(max(100, max(consumers) + 20))}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return on_server(args, run, settings=cluster_settings(args.consumers, args.fsync))


if __name__ == "__main__":
    sys.exit(main())
