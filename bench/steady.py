"""Steady state and a held xmin horizon: ``python3 -m bench steady`` (`make bench-steady`).

    python3 -m bench steady [--minutes 10] [--rate 1000] [--producers 2]
        [--consumers 2] [--consume read|pop] [--batch 10] [--poll-ms 50] [--sample 10]
        [--hold-at 4m] [--hold-seconds 120] [--warmup 60] [--upstream] [--dsn DSN] [--json PATH]

One queue (pgmq.create('bench'), as the bench's workloads make it, in a database of its own,
pgmq_steady), fed by paced producers and drained by consumers for --minutes, with autovacuum
on at the server's settings (printed in the header; the throwaway server keeps PostgreSQL's
defaults for them). Producers: --producers threads, one autocommit connection each, each sending
one message per ``pgmq.send`` call on a fixed schedule (together --rate messages a second; a
producer that falls behind its schedule catches up back to back). Consumers: --consumers
threads, one connection each, looping ``pgmq.read(q, 30, --batch)`` + ``pgmq.delete(q, ids)`` in
one transaction (--consume read, the default) or ``pgmq.pop(q, --batch)`` (--consume pop); a
consumer whose read came back short of --batch (the queue is drained) sleeps --poll-ms.

Every --sample seconds it records (one row on stdout as it goes): messages sent and consumed in
the interval (achieved rates), queue depth (sent - consumed so far, from the clients'
counters: the sampler never scans the table), pg_table_size (heap, TOAST, FSM and VM) and
pg_indexes_size of the queue table, n_dead_tup / n_live_tup and autovacuum_count from
pg_stat_user_tables, the oldest backend_xmin's age in the database, the p50 / p99 latency of one
consumer operation (read + delete transaction, or pop, that got messages; measured by the
client, so it includes the client's own time), the server CPU of the consumers' backends per
consumed message (server.py's /proc reading; "?" for a remote server) and the shared-buffer
accesses (hit + read, pg_statio_user_tables: heap, indexes, TOAST) of the queue table per
consumed message: the work per message, which unlike time and CPU does not depend on what else
the machine is doing (it includes the producers' inserts, a few per message, and autovacuum's
passes over the table), and the sequential scans of the queue table per consumer call
(pg_stat_user_tables.seq_scan; the sampler itself never scans it): a read planned as an index
scan makes none, one planned as a Seq Scan + Sort (the plan some autoanalyze statistics of a
nearly empty queue table lead to) reads the whole table every call.

The xmin hold: at --hold-at (default after minute 4) a separate connection runs ``BEGIN
ISOLATION LEVEL REPEATABLE READ; SELECT 1`` and keeps the transaction open for --hold-seconds
(default 120; 0: no hold), then commits. Its snapshot holds back the xmin horizon of the
database, so neither autovacuum nor the consumers' index scans can remove the deleted and
updated versions. The summary compares the consumers before the hold (after --warmup), during it
and after it (throughput, p50 / p99), says how long after the release each of throughput, p50,
p99 and the backlog came back within 10 % of before (the first sample from which
RECOVERY_RUN samples in a row are), and how table size, index size and dead tuples grew
during the hold and whether they shrank or stopped growing after it.

"Flat": over a later minute, the max of table size (and index size) is at most FLAT_FACTOR x
the max over an earlier minute + FLAT_BYTES (dead tuples: + FLAT_ROWS). Judged for the first
steady minute (after --warmup) vs the last minute before the hold, vs the last minute of the
run, and for the minute after the release vs the last minute.

At the end producers and consumers stop (each finishes its current call), and the run checks
that nothing was lost: sent = consumed + left in the queue, and no message consumed twice.
--upstream also runs the same schedule, afterwards, on upstream PGMQ (the bench's SQL-only
install from the PyPI package pgmq, in database pgmq_steady_upstream). Without --dsn it starts
the bench's throwaway server (run.py's CLUSTER_SETTINGS); the databases are dropped at the end.

--streams runs the same kind of schedule on a stream instead (steady_streams.py).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import psycopg

from .report import OURS, UPSTREAM
from .run import (
    check_dsn,
    log,
    on_server,
    prepare_database,
    prepare_upstream_database,
)
from .server import Meter, backend_ticks, ticks_to_us
from .workloads import PGMQ, PGMQ_TABLE, QUEUE, pgmq_send, reset_queue

STEADY_DB = "pgmq_steady"
STEADY_UPSTREAM_DB = "pgmq_steady_upstream"
VT = 30  # the consumers' visibility timeout (s): never reached, read and delete share a transaction
FLAT_FACTOR = 1.2
FLAT_BYTES = 1 << 20
FLAT_ROWS = 1000
RECOVERY_TOLERANCE = 0.10  # "back within 10 % of before"
RECOVERY_RUN = 3  # samples in a row within it
WINDOW = 60.0  # "a minute" of the flat rule
SEQ_SCAN_SAMPLE = 0.5  # a sample whose consumer calls mostly scanned the whole table

AUTOVACUUM_SETTINGS = (
    "autovacuum", "autovacuum_naptime", "autovacuum_max_workers",
    "autovacuum_vacuum_threshold", "autovacuum_vacuum_scale_factor",
    "autovacuum_vacuum_insert_threshold", "autovacuum_vacuum_insert_scale_factor",
    "autovacuum_analyze_threshold", "autovacuum_analyze_scale_factor",
    "autovacuum_vacuum_cost_delay", "autovacuum_vacuum_cost_limit", "vacuum_cost_limit",
)
OTHER_SETTINGS = ("server_version", "fsync", "synchronous_commit", "shared_buffers",
                  "checkpoint_timeout", "max_wal_size")

READ_SQL = "SELECT msg_id FROM pgmq.read(%s, %s, %s)"
DELETE_SQL = "SELECT pgmq.delete(%s, %s::bigint[])"
POP_SQL = "SELECT msg_id FROM pgmq.pop(%s, %s)"


# --- options -------------------------------------------------------------------------------------

def parse_duration(text: str) -> float:
    """Seconds from '240', '240s', '4m' or '1.5m'."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|m|min)?\s*", text)
    if not m:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 240, 240s, 4m)")
    return float(m.group(1)) * (60 if m.group(2) in ("m", "min") else 1)


