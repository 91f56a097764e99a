"""The faults. Each takes the running scenario's Ctx, injects its fault while the load runs and
returns a Fault: how many faults it injected (and what they were), and when each one ended
(the meter's clock), from which the runner measures recovery."""

from __future__ import annotations

import contextlib
import errno
import os
import random
import subprocess
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from pgmq_build.cluster import TempCluster

from .load import Load

# The load's clients (not the runner's own connections: chaos-admin-*, chaos-burst); the
# Spark connector's connections (its driver's and its tasks') are all named pgmq-spark.
VICTIMS_SQL = ("SELECT pid, application_name FROM pg_stat_activity WHERE datname = "
               "current_database() AND pid <> pg_backend_pid() AND backend_type = 'client backend' "
               "AND (application_name ~ '^chaos-(producer|consumer|client)-' "
               "OR application_name IN ('pgmq-worker', 'pgmq-spark'))")
ROLES = ("pgmq-worker", "chaos-consumer", "chaos-producer", "chaos-client", "pgmq-spark")


def _role(app: str) -> str:
    return next(r for r in ROLES if app.startswith(r))


def roles(load: Load) -> tuple[str, ...]:
    """The roles the load runs (pgmq-spark only with the Spark query)."""
    return ROLES if load.spark is not None else ROLES[:-1]


@dataclass
class Ctx:
    cluster: TempCluster
    dsn: str
    load: Load
    long: bool
    log: Callable[[str], None]
    wait_recovered: Callable[[float, float], float | None]  # (since, timeout) -> seconds
    space: Path | None = None  # the small filesystem holding the queues' tablespace
    rng: random.Random = field(default_factory=lambda: random.Random(11))

    def now(self) -> float:
        return self.load.meter.now()

    def pick(self, short: float, long: float) -> float:
        return long if self.long else short


@dataclass
class Fault:
    injected: int
    what: str  # e.g. "2 immediate restarts"
    ends: list[float]  # when each fault ended (recovery is measured from each)
    details: dict = field(default_factory=dict)


def admin_connection(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True, connect_timeout=5,
                           application_name="chaos-admin-faults")


def _errors_since(load: Load, before: Counter) -> dict[str, int]:
    with load.book.lock:
        now = Counter(load.book.errors)
    return {k: v for k, v in (now - before).items() if v}


def _errors_now(load: Load) -> Counter:
    with load.book.lock:
        return Counter(load.book.errors)


# -- immediate stop and restart, twice in a row ---------------------------------------------

def restart(ctx: Ctx) -> Fault:
    ends, waits = [], []
    for k in range(2):
        t = time.monotonic()
        ctx.cluster.crash_restart()  # pg_ctl stop -m immediate, then start (crash recovery)
        ends.append(ctx.now())
        waits.append(round(time.monotonic() - t, 2))
        ctx.log(f"immediate stop + start #{k + 1} took {waits[-1]} s")
        if k == 0:
            ctx.wait_recovered(ends[-1], ctx.pick(30, 60))
    return Fault(2, "2 immediate stops (pg_ctl stop -m immediate) + starts", ends,
                 {"stop_start_seconds": waits})


# -- pg_terminate_backend of random clients -------------------------------------------------

def terminate(ctx: Ctx) -> Fault:
    seconds = ctx.pick(4, 60)
    killed: Counter[str] = Counter()
    deadline = time.monotonic() + seconds
    order = roles(ctx.load)
    with admin_connection(ctx.dsn) as admin:
        rnd = 0
        while time.monotonic() < deadline:
            # each round a random connection of the next role, so that all of them are hit
            role = order[rnd % len(order)]
            rows = [r for r in admin.execute(VICTIMS_SQL).fetchall() if _role(r[1]) == role]
            if rows:
                pid, _ = ctx.rng.choice(rows)
                if admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]:
                    killed[role] += 1
            rnd += 1
            time.sleep(0.3)
    ends = [ctx.now()]
    n = sum(killed.values())
    return Fault(n, f"{n} backends terminated over {seconds:g} s", ends,
                 {"terminated": dict(killed)})


