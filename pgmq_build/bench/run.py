"""The benchmark behind `make bench`: pgmq's SQL API against plain SQL on a table of the same shape.

    python3 -m pgmq_build.bench [--seconds 3] [--clients 1,4] [--only send,pop] [--json out.json]
                                [--dsn DSN] [--rounds 2] [--mode thread|process]
                                [--spark-rows 200000]

Each cell (workload x client count) measures both sides for --seconds each, split into --rounds
alternating segments (raw, pgmq, pgmq, raw, ...) so that drift on a noisy machine hits both sides
alike. Every segment starts from a fresh queue (recreated, prefilled when the workload consumes,
VACUUM ANALYZE, CHECKPOINT), with new client connections: one autocommit psycopg connection per
client, each driven by its own thread (default) or process. Throughput is messages handled / wall
time from the first client's start to the last client's finish. Nothing is asserted: it reports.

A workload marked optional (a pgmq feature the build under test may lack: FIFO, topics) that
fails with an error from the server (one with a SQLSTATE: a missing function, a bug in the
feature) is reported as an "(unavailable: <error>)" row, its other cells skipped, and the run
goes on. Any other failure (a non-optional workload, a client-side error) stops the run.

Consuming workloads are prefilled per segment with 2x what the faster side consumed per second
in a 0.3 s warm-up, times the segment length (plus slack); a segment that still runs dry is
re-run with 3x the prefill, and marked "(dry!)" if it runs dry again.

Threads, not processes, by default: on the 2-core machine this was written on, the client side
used at most ~0.9 cores (send x4) and --mode process was no faster (the clients share the cores
with the server, and the GIL is released while libpq waits). Each cell's client CPU (cores) is
logged and stored in the JSON, so this can be rechecked on a bigger machine.

Without --dsn it starts a throwaway PostgreSQL (pgmq_build.cluster.TempCluster, which runs the
server as an unprivileged user when we are root) and copies the extension files into the
server's sharedir when that is writable. Either way the run uses a fresh database `pgmq_bench`
(dropped and recreated) with CREATE EXTENSION pgmq (or the standalone script as a fallback).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import psycopg
from psycopg import conninfo

from ..cluster import TempCluster
from ..install import InstallError, ensure_pgmq, install_files, sharedir
from .workloads import BY_NAME, PGMQ, RAW, WORKLOADS, Workload

BENCH_DB = "pgmq_bench"
WARMUP_SECONDS = 0.3  # the rate estimate that sizes a consuming cell's prefill
WARM_OPS = 10  # untimed ops per client per segment, before the clients start together
PREFILL_MARGIN = 2.0  # prefill = margin x (faster side's warm-up rate) x segment length + slack
PREFILL_MAX = 5_000_000
# The throwaway server: no checkpoint should start inside a measured segment on its own (we issue
# one before each segment, so every segment starts from the same state).
CLUSTER_SETTINGS = {"max_wal_size": "8GB", "checkpoint_timeout": "1h"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --- one client ----------------------------------------------------------------------------------

@dataclass
class ClientResult:
    msgs: int
    ops: int
    dry_ops: int
    t_start: float  # time.monotonic(): CLOCK_MONOTONIC, comparable across processes on Linux
    t_end: float
    cpu: float = 0.0  # client CPU seconds (process mode: this client's process)


def drive(workload: Workload, side: str, cur: psycopg.Cursor, seconds: float,
          stop_when_dry: bool, wait_start: Callable[[], object]) -> ClientResult:
    """A few untimed ops (the new backend compiles pgmq's functions and psycopg prepares the
    statements), wait for the other clients, then run the op back to back for `seconds` (the
    last op finishes past the deadline)."""
    op = workload.op(side)
    for _ in range(WARM_OPS):
        op(cur)
    wait_start()
    msgs = ops = dry = 0
    t_start = time.monotonic()
    deadline = t_start + seconds
    while True:
        n = op(cur)
        ops += 1
        msgs += n
        if n == 0:
            dry += 1
            if stop_when_dry:
                break
        if time.monotonic() >= deadline:
            break
    return ClientResult(msgs, ops, dry, t_start, time.monotonic())


def _connect(dsn: str) -> psycopg.Connection:
    # Default prepare_threshold (5) on purpose: both sides get psycopg's auto-prepare alike.
    return psycopg.connect(dsn, autocommit=True)


# --- many clients: threads or processes ----------------------------------------------------------

class ThreadClients:
    """One thread and one connection per client, all released together by a barrier."""

    name = "thread"

    def __init__(self, dsn: str, max_clients: int) -> None:
        self.dsn = dsn

    def run(self, workload: Workload, side: str, clients: int, seconds: float,
            stop_when_dry: bool) -> list[ClientResult]:
        conns = [_connect(self.dsn) for _ in range(clients)]
        cpu0 = [0.0]
        # The barrier's action runs once, as the clients are released: CPU counts from there.
        barrier = threading.Barrier(clients, action=lambda: cpu0.__setitem__(0, time.process_time()))
        results: list[ClientResult | None] = [None] * clients
        errors: list[BaseException] = []

        def client(i: int) -> None:
            try:
                results[i] = drive(workload, side, conns[i].cursor(), seconds, stop_when_dry,
                                   barrier.wait)
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
                barrier.abort()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cpu = time.process_time() - cpu0[0]  # the whole process: all client threads
        finally:
            for c in conns:
                c.close()
        if errors:  # the real failure, not the BrokenBarrierError it caused in the others
            errors.sort(key=lambda e: isinstance(e, threading.BrokenBarrierError))
            raise errors[0]
        done = [r for r in results if r is not None]
        done[0].cpu = cpu
        return done

    def close(self) -> None:
        pass


class _Aborted(Exception):
    """Another client of the segment failed before the start."""


def _process_main(pipe) -> None:  # a worker process: runs jobs until told to stop
    while True:
        job = pipe.recv()
        if job is None:
            return
        dsn, name, side, seconds, stop_when_dry = job
        try:
            with _connect(dsn) as conn:
                cpu0 = 0.0

                def wait_start() -> None:
                    nonlocal cpu0
                    pipe.send("ready")
                    if pipe.recv() != "go":
                        raise _Aborted
                    cpu0 = time.process_time()

                result = drive(BY_NAME[name], side, conn.cursor(), seconds, stop_when_dry,
                               wait_start)
                result.cpu = time.process_time() - cpu0
                pipe.send(result)
        except _Aborted:
            pass
        except psycopg.Error as exc:
            if exc.sqlstate:  # the server's error: picklable, SQLSTATE and all
                pipe.send(exc)
            else:
                pipe.send(RuntimeError(f"client process: {type(exc).__name__}: {exc}"))
        except Exception as exc:
            pipe.send(RuntimeError(f"client process: {type(exc).__name__}: {exc}"))


class ProcessClients:
    """A pool of persistent worker processes (spawned once); each job opens fresh connections."""

    name = "process"

    def __init__(self, dsn: str, max_clients: int) -> None:
        self.dsn = dsn
        ctx = mp.get_context("spawn")  # no inherited libpq sockets from the parent
        self.pipes = []
        self.procs = []
        for _ in range(max_clients):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_process_main, args=(child,), daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)

    def run(self, workload: Workload, side: str, clients: int, seconds: float,
            stop_when_dry: bool) -> list[ClientResult]:
        pipes = self.pipes[:clients]
        for p in pipes:
            p.send((self.dsn, workload.name, side, seconds, stop_when_dry))
        replies = [p.recv() for p in pipes]  # "ready" (connected, warmed up) or an exception
        failed = [r for r in replies if isinstance(r, Exception)]
        if failed:
            for p, r in zip(pipes, replies, strict=True):
                if r == "ready":
                    p.send("abort")
            raise failed[0]
        for p in pipes:
            p.send("go")
        results = [p.recv() for p in pipes]  # all of them, so that no reply is left in a pipe
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise failed[0]
        return results

    def close(self) -> None:
        for pipe, proc in zip(self.pipes, self.procs, strict=True):
            try:
                pipe.send(None)
            except OSError:
                pass
            proc.join(timeout=5)


# --- cells ---------------------------------------------------------------------------------------

@dataclass
class Segment:
    side: str
    round: int
    prefill: int
    msgs: int
    ops: int
    dry_ops: int
    elapsed: float
    rate: float
    client_cpu: float  # cores the client side kept busy (thread mode: bounded by the GIL at ~1)


@dataclass
class Cell:
    workload: str
    clients: int
    prefill: int = 0
    segments: list[Segment] = field(default_factory=list)
    unavailable: str | None = None  # an optional workload that failed: why

    def rate(self, side: str) -> float:
        segs = [s for s in self.segments if s.side == side]
        elapsed = sum(s.elapsed for s in segs)
        return sum(s.msgs for s in segs) / elapsed if elapsed else 0.0

    def client_cpu(self) -> float:
        return max((s.client_cpu for s in self.segments), default=0.0)

    def dry(self, side: str) -> int:
        return sum(s.dry_ops for s in self.segments if s.side == side)


@dataclass
class Totals:
    msgs: int
    ops: int
    dry_ops: int
    elapsed: float
    client_cpu: float  # client CPU seconds / elapsed: how many cores the clients kept busy

    @classmethod
    def of(cls, results: list[ClientResult]) -> Totals:
        elapsed = max(r.t_end for r in results) - min(r.t_start for r in results)
        return cls(sum(r.msgs for r in results), sum(r.ops for r in results),
                   sum(r.dry_ops for r in results), elapsed,
                   sum(r.cpu for r in results) / elapsed if elapsed > 0 else 0.0)


class Bench:
    def __init__(self, admin: psycopg.Connection, clients_impl, seconds: float, rounds: int):
        self.admin = admin
        self.clients = clients_impl
        self.seconds = seconds
        self.rounds = rounds
        self.can_checkpoint = True

    def prepare(self, workload: Workload, side: str, prefill: int) -> None:
        workload.reset(self.admin, side)
        if prefill:
            workload.fill(self.admin, side, prefill)
        if self.can_checkpoint:
            try:
                self.admin.execute("CHECKPOINT")
            except psycopg.Error as exc:
                self.can_checkpoint = False
                log(f"  (no CHECKPOINT before segments: {str(exc).strip()})")

    def warmup_rate(self, workload: Workload, side: str, clients: int) -> float:
        """Messages/s of a short run on a small prefill, stopping early if it runs dry."""
        n = min(1000 * workload.msgs_per_op, 50_000) * clients
        self.prepare(workload, side, n)
        t = Totals.of(self.clients.run(workload, side, clients, WARMUP_SECONDS, stop_when_dry=True))
        return t.msgs / t.elapsed if t.elapsed > 0 else 0.0

    def run_cell(self, workload: Workload, clients: int, label: str) -> Cell:
        cell = Cell(workload.name, clients)
        seg_seconds = self.seconds / self.rounds
        if workload.consumes:
            rates = {side: self.warmup_rate(workload, side, clients) for side in (RAW, PGMQ)}
            slack = (WARM_OPS + 20) * clients * workload.msgs_per_op
            cell.prefill = min(PREFILL_MAX, slack + math.ceil(
                PREFILL_MARGIN * max(rates.values()) * seg_seconds))
            log(f"{label}: warm-up {rates[RAW]:,.0f} raw / {rates[PGMQ]:,.0f} pgmq msgs/s -> "
                f"prefill {cell.prefill:,} messages per segment")
        for rnd in range(self.rounds):
            order = (RAW, PGMQ) if rnd % 2 == 0 else (PGMQ, RAW)  # ABBA: cancels linear drift
            for side in order:
                prefill = cell.prefill
                for attempt in range(3):
                    log(f"{label}: round {rnd + 1}/{self.rounds} {side}"
                        + (f" (prefill {prefill:,})" if prefill else ""))
                    self.prepare(workload, side, prefill)
                    t = Totals.of(
                        self.clients.run(workload, side, clients, seg_seconds, stop_when_dry=False))
                    if not (workload.consumes and t.dry_ops and attempt < 2 and prefill < PREFILL_MAX):
                        break
                    prefill = cell.prefill = min(PREFILL_MAX, prefill * 3)  # and from now on
                    log(f"{label}:   ran dry after {t.msgs:,} messages; again with more")
                cell.segments.append(Segment(
                    side, rnd + 1, prefill, t.msgs, t.ops, t.dry_ops, round(t.elapsed, 4),
                    round(t.msgs / t.elapsed, 1) if t.elapsed else 0.0, round(t.client_cpu, 3)))
        return cell


# --- set-up and report ---------------------------------------------------------------------------

def prepare_database(dsn: str) -> tuple[str, str]:
    """(Re)create the bench database with pgmq in it; returns (its DSN, how pgmq got there)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
        conn.execute(f"CREATE DATABASE {BENCH_DB}")
    bench_dsn = conninfo.make_conninfo(dsn, dbname=BENCH_DB)
    with psycopg.connect(bench_dsn, autocommit=True) as conn:
        how = ensure_pgmq(conn)
        # The new database's catalogs (CREATE EXTENSION just wrote many rows): vacuumed now, so
        # autovacuum has no reason to visit them during the first cells.
        conn.execute("VACUUM ANALYZE")
    return bench_dsn, how