@dataclass(frozen=True)
class Config:
    minutes: float = 10.0
    rate: float = 1000.0
    producers: int = 2
    consumers: int = 2
    consume: str = "read"  # read (read N + delete, one transaction) or pop
    batch: int = 10
    poll_ms: float = 50.0
    sample: float = 10.0
    hold_at: float = 240.0
    hold_seconds: float = 120.0
    warmup: float = 60.0

    @property
    def duration(self) -> float:
        return self.minutes * 60

    @property
    def hold(self) -> bool:
        return self.hold_seconds > 0

    @property
    def hold_end(self) -> float:
        return self.hold_at + self.hold_seconds

    @property
    def steady_from(self) -> float:
        """End of the warm-up: at most half the time before the hold (short runs)."""
        limit = self.hold_at if self.hold else self.duration
        return min(self.warmup, limit / 2)

    def describe(self) -> str:
        op = (f"read {self.batch} + delete in one transaction" if self.consume == "read"
              else f"pop {self.batch}")
        hold = (f"xmin hold {self.hold_at:g}-{self.hold_end:g} s" if self.hold else "no xmin hold")
        return (f"{self.rate:g} msg/s from {self.producers} paced producer(s) (pgmq.send, one "
                f"message per call), {self.consumers} consumer(s) ({op}; {self.poll_ms:g} ms "
                f"sleep after a short read) | {self.minutes:g} min, a sample every "
                f"{self.sample:g} s, warm-up {self.steady_from:g} s | {hold}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench steady",
                                description=__doc__.split("\n\n")[0])
    d = Config()
    p.add_argument("--dsn", help=f"use this server instead of a throwaway one (database "
                   f"{STEADY_DB}, and {STEADY_UPSTREAM_DB} with --upstream, are created there, "
                   "replacing any old ones, and dropped at the end)")
    p.add_argument("--minutes", type=float, default=d.minutes, help="run length (default 10)")
    p.add_argument("--rate", type=float, default=d.rate,
                   help="messages a second, all producers together (default 1000)")
    p.add_argument("--producers", type=int, default=d.producers, help="default 2")
    p.add_argument("--consumers", type=int, default=d.consumers, help="default 2")
    p.add_argument("--consume", choices=("read", "pop"), default=d.consume,
                   help="read: pgmq.read N + pgmq.delete of the ids in one transaction "
                   "(default); pop: pgmq.pop N")
    p.add_argument("--batch", type=int, default=d.batch, help="N: messages per read or pop "
                   "(default 10)")
    p.add_argument("--poll-ms", type=float, default=d.poll_ms,
                   help="a consumer's sleep after a read that came back short (default 50)")
    p.add_argument("--sample", type=parse_duration, default=d.sample,
                   help="seconds between samples (default 10)")
    p.add_argument("--hold-at", type=parse_duration, default=d.hold_at,
                   help="when the xmin hold starts: seconds, or e.g. 4m, 5s (default 4m)")
    p.add_argument("--hold-seconds", type=parse_duration, default=d.hold_seconds,
                   help="how long it is held (default 120; 0: no hold)")
    p.add_argument("--warmup", type=parse_duration, default=d.warmup,
                   help="seconds not counted as steady: the 'before' window and the first "
                   "steady minute start after it (default 60; at most half of --hold-at)")
    p.add_argument("--upstream", action="store_true",
                   help="afterwards, the same run on upstream PGMQ (doubles the time)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    if not all(math.isfinite(v) for v in (args.minutes, args.rate, args.poll_ms)):
        p.error("--minutes, --rate and --poll-ms must be finite numbers (not nan or inf)")
    if args.minutes <= 0 or args.rate <= 0 or args.sample <= 0:
        p.error("--minutes, --rate and --sample must be positive")
    if args.producers < 1 or args.consumers < 1 or args.batch < 1 or args.poll_ms < 0:
        p.error("--producers, --consumers and --batch must be at least 1, --poll-ms >= 0")
    check_dsn(p, args.dsn)
    if args.hold_seconds < 0 or args.warmup < 0:
        p.error("--hold-seconds and --warmup must not be negative")
    if args.hold_seconds and args.hold_at + args.hold_seconds >= args.minutes * 60:
        p.error("the hold must end before the run does (--hold-at + --hold-seconds < --minutes)")
    args.config = Config(args.minutes, args.rate, args.producers, args.consumers, args.consume,
                         args.batch, args.poll_ms, args.sample, args.hold_at, args.hold_seconds,
                         args.warmup)
    return args


# --- the analysis (pure) -------------------------------------------------------------------------

@dataclass
class Sample:
    t: float  # scheduled end of the interval, seconds since the start
    dt: float  # its measured length
    phase: str  # warmup, before, hold, after (steady: a run without a hold)
    sent: int
    consumed: int
    ops: int  # consumer operations that got messages
    empty: int  # consumer operations that found the queue empty
    depth: int
    table_bytes: int
    index_bytes: int
    n_dead_tup: int
    n_live_tup: int
    autovacuum_count: int
    xmin_age: int | None
    p50_ms: float | None
    p99_ms: float | None
    consumer_cpu_us_per_msg: float | None
    producer_cpu_us_per_msg: float | None
    wal_bytes: int
    buffers: int = 0  # shared-buffer accesses of the queue table and its indexes in the interval
    seq_scans: int = 0  # sequential scans of the queue table in the interval

    @property
    def seq_per_call(self) -> float | None:
        calls = self.ops + self.empty
        return self.seq_scans / calls if calls else None

    @property
    def buffers_per_msg(self) -> float | None:
        return self.buffers / self.consumed if self.consumed else None

    @property
    def send_rate(self) -> float:
        return self.sent / self.dt if self.dt > 0 else 0.0

    @property
    def consume_rate(self) -> float:
        return self.consumed / self.dt if self.dt > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "send_rate": round(self.send_rate, 1),
                "consume_rate": round(self.consume_rate, 1),
                "buffers_per_msg": _r(self.buffers_per_msg, 1),
                "seq_scans_per_call": _r(self.seq_per_call, 3)}


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..1) of unsorted values; None for none."""
    if not values:
        return None
    s = sorted(values)
    return s[max(0, math.ceil(q * len(s)) - 1)]


def phase_of(cfg: Config, t: float, dt: float) -> str:
    """The phase of the sample interval (t - dt, t] (scheduled times)."""
    if cfg.hold and t > cfg.hold_at + 1e-6 and t - dt < cfg.hold_end - 1e-6:
        return "hold"
    if t <= cfg.steady_from + 1e-6:
        return "warmup"
    if not cfg.hold:
        return "steady"
    return "before" if t <= cfg.hold_at + 1e-6 else "after"


def in_window(samples: list[Sample], start: float, end: float) -> list[Sample]:
    """The samples whose interval ends in (start, end]."""
    return [s for s in samples if start + 1e-6 < s.t <= end + 1e-6]


@dataclass
class Op:
    t: float  # when it finished, seconds since the start
    seconds: float
    msgs: int


def phase_stats(ops: list[Op], samples: list[Sample], start: float, end: float) -> dict:
    """Consumers over (start, end]: throughput from the operations that ended in it, p50/p99 of
    their latency, and from the samples the send rate and consumers' server CPU per message."""
    mine = [o for o in ops if start < o.t <= end]
    lat = [o.seconds * 1000 for o in mine]
    sams = in_window(samples, start, end)
    consumed = sum(o.msgs for o in mine)
    span = end - start
    cpu = [s.consumer_cpu_us_per_msg for s in sams]
    cpu_known = sams and all(c is not None for c in cpu)
    cons = sum(s.consumed for s in sams)
    return {
        "from_s": round(start, 1), "to_s": round(end, 1),
        "consumed": consumed,
        "consume_rate": round(consumed / span, 1) if span > 0 else None,
        "send_rate": (round(sum(s.sent for s in sams) / sum(s.dt for s in sams), 1)
                      if sams else None),
        "ops": len(mine),
        "msgs_per_op": round(consumed / len(mine), 2) if mine else None,
        "p50_ms": _r(percentile(lat, 0.50), 3),
        "p99_ms": _r(percentile(lat, 0.99), 3),
        "consumer_cpu_us_per_msg": (round(sum(c * s.consumed for c, s in zip(cpu, sams,
                                                                                strict=True))
                                          / cons, 1) if cpu_known and cons else None),
        "buffers_per_msg": round(sum(s.buffers for s in sams) / cons, 1) if cons else None,
        "samples": len(sams),
        "seq_scan_samples": sum(1 for s in sams if s.seq_per_call is not None
                                and s.seq_per_call > SEQ_SCAN_SAMPLE),
    }


