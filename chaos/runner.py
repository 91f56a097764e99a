"""The scenario runner and the soak run.

Each scenario gets a throwaway server (TempCluster) of its own: the ledger's schema and queues
(ledger.setup), the load (load.Load), a warm-up, a baseline window whose throughput is the
pre-fault rate, the fault (faults.py), then the load runs until throughput is back (every
second of RECOVERY_RUN in a row at >= 90 % of the pre-fault rate, for both what is produced and
what is consumed, and, with --spark, the Spark query caught up: its backlog no larger than
before the fault plus one second of its messages) or RECOVERY_LIMIT passes; then producers
stop, the consumers drain the queues, everything stops and the ledger is checked. The Spark
query consumes in micro-batches, so its per-second counts jump between 0 and two batches: its
backlog, not its rate per second, says whether it keeps up.

The soak: one server, the same load for --soak minutes, a fault every --fault-every seconds
(terminations, an immediate restart, an xmin hold, timeouts in turn), table sizes and dead
tuples sampled all along (sampler.py: steady.py's query and flat rule), the ledger at the end.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial

import psycopg

from bench import steady
from pgmq_build.cluster import TempCluster, server_owner

from . import failover, faults, ledger
from .load import Load, Settings
from .sampler import Sampler
from .spark_query import describe

RECOVERY_TOLERANCE = 0.10  # "back within 10 % of the pre-fault rate"
RECOVERY_RUN = 3  # seconds in a row
RECOVERY_LIMIT = 30.0  # a scenario fails when throughput is not back within this
OBSERVE_LIMIT = 60.0  # how long we wait for it at most (so that a slow one is measured)
DRAIN_LIMIT = 30.0


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    inject: Callable[[faults.Ctx], faults.Fault]
    cluster_settings: dict[str, str] = field(default_factory=dict)
    dsn_options: dict[str, str] = field(default_factory=dict)
    small_fs_mb: int = 0  # > 0: the queues live in a tablespace on a tmpfs of this size
    crashes: bool = False  # stops the server with -m immediate (see ledger.check)
    standby: bool = False  # a primary and a synchronous standby, the load on both (failover.py)


SCENARIOS = [
    Scenario("restart", "immediate stop and restart under load, twice in a row", faults.restart,
             crashes=True),
    Scenario("terminate", "pg_terminate_backend of random consumers, producers and worker "
             "connections", faults.terminate),
    Scenario("xmin", "a transaction holding the xmin horizon", faults.xmin_hold),
    Scenario("burst", "a burst of connections beyond max_connections", faults.burst,
             cluster_settings={"max_connections": "25"}),
    Scenario("timeouts", "statement_timeout and lock_timeout firing inside pgmq's functions",
             faults.timeouts, dsn_options=faults.TIMEOUT_OPTIONS),
    Scenario("disk_full", "disk full: the queues' tablespace on a small tmpfs, then freed",
             faults.disk_full, small_fs_mb=32),
    Scenario("failover", "the primary stopped with -m immediate, its synchronous standby "
             "promoted; the load on a multi-host DSN", failover.failover, crashes=True,
             standby=True),
]
BY_NAME = {s.name: s for s in SCENARIOS}


@dataclass(frozen=True)
class Timing:
    warmup: float
    baseline: float
    sample: float

    @classmethod
    def of(cls, long: bool) -> Timing:
        return cls(5.0, 20.0, 5.0) if long else cls(2.0, 3.0, 1.0)


# -- throughput and recovery ----------------------------------------------------------------

@dataclass
class _Second:
    t: float  # end of the second (steady.recovery's Sample.t)
    produced: int
    consumed: int
    spark_lag: int = 0  # sent to the Spark query and not through it yet, at the end
    spark_produced: int = 0


@dataclass(frozen=True)
class Base:
    """The pre-fault figures recovery is judged against."""

    produced: float  # messages a second
    consumed: float
    spark_lag: float | None = None  # the Spark query's backlog may be up to this (no Spark: None)


def seconds_of(load: Load, upto: float) -> list[_Second]:
    p, c = load.meter.series("produced", upto), load.meter.series("consumed", upto)
    sp, sc = load.meter.series("spark_produced", upto), load.meter.series("spark", upto)
    out, lag = [], 0
    for i, (a, b) in enumerate(zip(p, c, strict=True)):
        lag += sp[i] - sc[i]
        out.append(_Second(i + 1.0, a, b, lag, sp[i]))
    return out


def baseline_rates(load: Load, start: float, end: float) -> Base:
    secs = [s for s in seconds_of(load, end) if start < s.t <= end]
    n = len(secs) or 1
    lag = None
    if load.spark is not None:
        # one second of its messages on top of the largest backlog seen before the fault
        lag = max((s.spark_lag for s in secs), default=0) + sum(s.spark_produced
                                                                for s in secs) / n
    return Base(sum(s.produced for s in secs) / n, sum(s.consumed for s in secs) / n, lag)


def spark_caught_up(base: Base) -> Callable[[_Second], bool]:
    return lambda s: base.spark_lag is None or s.spark_lag <= base.spark_lag


def recovered(base: Base) -> Callable[[_Second], bool]:
    floor = 1 - RECOVERY_TOLERANCE
    caught_up = spark_caught_up(base)
    return lambda s: (s.produced >= floor * base.produced and s.consumed >= floor * base.consumed
                      and caught_up(s))


def recovery_after(load: Load, base: Base, since: float, upto: float | None = None,
                   rule: Callable[[Base], Callable[[_Second], bool]] = recovered) -> float | None:
    """Seconds from `since` to the end of the first second after it from which RECOVERY_RUN
    seconds in a row are within RECOVERY_TOLERANCE of the baseline (steady.recovery's rule)."""
    upto = load.meter.now() if upto is None else upto
    secs = [s for s in seconds_of(load, upto) if s.t <= upto]
    after = [s for s in secs if s.t > since]
    if len(after) < RECOVERY_RUN:
        return None
    return steady.recovery(secs, since, rule(base), RECOVERY_RUN)


def spark_figures(load: Load, base: Base, ends: list[float], upto: float) -> dict | None:
    """The Spark query's part of a result: the supervisor's summary, the recovery of the query
    alone after each fault, and its backlog at the end of every second."""
    if load.spark is None:
        return None
    return {**load.spark.summary(),
            "recovery_seconds": [recovery_after(load, base, e, upto, spark_caught_up)
                                 for e in ends],
            "backlog_per_second": [s.spark_lag for s in seconds_of(load, upto)]}


def wait_recovered(load: Load, base: Base, since: float,
                   timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = recovery_after(load, base, since)
        # only a complete run counts: the last RECOVERY_RUN seconds must all be in
        if r is not None and since + r + RECOVERY_RUN - 1 <= load.meter.now() - 1:
            return r
        time.sleep(0.25)
    return None


# -- one scenario -----------------------------------------------------------------------------

def _log(msg: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _drain(dsn: str, load: Load, limit: float) -> tuple[int, float]:
    """Wait until the queue tables are empty (or the limit); messages left, seconds taken."""
    t0 = time.monotonic()
    left = -1
    while time.monotonic() - t0 < limit:
        with contextlib.suppress(psycopg.Error), \
                psycopg.connect(dsn, autocommit=True, connect_timeout=3) as c:
            left = c.execute("SELECT " + " + ".join(f"(SELECT count(*) FROM {t})"
                                                    for t in load.queue_tables())).fetchone()[0]
            if left == 0:
                break
        time.sleep(0.25)
    return left, round(time.monotonic() - t0, 1)


@contextlib.contextmanager
def _server(sc_settings: dict[str, str], small_fs_mb: int, spark: bool = False,
            standby: bool = False):
    """A TempCluster (standby: a ReplicaPair and its multi-host DSN) with pgmq and the ledger
    set up; yields (cluster, dsn, space)."""
    with contextlib.ExitStack() as stack:
        space = None
        if small_fs_mb:  # mounted first, so that it is unmounted after the server stopped
            space = stack.enter_context(faults.small_filesystem(small_fs_mb, server_owner()))
        if standby:
            cluster = stack.enter_context(failover.pair(sc_settings))
        else:
            cluster = stack.enter_context(TempCluster(settings=dict(sc_settings)))
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as c:
            c.execute("CREATE EXTENSION pgmq")
            if space is not None:
                c.execute(f"CREATE TABLESPACE chaos_small LOCATION '{space}'")
            ledger.setup(c, "chaos_small" if space is not None else None, spark=spark)
        yield cluster, dsn, space


def _rates(base: Base) -> dict:
    out = {"produced": round(base.produced, 1), "consumed": round(base.consumed, 1)}
    if base.spark_lag is not None:
        out["spark_lag_ceiling"] = round(base.spark_lag, 1)
    return out


def _describe(base: Base) -> str:
    out = f"{base.produced:.0f} produced/s, {base.consumed:.0f} consumed/s"
    if base.spark_lag is not None:
        out += f", Spark backlog up to {base.spark_lag:.0f}"
    return out


def _with_spark(settings: Settings | None, spark: bool) -> Settings:
    return replace(settings or Settings(), spark=spark)


def _spark_words(load: Load) -> str:
    return f"; Spark: {describe(load.spark.summary())}" if load.spark is not None else ""


def run_scenario(sc: Scenario, long: bool = False, settings: Settings | None = None,
                 log: Callable[[str], None] = _log, spark: bool = False) -> dict:
    """spark: the Spark query joins the load (every scenario has room for it)."""
    timing = Timing.of(long)
    t_start = time.monotonic()
    settings = _with_spark(settings, spark)
    log(f"{sc.name}: {sc.title} ({'long' if long else 'short'}"
        f"{', with Spark' if settings.spark else ''})")
    with _server(sc.cluster_settings, sc.small_fs_mb, settings.spark,
                 sc.standby) as (cluster, dsn, space):
        book = ledger.Book()
        load = Load(dsn, book, settings, dsn_options=dict(sc.dsn_options))
        sampler = Sampler(dsn, load.meter, timing.sample)
        try:
            load.start()
            sampler.start()
            load.wait_warm()
            time.sleep(timing.warmup)
            base_from = load.meter.now()
            time.sleep(timing.baseline)
            base = baseline_rates(load, base_from, load.meter.now())
            log(f"{sc.name}: pre-fault {_describe(base)}")
            sampler.phase = "fault"
            fault_start = load.meter.now()
            ctx = faults.Ctx(cluster, dsn, load, long, lambda m: log(f"{sc.name}: {m}"),
                             partial(wait_recovered, load, base), space=space)
            fault = sc.inject(ctx)
            sampler.phase = "recovery"
            wait_recovered(load, base, fault.ends[-1], OBSERVE_LIMIT)
            time.sleep(1.0)
            upto = load.meter.now()
            recoveries = [recovery_after(load, base, end, upto) for end in fault.ends]
            during = baseline_rates(load, fault_start, fault.ends[-1])
            sampler.phase = "drain"
            load.finish_producing()
            left, drain_s = _drain(dsn, load, DRAIN_LIMIT)
        finally:
            load.finish()
            sampler.stop()
        with psycopg.connect(dsn, autocommit=True) as c:
            verdict = ledger.check(c, book, crashed=sc.crashes)
        bloat = {"before_fault": sampler.peaks(base_from, fault_start),
                 "during_fault": sampler.peaks(fault_start, fault.ends[-1] + timing.sample),
                 "after": sampler.peaks(fault.ends[-1] + timing.sample, load.meter.now())}
    rec_ok = all(r is not None and r <= RECOVERY_LIMIT for r in recoveries)
    result = {
        "name": sc.name, "title": sc.title, "mode": "long" if long else "short",
        "faults": fault.what, "injected": fault.injected, "fault_details": fault.details,
        "baseline_rates": _rates(base),
        "rates_during_fault": {"produced": round(during.produced, 1),
                               "consumed": round(during.consumed, 1)},
        "fault_ends_s": [round(e, 1) for e in fault.ends],
        "recovery_seconds": recoveries,
        "recovery_ok": rec_ok,
        "ledger": verdict.as_dict(),
        "left_after_drain": left, "drain_seconds": drain_s,
        "client_errors": dict(book.errors),
        "worker": vars(load.worker.totals) if load.worker else None,
        "client_consume_restarts": load.client_crashes,
        "spark": spark_figures(load, base, fault.ends, upto),
        "bloat": bloat, "sampler_missed": sampler.missed,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    result["ok"] = verdict.ok and rec_ok
    log(f"{sc.name}: {'OK' if result['ok'] else 'FAILED'}: {fault.what}; "
        f"{verdict.checked} messages checked, {verdict.lost} lost, {verdict.beyond_rules} beyond "
        f"the rules, {verdict.redeliveries} redeliveries; recovery {recoveries} s"
        f"{_spark_words(load)}")
    return result


# -- the soak ---------------------------------------------------------------------------------

def _soak_faults(long: bool) -> list[tuple[str, Callable[[faults.Ctx], faults.Fault]]]:
    """The soak's periodic faults, shorter than the scenarios' (they repeat)."""

    def kill_some(ctx: faults.Ctx) -> faults.Fault:
        with faults.admin_connection(ctx.dsn) as admin:
            rows = admin.execute(faults.VICTIMS_SQL).fetchall()
            victims = ctx.rng.sample(rows, min(3, len(rows)))
            for pid, _ in victims:
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        return faults.Fault(len(victims), f"{len(victims)} backends terminated", [ctx.now()])

    def one_restart(ctx: faults.Ctx) -> faults.Fault:
        ctx.cluster.crash_restart()
        return faults.Fault(1, "1 immediate restart", [ctx.now()])

    def short_hold(ctx: faults.Ctx) -> faults.Fault:
        seconds = 60 if long else 5
        with faults.admin_connection(ctx.dsn) as holder:
            holder.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            holder.execute("SELECT 1")
            time.sleep(seconds)
            holder.execute("COMMIT")
        return faults.Fault(1, f"xmin held {seconds} s", [ctx.now()])

    def tiny_timeout(ctx: faults.Ctx) -> faults.Fault:
        ctx.load.consumer_setting.update(statement_timeout="3ms")
        time.sleep(10 if long else 3)
        ctx.load.consumer_setting.clear()
        return faults.Fault(1, "consumers' statement_timeout 3 ms", [ctx.now()])

    return [("terminate", kill_some), ("restart", one_restart), ("xmin", short_hold),
            ("timeouts", tiny_timeout)]


def run_soak(minutes: float, long: bool = False, fault_every: float | None = None,
             settings: Settings | None = None, log: Callable[[str], None] = _log,
             spark: bool = False) -> dict:
    fault_every = fault_every or (120.0 if long else 15.0)
    sample = 10.0 if long else 2.0
    t_start = time.monotonic()
    settings = _with_spark(settings, spark)
    log(f"soak: {minutes:g} min, a fault every {fault_every:g} s, a sample every {sample:g} s"
        f"{', with Spark' if spark else ''}")
    events: list[dict] = []
    with _server({}, 0, spark) as (cluster, dsn, _):
        book = ledger.Book()
        load = Load(dsn, book, settings)
        sampler = Sampler(dsn, load.meter, sample)
        try:
            load.start()
            sampler.start()
            load.wait_warm()
            # the soak's clock starts once every consumer runs (Spark's start is not soaked)
            t0 = load.meter.now()
            duration = t0 + minutes * 60
            warmup = t0 + min(10.0, minutes * 10)
            time.sleep(warmup - t0)
            base = baseline_rates(load, t0 + 1.0, load.meter.now())
            plan = _soak_faults(long)
            next_fault, k = warmup + fault_every / 2, 0
            while load.meter.now() < duration:
                if load.meter.now() >= next_fault and duration - load.meter.now() > 10:
                    name, inject = plan[k % len(plan)]
                    ctx = faults.Ctx(cluster, dsn, load, long, lambda m: log(f"soak: {m}"),
                                     partial(wait_recovered, load, base))
                    f = inject(ctx)
                    events.append({"fault": name, "what": f.what, "injected": f.injected,
                                   "end_s": round(f.ends[-1], 1)})
                    k += 1
                    next_fault = load.meter.now() + fault_every
                time.sleep(0.25)
            upto = load.meter.now()
            for e in events:
                e["recovery_seconds"] = recovery_after(load, base, e["end_s"], upto)
            load.finish_producing()
            left, drain_s = _drain(dsn, load, DRAIN_LIMIT)
        finally:
            load.finish()
            sampler.stop()
        with psycopg.connect(dsn, autocommit=True) as c:
            verdict = ledger.check(c, book, crashed=any(e["fault"] == "restart" for e in events))
    window = min(steady.WINDOW, (duration - warmup) / 4)
    flat = sampler.flat((warmup, warmup + window), (duration - window, duration))
    recs = [e["recovery_seconds"] for e in events]
    rec_ok = all(r is not None and r <= RECOVERY_LIMIT for r in recs)
    result = {
        "name": "soak", "title": f"soak: {minutes:g} min of steady mixed load with periodic "
        "faults", "mode": "long" if long else "short",
        "faults": f"{len(events)} faults (" + ", ".join(
            f"{n} {name}" for name, n in _count(e["fault"] for e in events)) + ")",
        "injected": sum(e["injected"] for e in events), "events": events,
        "baseline_rates": _rates(base),
        "recovery_seconds": recs, "recovery_ok": rec_ok, "ledger": verdict.as_dict(),
        "left_after_drain": left, "drain_seconds": drain_s, "client_errors": dict(book.errors),
        "worker": vars(load.worker.totals) if load.worker else None,
        "client_consume_restarts": load.client_crashes,
        "spark": spark_figures(load, base, [e["end_s"] for e in events], upto),
        "flat": flat, "flat_windows_s": [[warmup, warmup + window], [duration - window,
                                                                     duration]],
        "samples": {t: [s.as_dict() for s in ss] for t, ss in sampler.samples.items()},
        "sampler_missed": sampler.missed,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    result["ok"] = verdict.ok and rec_ok
    log(f"soak: {'OK' if result['ok'] else 'FAILED'}: {result['faults']}; {verdict.checked} "
        f"messages checked, {verdict.lost} lost, {verdict.beyond_rules} beyond the rules; "
        f"tables {'flat' if flat['flat'] else 'NOT flat'}{_spark_words(load)}")
    return result


def _count(names) -> list[tuple[str, int]]:
    out: dict[str, int] = {}
    for n in names:
        out[n] = out.get(n, 0) + 1
    return list(out.items())