def maybe_install_files() -> str:
    try:
        dest = sharedir() / "extension"
    except InstallError as exc:
        return f"extension files not copied ({exc})"
    if not os.access(dest, os.W_OK):
        return f"extension files not copied ({dest} is not writable)"
    install_files()
    return f"extension files copied to {dest}"


def format_table(cells: list[Cell]) -> str:
    head = ("workload", "clients", "pgmq msgs/s", "raw msgs/s", "ratio (pgmq/raw)")
    rows: list[tuple[str, ...]] = []
    for c in cells:
        if c.unavailable:  # its reason spans the rate columns
            rows.append((c.workload, str(c.clients), f"(unavailable: {c.unavailable})"))
            continue
        pg, raw = c.rate(PGMQ), c.rate(RAW)
        mark = {side: " (dry!)" if c.dry(side) else "" for side in (PGMQ, RAW)}
        rows.append((c.workload, str(c.clients), f"{pg:,.0f}{mark[PGMQ]}", f"{raw:,.0f}{mark[RAW]}",
                     f"{pg / raw:.2f}" if raw else "-"))
    widths = [max(len(r[i]) for r in [head, *rows] if len(r) == len(head) or i < 2)
              for i in range(len(head))]
    align = ["<", ">", ">", ">", ">"]

    def line(r):
        return " | ".join(f"{v:{a}{w}}" for v, a, w in zip(r, align, widths, strict=False))

    return "\n".join([line(head), "-+-".join("-" * w for w in widths), *map(line, rows)])