def _r(v: float | None, nd: int) -> float | None:
    return None if v is None else round(v, nd)


def recovery(samples: list[Sample], release: float, ok: Callable[[Sample], bool],
             run: int = RECOVERY_RUN) -> float | None:
    """Seconds from the release to the end of the first sample after it from which `run`
    samples in a row (or all that remain, if fewer) are ok; None if there is none."""
    after = [s for s in samples if s.t > release + 1e-6]
    for i, s in enumerate(after):
        if all(ok(x) for x in after[i:i + run]):
            return round(s.t - release, 1)
    return None


def flat(earlier: list[Sample], later: list[Sample]) -> dict:
    """The flat rule for table size, index size and dead tuples: max over `later` <= FLAT_FACTOR
    x max over `earlier` + FLAT_BYTES (FLAT_ROWS for dead tuples)."""
    out: dict = {}
    if not earlier or not later:
        return {"judged": False}
    for key, slack in (("table_bytes", FLAT_BYTES), ("index_bytes", FLAT_BYTES),
                       ("n_dead_tup", FLAT_ROWS)):
        a = max(getattr(s, key) for s in earlier)
        b = max(getattr(s, key) for s in later)
        out[key] = {"earlier_max": a, "later_max": b, "ratio": _r(b / a, 3) if a else None,
                    "flat": b <= FLAT_FACTOR * a + slack}
    out["judged"] = True
    out["flat"] = all(out[k]["flat"] for k in ("table_bytes", "index_bytes", "n_dead_tup"))
    return out


def _at(samples: list[Sample], t: float) -> Sample | None:
    """The last sample ending at or before t."""
    before = [s for s in samples if s.t <= t + 1e-6]
    return before[-1] if before else None