# -- a transaction holding the xmin horizon -------------------------------------------------

def xmin_hold(ctx: Ctx) -> Fault:
    seconds = ctx.pick(6, 180)
    with admin_connection(ctx.dsn) as holder:
        holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        holder.execute("SELECT 1")
        start = ctx.now()
        time.sleep(seconds)
        holder.execute("COMMIT")
    end = ctx.now()
    return Fault(1, f"1 REPEATABLE READ transaction open {seconds:g} s", [end],
                 {"held_from_s": round(start, 1), "held_to_s": round(end, 1)})


# -- a burst of connections beyond max_connections ------------------------------------------

def burst(ctx: Ctx) -> Fault:
    """Take every free slot and keep taking the ones that free up, while the worker, a consumer
    and a producer are terminated (they must reconnect against refusals); then let go."""
    seconds = ctx.pick(4, 60)
    held: list[psycopg.Connection] = []
    refusals: Counter[str] = Counter()
    stop = threading.Event()

    def grab() -> None:
        while not stop.is_set():
            try:
                held.append(psycopg.connect(ctx.dsn, autocommit=True, connect_timeout=3,
                                            application_name="chaos-burst"))
            except psycopg.Error as exc:
                refusals[refusal_kind(exc)] += 1
                stop.wait(0.02)

    grabber = threading.Thread(target=grab, daemon=True)
    # the victims' pids first: once the slots are full, not even a superuser gets in
    with admin_connection(ctx.dsn) as admin:
        rows = admin.execute(VICTIMS_SQL).fetchall()
        victims = [pid for pid, app in rows if app == "pgmq-worker"]
        for role in roles(ctx.load)[1:]:
            victims += [pid for pid, app in rows if app.startswith(role)][:1]
        grabber.start()
        deadline = time.monotonic() + 5
        while not refusals and time.monotonic() < deadline:
            time.sleep(0.02)
        full_at = ctx.now()
        for pid in victims:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    time.sleep(seconds)
    stop.set()
    grabber.join(10)
    for c in held:
        c.close()
    end = ctx.now()
    unclean = {k: v for k, v in refusals.items() if k != "53300"}
    return Fault(len(held), f"{len(held)} extra connections held {seconds:g} s "
                 f"({sum(refusals.values())} refused), {len(victims)} clients terminated",
                 [end], {"burst_connections": len(held), "refusals": dict(refusals),
                         "refusals_not_53300": unclean, "full_after_s": round(full_at, 2),
                         "terminated": len(victims)})


def refusal_kind(exc: psycopg.Error) -> str:
    """The SQLSTATE of a refused connection: libpq gives none for errors at connection time,
    so the server's texts for too_many_connections (53300) are recognised."""
    text = str(exc)
    if exc.sqlstate:
        return exc.sqlstate
    if "too many clients already" in text or "connection slots are reserved" in text:
        return "53300"
    return (text.strip().splitlines() or [type(exc).__name__])[0]


# -- statement_timeout and lock_timeout firing inside our functions -------------------------

# For the whole scenario: the worker's statements (a batch lasts ~50 ms) are cancelled after
# 250 ms and wait at most 100 ms for a lock; the producers wait at most 100 ms for a lock.
TIMEOUT_OPTIONS = {
    "worker": "options='-c lock_timeout=100ms -c statement_timeout=250ms'",
    "producer": "options='-c lock_timeout=100ms'",
}


