"""The benchmark behind `make bench`: plain SQL, upstream PGMQ and our pgmq, side by side.

    python3 -m bench [--seconds 3] [--clients 1,4] [--only send,pop] [--json out.json]
                                [--dsn DSN] [--rounds 2] [--mode thread|process]
                                [--prefill 200000] [--no-upstream] [--spark-rows 200000]
                                [--scrape]
    python3 -m bench steady [options]    (or --steady: steady.py, `make bench-steady`)
    python3 -m bench metrics [options]   (metrics_cost.py, `make bench-metrics`)
    python3 -m bench contention [options] (contention.py, `make bench-contention`)
    python3 -m bench archive [options] (archive_retention.py, `make bench-archive`)
    python3 -m bench big [options]       (big_queues.py, `make bench-big`)

Three systems on one server, in two databases the bench creates: "raw" (plain SQL on a table
laid out like upstream's queue table, in the database of ours), "upstream" (upstream PGMQ 1.13
installed by running the pgmq.sql that ships in the PyPI package pgmq, upstream's Python
client: an SQL-only install in database pgmq_bench_upstream; the package is pip-installed if
missing) and "ours" (CREATE EXTENSION pgmq in database pgmq_bench). A workload upstream lacks the functions for
(exchanges, the worker's dispatch) runs on raw and ours only; the `worker` workload (the real
pgmq_build.worker.Worker with its default pool, see pool.py) runs on ours only, once, whatever
--clients says.

Each cell (workload x client count) measures every system for --seconds, split into --rounds
segments whose order alternates (raw, upstream, ours, then ours, upstream, raw, ...), so that
drift on a noisy machine hits all systems alike; one system runs at a time. Every segment starts
from a fresh queue (recreated, prefilled when the workload consumes, VACUUM ANALYZE, CHECKPOINT),
with new client connections: one autocommit psycopg connection per client, each driven by its
own thread (default) or process. Per segment it records:

- server CPU: utime + stime of the clients' backend processes (pids from pg_backend_pid), read
  from /proc/<pid>/stat just before the clients start together and just after the last one
  finishes (see server.py); reported per message. The primary metric: clients and server share
  the machine's cores, so msgs/s says as much about the client as about the server;
- WAL: pg_current_wal_lsn() before and after; reported in bytes per message;
- throughput: messages handled / wall time from the first client's start to the last client's
  finish (a secondary column).

Nothing is asserted: it reports.

--scrape also reads the exporter's counters of the bench queue before and after each segment of
ours in the send, read and pop cells and prints them next to the bench's own counts (scrape.py).

A workload marked optional (a pgmq feature a system may lack or break: FIFO, topics, the worker)
that fails on a system with an error from the server (one with a SQLSTATE) is reported as "n/a"
for that system (the error under the table), which is not tried again for the workload, and the
run goes on. Any other failure (a non-optional workload, a client-side error) stops the run.

Consuming workloads start every segment with at least --prefill messages queued (default
200,000), or more if a 0.3 s warm-up of every system says the fastest could consume more: 2x its
rate times the segment length (plus slack); a segment that still runs dry is re-run with 3x the
prefill, and its rate marked "!" if it runs dry again.

Threads, not processes, by default: on the 2-core machine this was written on, the client side
used at most ~0.9 cores (send x4) and --mode process was no faster (the clients share the cores
with the server, and the GIL is released while libpq waits). Each cell's client CPU (cores) is
logged and stored in the JSON, so this can be rechecked on a bigger machine.

Without --dsn it starts a throwaway PostgreSQL (pgmq_build.cluster.TempCluster, which runs the
server as an unprivileged user when we are root; fsync=off, synchronous_commit on) and copies
the extension files into the server's sharedir when that is writable. Either way the databases
pgmq_bench and pgmq_bench_upstream are (re)created and dropped at the end. With a --dsn server
on another machine the server CPU columns read "?".
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import multiprocessing as mp
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import psycopg
from psycopg import conninfo

from pgmq_build.cluster import TempCluster
from pgmq_build.install import InstallError, ensure_pgmq, install_files, sharedir

from .report import OURS, RAW, SYSTEMS, UPSTREAM, Cell, Segment, format_stored, format_table
from .scrape import COUNTED, Scraper, compare, format_lines
from .server import Meter, Usage
from .workloads import BY_NAME, PGMQ, WORKLOADS, Workload
from .workloads import RAW as RAW_API

BENCH_DB = "pgmq_bench"  # ours, and the raw tables
UPSTREAM_DB = "pgmq_bench_upstream"
UPSTREAM_PACKAGE = "pgmq>=1.1.4"  # upstream's Python client; 1.1.4 ships upstream 1.13.0's SQL
WARMUP_SECONDS = 0.3  # the rate estimate that sizes a consuming cell's prefill
WARM_OPS = 10  # untimed ops per client per segment, before the clients start together
PREFILL = 200_000  # messages queued before every segment of a consuming workload (--prefill)
PREFILL_MARGIN = 2.0  # prefill >= margin x (fastest system's warm-up rate) x segment length + slack
PREFILL_MAX = 5_000_000
# The throwaway server: no checkpoint should start inside a measured segment on its own (we issue
# one before each segment, so every segment starts from the same state). synchronous_commit is
# PostgreSQL's default; set anyway, as every commit's WAL flush is part of what is measured.
CLUSTER_SETTINGS = {"max_wal_size": "8GB", "checkpoint_timeout": "1h", "synchronous_commit": "on"}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class System:
    name: str  # RAW, UPSTREAM or OURS
    api: str  # the workloads' side: RAW_API (plain SQL) or PGMQ (the pgmq.* calls)
    dsn: str


def round_order(systems: list[str], rnd: int) -> list[str]:
    """The systems' order in round `rnd` (0-based): as given, then reversed, alternately
    (raw, upstream, ours, ours, upstream, raw, ...: cancels linear drift)."""
    return list(systems) if rnd % 2 == 0 else list(reversed(systems))


# --- one client ----------------------------------------------------------------------------------

@dataclass
class ClientResult:
    msgs: int
    ops: int
    dry_ops: int
    t_start: float  # time.monotonic(): CLOCK_MONOTONIC, comparable across processes on Linux
    t_end: float
    cpu: float = 0.0  # client CPU seconds (process mode: this client's process)
    warm_msgs: int = 0  # messages the untimed warm-up ops handled


def drive(workload: Workload, side: str, cur: psycopg.Cursor, seconds: float,
          stop_when_dry: bool, wait_start: Callable[[], object]) -> ClientResult:
    """A few untimed ops (the new backend compiles pgmq's functions and psycopg prepares the
    statements), wait for the other clients, then run the op back to back for `seconds` (the
    last op finishes past the deadline)."""
    op = workload.op(side)
    warm = sum(op(cur) for _ in range(WARM_OPS))
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
    return ClientResult(msgs, ops, dry, t_start, time.monotonic(), warm_msgs=warm)


def _connect(dsn: str) -> psycopg.Connection:
    # Default prepare_threshold (5) on purpose: every system gets psycopg's auto-prepare alike,
    # and the WARM_OPS untimed ops mean every timed statement is a prepared one.
    return psycopg.connect(dsn, autocommit=True)


@dataclass
class Run:
    clients: list[ClientResult]
    usage: Usage | None  # what the segment cost the server (None: not metered)
    pids: list[int] = field(default_factory=list)  # the clients' backends (closed by now)


# --- many clients: threads or processes ----------------------------------------------------------

class ThreadClients:
    """One thread and one connection per client, all released together by a barrier."""

    name = "thread"

    def __init__(self, max_clients: int) -> None:
        pass

    def run(self, workload: Workload, side: str, dsn: str, clients: int, seconds: float,
            stop_when_dry: bool, meter: Meter | None = None) -> Run:
        conns = [_connect(dsn) for _ in range(clients)]
        pids = [c.info.backend_pid for c in conns]
        start: dict = {}

        def released() -> None:  # the barrier's action: once, as the clients are released
            if meter is not None:
                start["server"] = meter.sample(pids)
            start["cpu"] = time.process_time()

        barrier = threading.Barrier(clients, action=released)
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
        usage = None
        try:
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            cpu = time.process_time() - start.get("cpu", 0.0)  # the whole process: all clients
            if meter is not None and not errors:  # before the backends exit with their connections
                usage = meter.usage(start["server"], meter.sample(pids))
        finally:
            for c in conns:
                c.close()
        if errors:  # the real failure, not the BrokenBarrierError it caused in the others
            errors.sort(key=lambda e: isinstance(e, threading.BrokenBarrierError))
            raise errors[0]
        done = [r for r in results if r is not None]
        done[0].cpu = cpu
        return Run(done, usage, pids)

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

                def wait_start(conn: psycopg.Connection = conn) -> None:
                    nonlocal cpu0
                    pipe.send(("ready", conn.info.backend_pid))
                    if pipe.recv() != "go":
                        raise _Aborted
                    cpu0 = time.process_time()

                result = drive(BY_NAME[name], side, conn.cursor(), seconds, stop_when_dry,
                               wait_start)
                result.cpu = time.process_time() - cpu0
                pipe.send(result)
                pipe.recv()  # "close": the parent has read the backend's CPU time
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

    def __init__(self, max_clients: int) -> None:
        ctx = mp.get_context("spawn")  # no inherited libpq sockets from the parent
        self.pipes = []
        self.procs = []
        for _ in range(max_clients):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_process_main, args=(child,), daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)

    def run(self, workload: Workload, side: str, dsn: str, clients: int, seconds: float,
            stop_when_dry: bool, meter: Meter | None = None) -> Run:
        pipes = self.pipes[:clients]
        for p in pipes:
            p.send((dsn, workload.name, side, seconds, stop_when_dry))
        # ("ready", backend pid) once connected and warmed up, or an exception
        replies = [p.recv() for p in pipes]
        failed = [r for r in replies if isinstance(r, Exception)]
        if failed:
            for p, r in zip(pipes, replies, strict=True):
                if not isinstance(r, Exception):
                    p.send("abort")
            raise failed[0]
        pids = [pid for _, pid in replies]
        before = meter.sample(pids) if meter is not None else None
        for p in pipes:
            p.send("go")
        results = [p.recv() for p in pipes]  # all of them, so that no reply is left in a pipe
        failed = [r for r in results if isinstance(r, Exception)]
        try:
            usage = (meter.usage(before, meter.sample(pids))
                     if meter is not None and before is not None and not failed else None)
        finally:
            for p, r in zip(pipes, results, strict=True):
                if not isinstance(r, Exception):
                    p.send("close")
        if failed:
            raise failed[0]
        return Run(results, usage, pids)

    def close(self) -> None:
        for pipe, proc in zip(self.pipes, self.procs, strict=True):
            try:
                pipe.send(None)
            except OSError:
                pass
            proc.join(timeout=5)


# --- cells ---------------------------------------------------------------------------------------

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


def short_error(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    msg = lines[0] if lines else type(exc).__name__
    return msg if len(msg) <= 160 else msg[:157] + "..."


class Bench:
    def __init__(self, systems: dict[str, System], admins: dict[str, psycopg.Connection],
                 meter: Meter, clients_impl, seconds: float, rounds: int, prefill: int,
                 scraper: Scraper | None = None):
        self.systems = systems  # in SYSTEMS order: the order of a round
        self.admins = admins  # an autocommit connection to each system's database
        self.meter = meter
        self.clients = clients_impl
        self.seconds = seconds
        self.rounds = rounds
        self.prefill = prefill
        self.can_checkpoint = True
        self.scraper = scraper  # --scrape: the exporter's counters around ours' segments
        self.scraped: list[tuple[str, dict]] = []  # (label, scrape.compare record)

    def systems_for(self, workload: Workload) -> list[str]:
        return [s for s in self.systems
                if (s != UPSTREAM or workload.upstream) and (s != RAW or workload.raw)]

    def runner(self, workload: Workload) -> Callable[..., Run]:
        return workload.runner or self.clients.run  # type: ignore[return-value]

    def prepare(self, workload: Workload, system: System, prefill: int) -> None:
        admin = self.admins[system.name]
        workload.reset(admin, system.api)
        if prefill:
            workload.fill(admin, system.api, prefill)
        if self.can_checkpoint:
            try:
                admin.execute("CHECKPOINT")
            except psycopg.Error as exc:
                self.can_checkpoint = False
                log(f"  (no CHECKPOINT before segments: {str(exc).strip()})")

    def warmup_rate(self, workload: Workload, system: System, clients: int) -> float:
        """Messages/s of a short run on a small prefill, stopping early if it runs dry."""
        n = min(1000 * workload.msgs_per_op, 50_000) * clients
        self.prepare(workload, system, n)
        run = self.runner(workload)(workload, system.api, system.dsn, clients, WARMUP_SECONDS,
                                    stop_when_dry=True)
        t = Totals.of(run.clients)
        return t.msgs / t.elapsed if t.elapsed > 0 else 0.0

    def _guard(self, cell: Cell, workload: Workload, system: str, label: str,
               fn: Callable[[], object]) -> bool:
        """Run fn; an optional workload's server error marks the system unavailable (False)."""
        try:
            fn()
            return True
        except psycopg.Error as exc:
            if not (workload.optional and exc.sqlstate):  # client-side: a bench bug
                raise
            cell.unavailable[system] = short_error(exc)
            log(f"{label}: {system}: unavailable: {cell.unavailable[system]}")
            return False

    def run_cell(self, workload: Workload, clients: int, label: str,
                 unavailable: dict[str, str]) -> Cell:
        """`unavailable`: the systems that failed this workload at another client count (not
        tried again); gains the ones that fail here."""
        systems = self.systems_for(workload)
        cell = Cell(workload.name, clients, unit=workload.unit, systems=systems,
                    unavailable=dict(unavailable))
        active = [s for s in systems if s not in cell.unavailable]
        seg_seconds = self.seconds / self.rounds
        if workload.consumes and active:
            rates: dict[str, float] = {}
            for s in active:
                def warm(s: str = s) -> None:
                    rates[s] = self.warmup_rate(workload, self.systems[s], clients)
                self._guard(cell, workload, s, label, warm)
            slack = (WARM_OPS + 20) * clients * workload.msgs_per_op
            estimate = slack + math.ceil(PREFILL_MARGIN * max(rates.values(), default=0.0)
                                         * seg_seconds)
            cell.prefill = min(PREFILL_MAX, max(self.prefill, estimate))
            log(f"{label}: warm-up " + " / ".join(f"{s} {r:,.0f}" for s, r in rates.items())
                + f" msgs/s -> prefill {cell.prefill:,} messages per segment")
        for rnd in range(self.rounds):
            for name in round_order(systems, rnd):
                if name in cell.unavailable:
                    continue
                system = self.systems[name]
                self._guard(cell, workload, name, label,
                            lambda system=system, rnd=rnd: self._segment(cell, workload, system,
                                                                         clients, rnd, label))
        unavailable.update(cell.unavailable)
        return cell

    def _segment(self, cell: Cell, workload: Workload, system: System, clients: int, rnd: int,
                 label: str) -> None:
        seg_seconds = self.seconds / self.rounds
        prefill = cell.prefill
        scraper = (self.scraper if system.name == OURS and workload.name in COUNTED
                   and workload.runner is None else None)
        for attempt in range(3):
            log(f"{label}: round {rnd + 1}/{self.rounds} {system.name}"
                + (f" (prefill {prefill:,})" if prefill else ""))
            self.prepare(workload, system, prefill)
            before = scraper.counters() if scraper else {}
            if workload.stored and prefill:
                cell.stored[system.name] = workload.stored(self.admins[system.name], system.api) / prefill
            run = self.runner(workload)(workload, system.api, system.dsn, clients, seg_seconds,
                                        stop_when_dry=False, meter=self.meter)
            t = Totals.of(run.clients)
            if not (workload.consumes and t.dry_ops and attempt < 2 and prefill < PREFILL_MAX):
                break
            prefill = cell.prefill = min(PREFILL_MAX, prefill * 3)  # and from now on
            log(f"{label}:   ran dry after {t.msgs:,} messages; again with more")
        if scraper:
            scraper.wait_gone(run.pids)
            record = compare(workload.name, before, scraper.counters(), t.msgs,
                             sum(r.warm_msgs for r in run.clients))
            self.scraped.append((f"{workload.name} x{clients} round {rnd + 1}", record))
            log(f"{label}:   scraped: {format_lines(self.scraped[-1:])[1].strip()}")
        usage = run.usage
        cell.segments.append(Segment(
            system.name, rnd + 1, prefill, t.msgs, t.ops, t.dry_ops, round(t.elapsed, 4),
            round(t.msgs / t.elapsed, 1) if t.elapsed else 0.0, round(t.client_cpu, 3),
            None if usage is None or usage.cpu_us is None else round(usage.cpu_us, 1),
            None if usage is None else usage.wal_bytes, record if scraper else None))