def summarize(cfg: Config, samples: list[Sample], ops: list[Op], hold_times: tuple | None,
              messages: dict) -> dict:
    """Everything the report says after the table, as data."""
    end = samples[-1].t if samples else cfg.duration
    s0 = cfg.steady_from
    summary: dict = {"messages": messages}
    first = in_window(samples, s0, min(s0 + WINDOW, cfg.hold_at if cfg.hold else end))
    last = in_window(samples, max(end - WINDOW, cfg.hold_end if cfg.hold else s0), end)
    windows = {"first_steady_minute": first, "last_minute": last}
    flats = {"whole_run": flat(first, last)}
    if cfg.hold:
        pre = in_window(samples, max(s0, cfg.hold_at - WINDOW), cfg.hold_at)
        post = in_window(samples, cfg.hold_end, min(cfg.hold_end + WINDOW, end))
        windows.update(last_minute_before_hold=pre, minute_after_release=post)
        flats = {"before_hold": flat(first, pre), "whole_run": flat(first, last),
                 "after_hold": flat(post, last)}
    summary["windows"] = {k: {"from_s": round(v[0].t - v[0].dt, 1), "to_s": v[-1].t,
                              "max_table_bytes": max(s.table_bytes for s in v),
                              "max_index_bytes": max(s.index_bytes for s in v),
                              "max_n_dead_tup": max(s.n_dead_tup for s in v)} if v else None
                          for k, v in windows.items()}
    summary["flat"] = flats
    if not cfg.hold:
        summary["steady"] = phase_stats(ops, samples, s0, end)
        return summary
    start, stop = hold_times or (cfg.hold_at, cfg.hold_end)
    before = phase_stats(ops, samples, s0, start)
    during = phase_stats(ops, samples, start, stop)
    after = phase_stats(ops, samples, stop, end)
    hold: dict = {"held_from_s": round(start, 2), "held_to_s": round(stop, 2),
                  "before": before, "during": during, "after": after}
    in_hold = [s for s in samples if s.phase == "hold"]
    hold["max_xmin_age"] = max((s.xmin_age or 0 for s in in_hold), default=None)
    hold["slowdown"] = {
        "p50": _r(_ratio(during["p50_ms"], before["p50_ms"]), 2),
        "p99": _r(_ratio(during["p99_ms"], before["p99_ms"]), 2),
        "throughput": _r(_ratio(during["consume_rate"], before["consume_rate"]), 3),
        "worst_sample_p50": _r(_ratio(max((s.p50_ms or 0 for s in in_hold), default=None),
                                      before["p50_ms"]), 2),
        "worst_sample_p99": _r(_ratio(max((s.p99_ms or 0 for s in in_hold), default=None),
                                      before["p99_ms"]), 2),
        "buffers_per_msg": _r(_ratio(during["buffers_per_msg"], before["buffers_per_msg"]), 2),
        "consumer_cpu_us_per_msg": _r(_ratio(during["consumer_cpu_us_per_msg"],
                                             before["consumer_cpu_us_per_msg"]), 2),
    }
    pre_samples = in_window(samples, s0, cfg.hold_at)
    depth_bound = (max((s.depth for s in pre_samples), default=0) * (1 + RECOVERY_TOLERANCE)
                   + cfg.batch * cfg.consumers)
    tol = 1 + RECOVERY_TOLERANCE

    def bounded(key: str, ref: float | None) -> Callable[[Sample], bool]:
        return lambda s: ref is not None and getattr(s, key) is not None \
            and getattr(s, key) <= tol * ref

    checks = {
        "throughput": lambda s: bool(before["consume_rate"])
        and s.consume_rate >= (1 - RECOVERY_TOLERANCE) * before["consume_rate"],
        "p50": bounded("p50_ms", before["p50_ms"]),
        "p99": bounded("p99_ms", before["p99_ms"]),
        "backlog": lambda s: s.depth <= depth_bound,
    }
    rec = {k: recovery(samples, cfg.hold_end, f) for k, f in checks.items()}
    rec["all"] = (None if any(v is None for v in rec.values()) else max(rec.values()))
    # not part of "all" (not in the issue's terms), but load-independent: the work per message
    rec["buffers_per_msg"] = recovery(samples, cfg.hold_end, bounded("buffers_per_msg",
                                                                    before["buffers_per_msg"]))
    hold["recovery_seconds"] = rec
    hold["backlog_bound"] = round(depth_bound)
    at_start, at_release = _at(samples, cfg.hold_at), _at(samples, cfg.hold_end)
    after_samples = [s for s in samples if s.t > cfg.hold_end + 1e-6]
    growth = {}
    for key in ("table_bytes", "index_bytes", "n_dead_tup"):
        if at_start is None or at_release is None or not after_samples or not in_hold:
            continue
        a, b = getattr(at_start, key), getattr(at_release, key)
        pre_max = max((getattr(s, key) for s in pre), default=a)
        final = getattr(samples[-1], key)
        last_max = max((getattr(s, key) for s in last), default=final)
        if key == "n_dead_tup":  # a sawtooth between autovacuums: judged against the one before
            verdict = ("back to the pre-hold level" if last_max <= FLAT_FACTOR * pre_max + FLAT_ROWS
                       else "still above the pre-hold level")
        else:  # sizes: only a VACUUM truncation or a rewrite can shrink them
            verdict = ("shrank" if last_max < 0.9 * b else
                       "stopped growing" if last_max <= FLAT_FACTOR * b + FLAT_BYTES else
                       "kept growing")
        growth[key] = {"pre_hold_minute_max": pre_max, "at_hold_start": a,
                       "hold_peak": max(getattr(s, key) for s in in_hold), "at_release": b,
                       "during_hold": b - a, "after_peak": max(getattr(s, key) for s in after_samples),
                       "last_minute_max": last_max, "at_end": final, "after": verdict}
    hold["growth"] = growth
    summary["hold"] = hold
    return summary


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


# --- the report ----------------------------------------------------------------------------------

def _mb(v: float | None) -> str:
    return "?" if v is None else f"{v / 1048576:.1f}"