def short_error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    msg = lines[0] if lines else type(exc).__name__
    return msg if len(msg) <= 160 else msg[:157] + "..."


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m pgmq_build.bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--dsn", help="use this server instead of a throwaway one (the database "
                   f"{BENCH_DB} is created there, replacing any old one, and dropped at the end)")
    p.add_argument("--seconds", type=float, default=3.0,
                   help="measured seconds per side per cell (default 3)")
    p.add_argument("--rounds", type=int, default=2,
                   help="alternating segments the seconds are split into (default 2: raw, pgmq, pgmq, raw)")
    p.add_argument("--clients", default="1,4", help="client counts, comma-separated (default 1,4)")
    p.add_argument("--only", help="comma-separated workload names; available: "
                   + ", ".join(w.name for w in WORKLOADS))
    p.add_argument("--mode", choices=("thread", "process"), default="thread",
                   help="how clients run: threads (default) or processes")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--spark-rows", type=int, default=200_000,
                   help="rows for the Spark publish/consume cells (0 skips them; default 200000)")
    args = p.parse_args(argv)
    try:
        args.clients = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        p.error("--clients takes integers, e.g. 1,4")
    if not args.clients or min(args.clients) < 1:
        p.error("--clients needs at least one positive integer")
    if args.seconds <= 0 or args.rounds < 1:
        p.error("--seconds must be positive and --rounds at least 1")
    names = [n.strip() for n in (args.only or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; available: "
                + ", ".join(w.name for w in WORKLOADS))
    args.workloads = [BY_NAME[n] for n in names] if names else list(WORKLOADS)
    return args


def run(args: argparse.Namespace, dsn: str, server: str) -> int:
    t0 = time.monotonic()
    bench_dsn, how = prepare_database(dsn)
    log(f"pgmq in {BENCH_DB}: {how}")
    clients_impl = (ProcessClients if args.mode == "process" else ThreadClients)(
        bench_dsn, max(args.clients))
    cells: list[Cell] = []
    try:
        with psycopg.connect(bench_dsn, autocommit=True) as admin:
            version = admin.execute("SHOW server_version").fetchone()[0]
            ext = admin.execute(
                "SELECT extversion FROM pg_extension WHERE extname = 'pgmq'").fetchone()
            bench = Bench(admin, clients_impl, args.seconds, args.rounds)
            total = len(args.workloads) * len(args.clients)
            for w in args.workloads:
                unavailable = None
                for n in args.clients:
                    label = f"[{len(cells) + 1}/{total}] {w.name} x{n}"
                    if unavailable is None:
                        try:
                            c = bench.run_cell(w, n, label)
                        except psycopg.Error as exc:
                            if not (w.optional and exc.sqlstate):  # client-side: a bench bug
                                raise
                            unavailable = short_error(exc)
                    if unavailable is not None:  # the other client counts: not tried again
                        c = Cell(w.name, n, unavailable=unavailable)
                        log(f"{label}: unavailable: {unavailable}")
                    else:
                        log(f"{label}: pgmq {c.rate(PGMQ):,.0f} / raw {c.rate(RAW):,.0f} msgs/s "
                            f"(client CPU up to {c.client_cpu():.2f} cores)")
                    cells.append(c)
                if w.teardown:
                    try:
                        w.teardown(admin)
                    except psycopg.Error as exc:
                        if not (w.optional and exc.sqlstate):
                            raise
                        log(f"{w.name}: teardown failed: {short_error(exc)}")
        spark_results = []
        if args.spark_rows:  # Spark publish and consume throughput (needs the spark extra and Java)
            try:
                from .spark import run as spark_bench
            except ImportError as exc:
                log(f"spark: unavailable ({exc})")
            else:
                spark_results = spark_bench(bench_dsn, rows=args.spark_rows, log=log)
    finally:
        clients_impl.close()
    with psycopg.connect(dsn, autocommit=True) as conn:  # leave nothing behind on a --dsn server
        conn.execute(f"DROP DATABASE IF EXISTS {BENCH_DB}")
    wall = time.monotonic() - t0

    header = (f"pgmq benchmark | PostgreSQL {version}, {server} | "
              f"pgmq {ext[0] if ext else '(standalone script)'} | "
              f"{args.seconds:g} s per side per cell, in {args.rounds} alternating segment(s) | "
              f"1 {args.mode} + 1 autocommit connection per client, psycopg {psycopg.__version__} "
              f"auto-prepare on both sides | {os.cpu_count()} CPUs")
    print(header)
    print()
    print(format_table(cells))
    print()
    if spark_results:
        print("Spark connector on local[2] (rows/s, no baseline: the COPY path is the server's own rate):")
        for r in spark_results:
            print(f"  {r.name:<30} {r.rows_per_s:>10,.0f} rows/s  ({r.rows:,} rows, {r.seconds:.2f} s)  "
                  f"{r.description}")
        print()
    print("msgs/s = messages handled by all clients / wall time; ratio < 1: pgmq is slower "
          "than the plain-SQL baseline. Workloads (pgmq | raw):")
    width = max(len(w.name) for w in args.workloads)
    for w in args.workloads:
        print(f"  {w.name:<{width}}  {w.description}")
    if any(c.unavailable for c in cells):
        print("(unavailable) = the workload failed on this build (its pgmq feature missing or "
              "broken); not measured")
    if any(c.dry(PGMQ) or c.dry(RAW) for c in cells):
        print("(dry!) = the queue ran empty in some segment despite the prefill: that rate is low")
    log(f"done in {wall:.0f} s")
    if args.json:
        out = {
            "postgres_version": version,
            "pgmq_version": ext[0] if ext else None,
            "server": server,
            "seconds_per_side": args.seconds,
            "rounds": args.rounds,
            "mode": args.mode,
            "cpus": os.cpu_count(),
            "wall_seconds": round(wall, 1),
            "workloads": {w.name: {"description": w.description, "msgs_per_op": w.msgs_per_op}
                          for w in args.workloads},
            "results": [
                {"workload": c.workload, "clients": c.clients,
                 "pgmq_msgs_per_s": None if c.unavailable else round(c.rate(PGMQ), 1),
                 "raw_msgs_per_s": None if c.unavailable else round(c.rate(RAW), 1),
                 "ratio": round(c.rate(PGMQ) / c.rate(RAW), 4) if c.rate(RAW) else None,
                 "prefill": c.prefill, "segments": [asdict(s) for s in c.segments],
                 "unavailable": c.unavailable}
                for c in cells
            ],
        }
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dsn:
        return run(args, args.dsn, "the --dsn server")
    log(maybe_install_files())
    log("starting a throwaway PostgreSQL server ...")
    with TempCluster(settings=dict(CLUSTER_SETTINGS)) as cluster:
        return run(args, cluster.dsn(), "throwaway local server (fsync=off)")


if __name__ == "__main__":
    sys.exit(main())