# --- set-up and report ---------------------------------------------------------------------------

def drop_bench_databases(dsn: str) -> None:
    """Leave nothing behind on a --dsn server (FORCE: sessions watching them, an exporter say,
    are ended)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        for db in (BENCH_DB, UPSTREAM_DB):
            conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")


def _recreate(dsn: str, dbname: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {dbname} WITH (FORCE)")  # FORCE: ends an exporter's session
        conn.execute(f"CREATE DATABASE {dbname}")
    return conninfo.make_conninfo(dsn, dbname=dbname)


def prepare_database(dsn: str, dbname: str = BENCH_DB) -> tuple[str, str]:
    """(Re)create the bench database with our pgmq in it; returns (its DSN, how pgmq got there)."""
    bench_dsn = _recreate(dsn, dbname)
    with psycopg.connect(bench_dsn, autocommit=True) as conn:
        how = ensure_pgmq(conn)
        # The new database's catalogs (CREATE EXTENSION just wrote many rows): vacuumed now, so
        # autovacuum has no reason to visit them during the first cells.
        conn.execute("VACUUM ANALYZE")
    return bench_dsn, how


def upstream_pgmq_sql() -> tuple[str, str]:
    """(version, text) of upstream's pgmq.sql from the PyPI package pgmq (migrate.upstream_sql),
    installing that package with pip first if it is missing (`make bench` has it: it is in the
    test extra that `make deps` installs)."""
    from pgmq_build.migrate import MigrateError, upstream_sql

    try:
        return upstream_sql()
    except MigrateError:
        log(f"the PyPI package pgmq (upstream's Python client, which ships upstream's pgmq.sql) "
            f"is missing: pip install '{UPSTREAM_PACKAGE}'")
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", UPSTREAM_PACKAGE], check=True)
        importlib.invalidate_caches()
        return upstream_sql()


def prepare_upstream_database(dsn: str, dbname: str = UPSTREAM_DB) -> tuple[str, str]:
    """(Re)create the upstream database with upstream PGMQ's SQL-only install (schema pgmq made
    by its pgmq.sql, as pgmq-py's installer does); returns (its DSN, upstream's version)."""
    version, text = upstream_pgmq_sql()
    up_dsn = _recreate(dsn, dbname)
    with psycopg.connect(up_dsn, autocommit=True) as conn:
        conn.execute(text)
        conn.execute("VACUUM ANALYZE")
    return up_dsn, version


def maybe_install_files() -> str:
    try:
        dest = sharedir() / "extension"
    except InstallError as exc:
        return f"extension files not copied ({exc})"
    if not os.access(dest, os.W_OK):
        return f"extension files not copied ({dest} is not writable)"
    install_files()
    return f"extension files copied to {dest}"


def check_dsn(parser: argparse.ArgumentParser, dsn: str | None) -> None:
    """Refuse (exit 2) a --dsn libpq cannot parse, before any server or Spark is started."""
    if dsn is None:
        return
    try:
        conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        parser.error(f"--dsn is not a libpq connection string or URI: {str(exc).strip()}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench", description=__doc__.split("\n\n")[0],
                                epilog="python3 -m bench steady --help: the steady-state "
                                "run with a held xmin horizon (steady.py, make bench-steady)")
    p.add_argument("--dsn", help="use this server instead of a throwaway one (the databases "
                   f"{BENCH_DB} and {UPSTREAM_DB} are created there, replacing any old ones, "
                   "and dropped at the end)")
    p.add_argument("--seconds", type=float, default=3.0,
                   help="measured seconds per system per cell (default 3)")
    p.add_argument("--rounds", type=int, default=2,
                   help="alternating segments the seconds are split into (default 2: raw, "
                   "upstream, ours, ours, upstream, raw)")
    p.add_argument("--clients", default="1,4", help="client counts, comma-separated (default 1,4)")
    p.add_argument("--only", help="comma-separated workload names; available: "
                   + ", ".join(w.name for w in WORKLOADS))
    p.add_argument("--prefill", type=int, default=PREFILL,
                   help="messages queued before every segment of a consuming workload, at least "
                   f"(more if the warm-up says a segment could consume more; default {PREFILL})")
    p.add_argument("--no-upstream", action="store_true",
                   help="measure raw and ours only (no upstream PGMQ database)")
    p.add_argument("--mode", choices=("thread", "process"), default="thread",
                   help="how clients run: threads (default) or processes")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    p.add_argument("--scrape", action="store_true",
                   help="read the exporter's counters of the bench queue around each segment of "
                   "ours in the send, read and pop cells and print them next to the bench's counts")
    p.add_argument("--spark-rows", type=int, default=200_000,
                   help="rows for the Spark publish/consume cells (0 skips them; default 200000)")
    args = p.parse_args(argv)
    try:
        args.clients = [int(x) for x in args.clients.split(",") if x.strip()]
    except ValueError:
        p.error("--clients takes integers, e.g. 1,4")
    if not args.clients or min(args.clients) < 1:
        p.error("--clients needs at least one positive integer")
    if not math.isfinite(args.seconds) or args.seconds <= 0 or args.rounds < 1:
        p.error(f"--seconds must be a finite positive number (got {args.seconds}) and --rounds "
                f"at least 1 (got {args.rounds})")
    if args.prefill < 0:
        p.error("--prefill must not be negative")
    if args.spark_rows < 0:
        p.error(f"--spark-rows must not be negative (0 skips Spark), got {args.spark_rows}")
    check_dsn(p, args.dsn)
    names = [n.strip() for n in (args.only or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        p.error(f"unknown workload(s) {', '.join(unknown)}; available: "
                + ", ".join(w.name for w in WORKLOADS))
    args.workloads = [BY_NAME[n] for n in names] if names else list(WORKLOADS)
    return args


def _fmt(v: float | None, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


def run(args: argparse.Namespace, dsn: str, server: str) -> int:
    t0 = time.monotonic()
    bench_dsn, how = prepare_database(dsn)
    log(f"ours in {BENCH_DB}: {how}")
    systems = {RAW: System(RAW, RAW_API, bench_dsn)}
    upstream_version = None
    if not args.no_upstream:
        up_dsn, upstream_version = prepare_upstream_database(dsn)
        log(f"upstream in {UPSTREAM_DB}: PGMQ {upstream_version}, SQL-only install from the "
            "PyPI package pgmq's pgmq.sql")
        systems[UPSTREAM] = System(UPSTREAM, PGMQ, up_dsn)
    systems[OURS] = System(OURS, PGMQ, bench_dsn)
    clients_impl = (ProcessClients if args.mode == "process" else ThreadClients)(max(args.clients))
    cells: list[Cell] = []
    conns: list[psycopg.Connection] = []
    try:
        admin = psycopg.connect(bench_dsn, autocommit=True)
        conns.append(admin)
        admins = {RAW: admin, OURS: admin}
        if UPSTREAM in systems:
            admins[UPSTREAM] = psycopg.connect(systems[UPSTREAM].dsn, autocommit=True)
            conns.append(admins[UPSTREAM])
        meter_conn = psycopg.connect(bench_dsn, autocommit=True)
        conns.append(meter_conn)
        meter = Meter(meter_conn)
        if not meter.cpu:
            log("server CPU: not measurable (the server's processes are not visible in this "
                "machine's /proc): those columns read '?'")
        settings = {k: admin.execute(f"SHOW {k}").fetchone()[0]
                    for k in ("server_version", "synchronous_commit", "fsync", "full_page_writes")}
        ext = admin.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgmq'").fetchone()
        scraper = Scraper(bench_dsn) if args.scrape else None
        if scraper:
            conns.append(scraper)
        bench = Bench(systems, admins, meter, clients_impl, args.seconds, args.rounds, args.prefill,
                      scraper)
        total = sum(len(w.clients or args.clients) for w in args.workloads)
        for w in args.workloads:
            unavailable: dict[str, str] = {}
            for n in w.clients or args.clients:
                label = f"[{len(cells) + 1}/{total}] {w.name} x{n}"
                c = bench.run_cell(w, n, label, unavailable)
                log(f"{label}: " + " / ".join(
                    f"{s} {_fmt(c.rate(s), ',.0f')} {w.unit}/s, {_fmt(c.cpu_us_per_msg(s), '.1f')} µs"
                    for s in c.systems if c.measured(s))
                    + f" (server CPU per {w.unit[:-1]}; client CPU up to {c.client_cpu():.2f} cores)")
                cells.append(c)
            if w.teardown:
                for s in bench.systems_for(w):
                    if s == RAW:  # its tables are in ours' database: ours' teardown drops them
                        continue
                    try:
                        w.teardown(admins[s])
                    except psycopg.Error as exc:
                        if not (w.optional and exc.sqlstate):
                            raise
                        log(f"{w.name}: teardown on {s} failed: {short_error(exc)}")
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
        for conn in conns:
            conn.close()
    drop_bench_databases(dsn)
    wall = time.monotonic() - t0

    ours_version = ext[0] if ext else None
    shown = tuple(s for s in SYSTEMS if s in systems)
    header = (f"pgmq benchmark | PostgreSQL {settings['server_version']}, {server}, "
              f"synchronous_commit={settings['synchronous_commit']}, fsync={settings['fsync']}, "
              f"full_page_writes={settings['full_page_writes']} | "
              f"ours: pgmq {ours_version or '(standalone script)'}"
              + (f" | upstream: PGMQ {upstream_version} (pgmq.sql from PyPI pgmq)"
                 if upstream_version else "")
              + f" | {args.seconds:g} s per system per cell, in {args.rounds} alternating "
              f"segment(s) | consumers start from >= {args.prefill:,} queued messages | "
              f"1 {args.mode} + 1 autocommit connection per client, psycopg {psycopg.__version__} "
              f"auto-prepare for all | {os.cpu_count()} CPUs")
    print(header)
    print()
    print(format_table(cells, shown))
    print()
    print("server CPU µs/msg = utime+stime of the clients' backends / messages (the primary "
          "metric: clients and server share the cores); CPU ratio = ours / the other system's "
          "CPU per message (> 1: ours costs more); WAL bytes/msg = WAL written during the "
          "segments / messages; msgs/s = messages handled by all clients / wall time. "
          "– = the system lacks the workload's functions; n/a = it failed there (below); "
          "? = not measurable here; ! = the queue ran empty in some segment: that rate is low.")
    units = sorted({c.workload for c in cells if c.unit != "msgs"})
    for name in units:
        unit = BY_NAME[name].unit
        print(f"{name}: one {unit[:-1]} per message: its msgs/s are {unit}/s and its CPU and WAL "
              f"are per {unit[:-1]}.")
    for line in format_stored(cells, shown):
        print(line)
    for line in format_lines(bench.scraped):
        print(line)
    failures = {(c.workload, s): why for c in cells for s, why in c.unavailable.items()}
    for (name, s), why in failures.items():
        print(f"n/a: {name} on {s}: {why}")
    print()
    if spark_results:
        print("Spark connector on local[2], ours only (rows/s; the raw COPY row is the baseline "
              "without Spark, on the same server in the same run):")
        for r in spark_results:
            print(f"  {r.name:<30} {r.rows_per_s:>10,.0f} rows/s  ({r.rows:,} rows, {r.seconds:.2f} s)  "
                  f"{r.description}")
        print()
    print("Workloads (pgmq.* calls, on upstream and ours | raw):")
    width = max(len(w.name) for w in args.workloads)
    for w in args.workloads:
        print(f"  {w.name:<{width}}  {w.description}"
              + ("" if w.upstream or UPSTREAM not in systems else "  (not in upstream)"))
    log(f"done in {wall:.0f} s")
    if args.json:
        out = {
            "postgres_version": settings["server_version"],
            "settings": settings,
            "pgmq_version": ours_version,
            "upstream_version": upstream_version,
            "systems": {
                RAW: f"plain SQL on a table laid out like a queue table, in {BENCH_DB}",
                **({UPSTREAM: f"upstream PGMQ {upstream_version}: pgmq.sql from the PyPI "
                              f"package pgmq, SQL-only install in {UPSTREAM_DB}"}
                   if upstream_version else {}),
                OURS: f"pgmq {ours_version or '(standalone script)'} in {BENCH_DB}: {how}",
            },
            "server": server,
            "seconds_per_system": args.seconds,
            "rounds": args.rounds,
            "prefill": args.prefill,
            "mode": args.mode,
            "cpus": os.cpu_count(),
            "server_cpu_measured": meter.cpu,
            "wall_seconds": round(wall, 1),
            "workloads": {w.name: {"description": w.description, "msgs_per_op": w.msgs_per_op,
                                   "unit": w.unit, "upstream": w.upstream}
                          for w in args.workloads},
            "results": [c.as_dict() for c in cells],
            "spark": [r.as_dict() for r in spark_results],
        }
        with open(args.json, "w") as fh:
            fh.write(json.dumps(out, indent=2) + "\n")
        log(f"wrote {args.json}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["steady"] or "--steady" in argv:  # the steady-state run: steady.py
        from .steady import main as steady_main

        rest = argv[1:] if argv[:1] == ["steady"] else [a for a in argv if a != "--steady"]
        return steady_main(rest)
    if argv[:1] == ["metrics"]:  # what a metrics call costs on a large queue: metrics_cost.py
        from .metrics_cost import main as metrics_main

        return metrics_main(argv[1:])
    if argv[:1] == ["big"]:  # send/read/pop/metrics on queues of millions: big_queues.py
        from .big_queues import main as big_main

        return big_main(argv[1:])
    if argv[:1] == ["archive"]:  # a partitioned archive under retention: archive_retention.py
        from .archive_retention import main as archive_main

        return archive_main(argv[1:])
    if argv[:1] == ["contention"]:  # many consumers on one full queue: contention.py
        from .contention import main as contention_main

        return contention_main(argv[1:])
    return on_server(parse_args(argv), run)


def on_server(args: argparse.Namespace, body: Callable[[argparse.Namespace, str, str], int],
              settings: dict[str, str] | None = None) -> int:
    """body(args, dsn, where) on the --dsn server, or on a throwaway one started for it (with
    `settings`, default CLUSTER_SETTINGS)."""
    if args.dsn:
        return body(args, args.dsn, "the --dsn server")
    log(maybe_install_files())
    log("starting a throwaway PostgreSQL server ...")
    with TempCluster(settings=dict(settings or CLUSTER_SETTINGS)) as cluster:
        return body(args, cluster.dsn(), "throwaway local server")


if __name__ == "__main__":
    sys.exit(main())