def _num(v: float | None, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


COLUMNS = [("t s", ">"), ("phase", "<"), ("sent/s", ">"), ("cons/s", ">"), ("depth", ">"),
           ("table MB", ">"), ("index MB", ">"), ("dead tup", ">"), ("live tup", ">"),
           ("autovac", ">"), ("xmin age", ">"), ("p50 ms", ">"), ("p99 ms", ">"),
           ("CPU µs/msg", ">"), ("buf/msg", ">"), ("seq/call", ">")]
WIDTHS = [6, 6, 7, 7, 7, 8, 8, 9, 8, 7, 8, 7, 7, 10, 7, 8]


def format_row(cells: list[str]) -> str:
    return " | ".join(f"{c:{a}{w}}" for c, (_, a), w in zip(cells, COLUMNS, WIDTHS, strict=True))


def table_header() -> str:
    head = format_row([name for name, _ in COLUMNS])
    return head + "\n" + "-+-".join("-" * w for w in WIDTHS)


def sample_row(s: Sample) -> str:
    return format_row([
        f"{s.t:g}", s.phase, f"{s.send_rate:,.0f}", f"{s.consume_rate:,.0f}", f"{s.depth:,}",
        _mb(s.table_bytes), _mb(s.index_bytes), f"{s.n_dead_tup:,}", f"{s.n_live_tup:,}",
        str(s.autovacuum_count), _num(s.xmin_age, ","), _num(s.p50_ms, ".2f"),
        _num(s.p99_ms, ".2f"), _num(s.consumer_cpu_us_per_msg, ".0f"),
        _num(s.buffers_per_msg, ".1f"), _num(s.seq_per_call, ".2f")])


def _seq_note(p: dict) -> str:
    return (f"samples in which the consumers' calls mostly scanned the whole table (seq scans "
            f"per call > {SEQ_SCAN_SAMPLE:g}): {p['seq_scan_samples']} of {p['samples']}")


def _secs(v: float | None, sample: float) -> str:
    return "not within the run" if v is None else f"{v:g} s" if v > sample else f"<= {v:g} s"


def format_summary(system: str, cfg: Config, summary: dict) -> str:
    out: list[str] = []
    m = summary["messages"]
    out.append(f"Summary ({system}):")
    lost = m["lost"]
    out.append(f"  messages: sent {m['sent']:,}, consumed {m['consumed']:,}, left in the queue "
               f"{m['left']:,}: " + ("nothing lost" if lost == 0 else f"{lost:,} LOST")
               + (", none consumed twice" if m["duplicates"] == 0
                  else f", {m['duplicates']:,} consumed twice"))
    out.append(f"  flat rule: over the later minute, max <= {FLAT_FACTOR:g} x the earlier "
               f"minute's max + 1 MB (dead tuples: + {FLAT_ROWS:,}); sizes are pg_table_size "
               "(heap + TOAST + FSM + VM) and pg_indexes_size")
    w = summary["windows"]
    names = [k for k in ("first_steady_minute", "last_minute_before_hold",
                         "minute_after_release", "last_minute") if k in w]
    label = {"first_steady_minute": "first steady min", "last_minute_before_hold":
             "last min before hold", "minute_after_release": "min after release",
             "last_minute": "last min"}
    head = f"  {'max over':<18}" + "".join(
        f" | {label[k] + (' ' + str(w[k]['from_s']) + '-' + str(w[k]['to_s']) + ' s' if w[k] else ''):>30}"
        for k in names)
    out.append(head)
    for key, title, fmt in (("max_table_bytes", "table MB", _mb),
                            ("max_index_bytes", "index MB", _mb),
                            ("max_n_dead_tup", "dead tuples", lambda v: f"{v:,}")):
        out.append(f"  {title:<18}" + "".join(
            f" | {fmt(w[k][key]) if w[k] else '-':>30}" for k in names))
    verdicts = {"before_hold": "steady before the hold (first steady min vs last min before it)",
                "whole_run": "whole run (first steady min vs last min)",
                "after_hold": "after the hold (min after release vs last min)"}
    for key, text in verdicts.items():
        f = summary["flat"].get(key)
        if f is None:
            continue
        if not f.get("judged"):
            out.append(f"  -> {text}: not judged (a window is empty)")
            continue
        parts = [f"{n} x{_num(f[k]['ratio'], '.2f')}{'' if f[k]['flat'] else ' (NOT flat)'}"
                 for k, n in (("table_bytes", "table"), ("index_bytes", "index"),
                              ("n_dead_tup", "dead"))]
        out.append(f"  -> {text}: {'flat' if f['flat'] else 'NOT flat'} ({', '.join(parts)})")
    if "steady" in summary:
        st = summary["steady"]
        out.append(f"  consumers: {_num(st['consume_rate'], ',.0f')} msg/s, p50 "
                   f"{_num(st['p50_ms'], '.2f')} ms, p99 {_num(st['p99_ms'], '.2f')} ms, "
                   f"{_num(st['buffers_per_msg'], '.1f')} buffer accesses per message; "
                   f"{_seq_note(st)}")
        return "\n".join(out)
    h = summary["hold"]
    out.append(f"  xmin hold: REPEATABLE READ transaction open {h['held_from_s']:g}-"
               f"{h['held_to_s']:g} s (oldest xmin age reached {_num(h['max_xmin_age'], ',')})")
    rows = [("consumed msg/s", "consume_rate", ",.0f"), ("sent msg/s", "send_rate", ",.0f"),
            ("msgs per op", "msgs_per_op", ".2f"), ("p50 ms", "p50_ms", ".2f"),
            ("p99 ms", "p99_ms", ".2f"), ("CPU µs/msg (cons.)", "consumer_cpu_us_per_msg", ".0f"),
            ("buffers/msg", "buffers_per_msg", ".1f"),
            ("seq-scan samples", "seq_scan_samples", "d")]
    phases = [("before", h["before"]), ("during", h["during"]), ("after", h["after"])]
    out.append(f"  {'':<18}" + "".join(
        f" | {n + ' ' + format(p['from_s'], 'g') + '-' + format(p['to_s'], 'g') + ' s':>22}"
        for n, p in phases))
    for title, key, fmt in rows:
        out.append(f"  {title:<18}" + "".join(f" | {_num(p[key], fmt):>22}" for _, p in phases))
    sd = h["slowdown"]
    out.append(f"  -> during the hold vs before: p50 x{_num(sd['p50'], '.2f')}, p99 "
               f"x{_num(sd['p99'], '.2f')}, throughput x{_num(sd['throughput'], '.3f')}; worst "
               f"sample of the hold: p50 x{_num(sd['worst_sample_p50'], '.2f')}, p99 "
               f"x{_num(sd['worst_sample_p99'], '.2f')}; consumers' server CPU per message "
               f"x{_num(sd['consumer_cpu_us_per_msg'], '.2f')}, buffer accesses per message "
               f"x{_num(sd['buffers_per_msg'], '.2f')}")
    out.append(f"  -> {_seq_note(h['before'])} before, {h['during']['seq_scan_samples']} of "
               f"{h['during']['samples']} during, {h['after']['seq_scan_samples']} of "
               f"{h['after']['samples']} after")
    r = h["recovery_seconds"]
    out.append(f"  -> back within {RECOVERY_TOLERANCE:.0%} of before after the release (first "
               f"sample from which {RECOVERY_RUN} in a row are; resolution {cfg.sample:g} s): "
               f"throughput {_secs(r['throughput'], cfg.sample)}, p50 {_secs(r['p50'], cfg.sample)}, "
               f"p99 {_secs(r['p99'], cfg.sample)}, backlog (depth <= {h['backlog_bound']:,}) "
               f"{_secs(r['backlog'], cfg.sample)}; buffer accesses per message "
               f"{_secs(r['buffers_per_msg'], cfg.sample)}")
    for key, title in (("table_bytes", "table"), ("index_bytes", "index")):
        g = h["growth"].get(key)
        if g:
            out.append(f"  -> {title}: {_mb(g['at_hold_start'])} MB at the hold's start, "
                       f"{_mb(g['at_release'])} MB at release ({g['during_hold'] / 1048576:+.1f} MB "
                       f"during the hold); after it: peak {_mb(g['after_peak'])} MB, last minute "
                       f"max {_mb(g['last_minute_max'])} MB, end {_mb(g['at_end'])} MB: {g['after']}")
    g = h["growth"].get("n_dead_tup")
    if g:
        out.append(f"  -> dead tuples (n_dead_tup, a sawtooth between autovacuums): max "
                   f"{g['pre_hold_minute_max']:,} over the minute before the hold, "
                   f"{g['hold_peak']:,} during it, {g['after_peak']:,} after the release, "
                   f"{g['last_minute_max']:,} over the last minute: {g['after']}")
    return "\n".join(out)


# --- the load ------------------------------------------------------------------------------------

def _connect(dsn: str) -> psycopg.Connection:
    return psycopg.connect(dsn, autocommit=True)


@dataclass
class Load:
    """Producer and consumer threads, one autocommit connection each (see the module doc)."""

    dsn: str
    cfg: Config
    t0: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)  # appended by consumers (atomic under the GIL)
    sent: list[int] = field(default_factory=list)
    consumed: list[int] = field(default_factory=list)
    empty: list[int] = field(default_factory=list)
    short_deletes: int = 0  # read but not deleted (should stay 0)
    duplicates: int = 0
    seen: set[int] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        cfg = self.cfg
        self.producer_conns = [_connect(self.dsn) for _ in range(cfg.producers)]
        self.consumer_conns = [_connect(self.dsn) for _ in range(cfg.consumers)]
        self.sent = [0] * cfg.producers
        self.consumed = [0] * cfg.consumers
        self.empty = [0] * cfg.consumers
        self.t0 = time.monotonic()
        self.threads = (
            [threading.Thread(target=self._guard, args=(self._produce, i, c), daemon=True)
             for i, c in enumerate(self.producer_conns)]
            + [threading.Thread(target=self._guard, args=(self._consume, i, c), daemon=True)
               for i, c in enumerate(self.consumer_conns)])
        for t in self.threads:
            t.start()

    @property
    def producer_pids(self) -> list[int]:
        return [c.info.backend_pid for c in self.producer_conns]

    @property
    def consumer_pids(self) -> list[int]:
        return [c.info.backend_pid for c in self.consumer_conns]

    def _guard(self, fn: Callable, i: int, conn: psycopg.Connection) -> None:
        try:
            fn(i, conn)
        except BaseException as exc:  # reported by the main thread
            self.errors.append(exc)
            self.stop.set()

    def _produce(self, i: int, conn: psycopg.Connection) -> None:
        cur = conn.cursor()
        interval = self.cfg.producers / self.cfg.rate
        due = self.t0 + interval * i / self.cfg.producers  # staggered
        while not self.stop.is_set():
            wait = due - time.monotonic()
            if wait > 0 and self.stop.wait(wait):
                break
            pgmq_send(cur)
            self.sent[i] += 1
            due += interval

    def _consume(self, i: int, conn: psycopg.Connection) -> None:
        cur = conn.cursor()
        cfg = self.cfg
        while not self.stop.is_set():
            t = time.monotonic()
            if cfg.consume == "pop":
                ids = [r[0] for r in cur.execute(POP_SQL, (QUEUE, cfg.batch)).fetchall()]
                done = ids
            else:
                with conn.transaction():
                    ids = [r[0] for r in cur.execute(READ_SQL, (QUEUE, VT, cfg.batch)).fetchall()]
                    done = ([r[0] for r in cur.execute(DELETE_SQL, (QUEUE, ids)).fetchall()]
                            if ids else [])
            t1 = time.monotonic()
            if done:
                self.ops.append(Op(t1 - self.t0, t1 - t, len(done)))
                with self._lock:
                    for m in done:
                        if m in self.seen:
                            self.duplicates += 1
                        else:
                            self.seen.add(m)
                    self.short_deletes += len(ids) - len(done)
            else:
                self.empty[i] += 1
            self.consumed[i] += len(done)
            if len(ids) < cfg.batch and cfg.poll_ms:
                self.stop.wait(cfg.poll_ms / 1000)

    def finish(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)
        for c in self.producer_conns + self.consumer_conns:
            c.close()