def timeouts(ctx: Ctx) -> Fault:
    """Two halves. First the consumers run with a tiny statement_timeout (1 ms: now and then
    cancelled inside read or delete) and some messages for the worker are slow (their callback
    sleeps past the worker's 250 ms statement_timeout, inside _dispatch_one: they fail every
    time and end in the dead-letter queue). Then another session locks the queue tables
    (EXCLUSIVE: reads go on, every write waits) for 0.5 s of every second, producers send with
    a 1 s delay (so that messages turn visible while the tables are locked) and the consumers'
    statement_timeout is 100 ms: statement_timeout fires inside the consumers' read, and the
    lock_timeout of the worker and the producers inside _dispatch_one and send."""
    half = ctx.pick(3, 30)
    before = _errors_now(ctx.load)
    worker_before = ctx.load.worker.totals.errors if ctx.load.worker else 0
    ctx.load.consumer_setting.update(statement_timeout="1ms")
    ctx.load.slow = 0.05
    time.sleep(half)
    ctx.load.slow = 0.0
    ctx.load.consumer_setting.update(statement_timeout="100ms")
    ctx.load.send_delay = 1
    locks = 0
    deadline = time.monotonic() + half
    with admin_connection(ctx.dsn) as locker:
        while time.monotonic() < deadline:
            with locker.transaction():
                locker.execute(f"LOCK TABLE {', '.join(ctx.load.queue_tables())} "
                               "IN EXCLUSIVE MODE")
                locks += 1
                time.sleep(0.5)
            time.sleep(0.5)
    ctx.load.send_delay = 0
    ctx.load.consumer_setting.clear()
    end = ctx.now()
    fired = _errors_since(ctx.load, before)
    worker_errors = (ctx.load.worker.totals.errors if ctx.load.worker else 0) - worker_before
    n = fired.get("57014", 0) + fired.get("55P03", 0) + worker_errors
    return Fault(n, f"{fired.get('57014', 0)} statement_timeout + {fired.get('55P03', 0)} "
                 f"lock_timeout errors in the clients, {worker_errors} in the worker "
                 f"({locks} table locks of 0.5 s)", [end],
                 {"client_errors": fired, "worker_dispatch_errors": worker_errors,
                  "table_locks": locks})


# -- disk full: the queues' tablespace on a small tmpfs -------------------------------------

class Unavailable(RuntimeError):
    """The fault cannot be made on this machine (the message says why)."""


@contextlib.contextmanager
def small_filesystem(size_mb: int, owner: tuple[int, int]) -> Iterator[Path]:
    """A tmpfs of size_mb mounted on a new temporary directory, owned by (uid, gid), unmounted
    and removed afterwards. Needs root (CAP_SYS_ADMIN); raises Unavailable otherwise."""
    mnt = Path(tempfile.mkdtemp(prefix="pgmq-chaos-fs-"))
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o",
                               f"size={size_mb}m,mode=0700,uid={owner[0]},gid={owner[1]}",
                               "tmpfs", str(mnt)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        mnt.rmdir()
        raise Unavailable(f"cannot run mount: {exc}") from exc
    if proc.returncode != 0:
        mnt.rmdir()
        raise Unavailable(f"mount -t tmpfs failed (exit {proc.returncode}, euid "
                          f"{os.geteuid()}): {(proc.stderr or proc.stdout).strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)
        with contextlib.suppress(OSError):
            mnt.rmdir()


def fill(path: Path) -> int:
    """Write a file under path until the filesystem is full; returns its size."""
    filler = path / "filler"
    written = 0
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for chunk in (1 << 20, 1 << 12):
            block = b"\0" * chunk
            while True:
                try:
                    written += os.write(fd, block)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
    return written


def disk_full(ctx: Ctx) -> Fault:
    seconds = ctx.pick(4, 60)
    space = ctx.space
    assert space is not None, "disk_full needs the queues in a tablespace on small_filesystem()"
    before = _errors_now(ctx.load)
    size = fill(space)
    full_at = ctx.now()
    ctx.log(f"filesystem of the queues' tablespace full ({size / 1048576:.1f} MB of filler)")
    time.sleep(seconds)
    (space / "filler").unlink()
    end = ctx.now()
    fired = _errors_since(ctx.load, before)
    return Fault(1, f"the queues' tablespace full for {seconds:g} s "
                 f"({fired.get('53100', 0)} disk-full errors in the clients)", [end],
                 {"filler_bytes": size, "full_at_s": round(full_at, 1), "client_errors": fired})