# --- one system's run ----------------------------------------------------------------------------

def stats_sql(table: str) -> str:
    """One row of the sampler's server-side figures for `table` (a trusted, qualified name):
    buffer accesses, table and index bytes, dead and live tuples, autovacuums, sequential
    scans, the oldest xmin's age in the database, the WAL position."""
    return f"""
SELECT (SELECT coalesce(io.heap_blks_read, 0) + coalesce(io.heap_blks_hit, 0)
             + coalesce(io.idx_blks_read, 0) + coalesce(io.idx_blks_hit, 0)
             + coalesce(io.toast_blks_read, 0) + coalesce(io.toast_blks_hit, 0)
             + coalesce(io.tidx_blks_read, 0) + coalesce(io.tidx_blks_hit, 0)
        FROM pg_statio_user_tables io WHERE io.relid = s.relid),
       pg_table_size(s.relid), pg_indexes_size(s.relid),
       s.n_dead_tup, s.n_live_tup, s.autovacuum_count, s.seq_scan,
       (SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()),
       pg_current_wal_lsn()::text
FROM pg_stat_user_tables s WHERE s.relid = '{table}'::regclass"""


STATS_SQL = stats_sql(PGMQ_TABLE)


def settings_of(conn: psycopg.Connection) -> dict:
    names = list(AUTOVACUUM_SETTINGS + OTHER_SETTINGS)
    rows = conn.execute("SELECT name, current_setting(name), source FROM pg_settings "
                        "WHERE name = ANY(%s)", (names,)).fetchall()
    got = {n: (v, src) for n, v, src in rows}
    return {n: {"value": got[n][0], "source": got[n][1]} for n in names if n in got}


def describe_autovacuum(s: dict) -> str:
    def v(name: str) -> str:
        return s.get(name, {}).get("value", "?")

    changed = [n for n in AUTOVACUUM_SETTINGS if s.get(n, {}).get("source") not in
               (None, "default")]
    return (f"autovacuum={v('autovacuum')}, naptime {v('autovacuum_naptime')}, "
            f"{v('autovacuum_max_workers')} workers, vacuum when dead > "
            f"{v('autovacuum_vacuum_threshold')} + {v('autovacuum_vacuum_scale_factor')} x "
            f"reltuples (inserts: {v('autovacuum_vacuum_insert_threshold')} + "
            f"{v('autovacuum_vacuum_insert_scale_factor')} x reltuples), cost delay "
            f"{v('autovacuum_vacuum_cost_delay')}, cost limit "
            f"{v('autovacuum_vacuum_cost_limit')} (vacuum_cost_limit {v('vacuum_cost_limit')})"
            + (" (server defaults)" if not changed else f" (changed from the defaults: "
               f"{', '.join(changed)})"))


def run_system(system: str, dsn: str, cfg: Config, emit: Callable[[str], None]) -> dict:
    """The whole schedule on the pgmq in `dsn`'s database; returns the result as data."""
    with _connect(dsn) as admin:
        reset_queue(admin, PGMQ)
        admin.execute(f"VACUUM ANALYZE {PGMQ_TABLE}")
        reloptions = admin.execute(
            "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", (PGMQ_TABLE,)).fetchone()[0]
        meter = Meter(admin)
        load = Load(dsn, cfg)
        events = [(k * cfg.sample, 0, "sample")
                  for k in range(1, int(cfg.duration / cfg.sample + 1e-9) + 1)]
        if not events or events[-1][0] < cfg.duration - 1e-6:
            events.append((cfg.duration, 0, "sample"))
        if cfg.hold:
            events += [(cfg.hold_at, 1, "hold"), (cfg.hold_end, 1, "release")]
        events.sort()
        samples: list[Sample] = []
        hold_conn: psycopg.Connection | None = None
        hold_times: list[float] = []
        emit(table_header())
        load.start()
        try:
            prev_ticks = (backend_ticks(load.producer_pids), backend_ticks(load.consumer_pids))
            prev_row = admin.execute(STATS_SQL).fetchone()
            prev_lsn, prev_blks, prev_seq = prev_row[8], prev_row[0], prev_row[6]
            prev_t, prev_sent, prev_cons, prev_empty, prev_ops = load.t0, 0, 0, 0, 0
            for at, _, kind in events:
                while not load.stop.is_set():
                    wait = load.t0 + at - time.monotonic()
                    if wait <= 0 or load.stop.wait(min(wait, 1.0)):
                        break
                if load.errors:
                    raise load.errors[0]
                if kind == "hold":
                    hold_conn = _connect(dsn)
                    hold_conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                    hold_conn.execute("SELECT 1")
                    hold_times.append(time.monotonic() - load.t0)
                    xmin = admin.execute("SELECT backend_xmin FROM pg_stat_activity WHERE pid = %s",
                                         (hold_conn.info.backend_pid,)).fetchone()[0]
                    log(f"{system}: {hold_times[-1]:.1f} s: xmin hold: REPEATABLE READ "
                        f"transaction open (pid {hold_conn.info.backend_pid}, xmin {xmin})")
                    continue
                if kind == "release":
                    assert hold_conn is not None
                    hold_conn.execute("COMMIT")
                    hold_conn.close()
                    hold_conn = None
                    hold_times.append(time.monotonic() - load.t0)
                    log(f"{system}: {hold_times[-1]:.1f} s: xmin hold released")
                    continue
                # a sample: the clients' counters first, then the server's
                now = time.monotonic()
                sent, cons, empty = sum(load.sent), sum(load.consumed), sum(load.empty)
                n_ops = len(load.ops)
                ticks = ((backend_ticks(load.producer_pids), backend_ticks(load.consumer_pids))
                         if meter.cpu else (None, None))
                row = admin.execute(STATS_SQL).fetchone()
                wal = admin.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint",
                                    (row[8], prev_lsn)).fetchone()[0]
                lat = [o.seconds * 1000 for o in load.ops[prev_ops:n_ops]]
                d_sent, d_cons = sent - prev_sent, cons - prev_cons

                def per_msg(now_t: int | None, before_t: int | None, msgs: int) -> float | None:
                    if now_t is None or before_t is None or not msgs:
                        return None
                    return round(ticks_to_us(now_t - before_t) / msgs, 1)

                s = Sample(
                    t=at, dt=round(now - prev_t, 3), phase=phase_of(cfg, at, at - (samples[-1].t if samples else 0.0)),
                    sent=d_sent, consumed=d_cons, ops=n_ops - prev_ops, empty=empty - prev_empty,
                    depth=sent - cons, table_bytes=row[1], index_bytes=row[2], n_dead_tup=row[3],
                    n_live_tup=row[4], autovacuum_count=row[5], xmin_age=row[7],
                    p50_ms=_r(percentile(lat, 0.5), 3), p99_ms=_r(percentile(lat, 0.99), 3),
                    consumer_cpu_us_per_msg=per_msg(ticks[1], prev_ticks[1], d_cons),
                    producer_cpu_us_per_msg=per_msg(ticks[0], prev_ticks[0], d_sent),
                    wal_bytes=int(wal), buffers=row[0] - prev_blks, seq_scans=row[6] - prev_seq)
                samples.append(s)
                emit(sample_row(s))
                prev_t, prev_sent, prev_cons, prev_empty, prev_ops = now, sent, cons, empty, n_ops
                prev_ticks, prev_lsn, prev_blks, prev_seq = ticks, row[8], row[0], row[6]
        finally:
            if hold_conn is not None:
                hold_conn.close()
            load.finish()
        if load.errors:
            raise load.errors[0]
        left_ids = {r[0] for r in admin.execute(f"SELECT msg_id FROM {PGMQ_TABLE}")}
        left = len(left_ids)
        sent, consumed = sum(load.sent), sum(load.consumed)
        messages = {"sent": sent, "consumed": consumed, "left": left,
                    "lost": sent - consumed - left, "duplicates": load.duplicates,
                    "consumed_and_left": len(left_ids & load.seen),
                    "read_not_deleted": load.short_deletes,
                    "empty_polls": sum(load.empty)}
        messages["lost"] += messages["consumed_and_left"]  # such a message was counted twice
        ops = list(load.ops)
        summary = summarize(cfg, samples, ops, tuple(hold_times) if len(hold_times) == 2
                            else None, messages)
        return {"system": system, "queue_reloptions": reloptions,
                "samples": [s.as_dict() for s in samples], "summary": summary,
                "server_cpu_measured": meter.cpu}


# --- the command ---------------------------------------------------------------------------------

def run(args: argparse.Namespace, dsn: str, server: str) -> int:
    cfg: Config = args.config
    t0 = time.monotonic()
    load_start = os.getloadavg()
    log(f"load average at the start: {' '.join(f'{x:.2f}' for x in load_start)}")
    ours_dsn, how = prepare_database(dsn, STEADY_DB)
    systems = [(OURS, ours_dsn, f"pgmq in {STEADY_DB}: {how}")]
    if args.upstream:
        up_dsn, version = prepare_upstream_database(dsn, STEADY_UPSTREAM_DB)
        systems.append((UPSTREAM, up_dsn, f"upstream PGMQ {version} (pgmq.sql from PyPI pgmq) "
                                          f"in {STEADY_UPSTREAM_DB}"))
    results = []
    try:
        with _connect(ours_dsn) as conn:
            settings = settings_of(conn)
            ext = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgmq'"
                               ).fetchone()
        header = (f"pgmq steady state | PostgreSQL {settings['server_version']['value']}, {server}"
                  f", fsync={settings['fsync']['value']}, synchronous_commit="
                  f"{settings['synchronous_commit']['value']}, checkpoint_timeout="
                  f"{settings['checkpoint_timeout']['value']}, max_wal_size="
                  f"{settings['max_wal_size']['value']} | ours: pgmq "
                  f"{ext[0] if ext else '(standalone script)'} | {os.cpu_count()} CPUs, load "
                  f"{load_start[0]:.2f} at the start\n{cfg.describe()}\n"
                  + describe_autovacuum(settings))
        print(header, flush=True)
        for system, sdsn, what in systems:
            print(f"\n{system}: {what}", flush=True)
            log(f"{system}: running for {cfg.minutes:g} min ...")
            res = run_system(system, sdsn, cfg, lambda line: print(line, flush=True))
            res["description"] = what
            results.append(res)
            print()
            print(format_summary(system, cfg, res["summary"]), flush=True)
    finally:
        with _connect(dsn) as conn:  # leave nothing behind on a --dsn server
            for db in (STEADY_DB, STEADY_UPSTREAM_DB):
                conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
    load_end = os.getloadavg()
    wall = time.monotonic() - t0
    print(f"\nload average (1, 5, 15 min) at the start {' '.join(f'{x:.2f}' for x in load_start)}"
          f", at the end {' '.join(f'{x:.2f}' for x in load_end)}; {wall:.0f} s in all. "
          "Latency: one consumer operation that got messages, timed by the client (its own "
          "time included). CPU µs/msg: the consumers' backends, utime + stime per consumed "
          "message ('?': not measurable here); buf/msg: shared-buffer accesses of the queue "
          "table and its indexes per consumed message (all clients and autovacuum); seq/call: "
          "sequential scans of the queue table per consumer call.")
    if args.json:
        out = {"server": server, "settings": settings, "config": asdict(cfg),
               "pgmq_version": ext[0] if ext else None, "cpus": os.cpu_count(),
               "loadavg_start": load_start, "loadavg_end": load_end,
               "wall_seconds": round(wall, 1),
               "rules": {"flat": f"later minute's max <= {FLAT_FACTOR} x earlier minute's max "
                                 f"+ {FLAT_BYTES} bytes ({FLAT_ROWS} dead tuples)",
                         "recovery": f"first sample after the release from which {RECOVERY_RUN} "
                                     f"in a row are within {RECOVERY_TOLERANCE:.0%} of before"},
               "results": results}
        with open(args.json, "w") as fh:
            fh.write(json.dumps(out, indent=2) + "\n")
        log(f"wrote {args.json}")
    bad = [r["system"] for r in results if r["summary"]["messages"]["lost"]
           or r["summary"]["messages"]["duplicates"]]
    if bad:
        log(f"messages lost or duplicated on {', '.join(bad)}")
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--streams" in argv:  # a stream instead of a queue: steady_streams.py
        from . import steady_streams

        rest = [a for a in argv if a != "--streams"]
        return on_server(steady_streams.parse_args(rest), steady_streams.run)
    return on_server(parse_args(argv), run)


if __name__ == "__main__":
    sys.exit(main())
