"""Steady state of a stream with a held xmin horizon: ``python3 -m bench steady --streams``.

    python3 -m bench steady --streams [--minutes 10] [--rate 1000] [--producers 2]
        [--subscriptions 2] [--poll-ms 50] [--sample 10] [--hold-at 4m] [--hold-seconds 120]
        [--warmup 60] [--rotation 1m] [--retention 1m] [--dsn DSN] [--json PATH]

One stream (pgmq.create_stream('bench_s', retention, rotation_period), in a database of its own,
pgmq_steady) fed by --producers paced threads (pgmq.stream_send, one event per call and
transaction; --rate events a second together) and read by one consumer per subscription
(--subscriptions), each looping stream_read + stream_ack in one transaction and sleeping
--poll-ms after a read that found nothing; a maintainer calls pgmq.stream_tick() every second (as
pg_cron would), which rotates the segments every --rotation and drops those past --retention
that every subscription has acknowledged. Autovacuum runs at the server's settings.

At --hold-at a separate connection opens a REPEATABLE READ transaction (its snapshot holds the
xmin horizon back) for --hold-seconds, as steady.py does for a queue. Every --sample seconds it
records events sent and delivered (all subscriptions), the backlog (the largest lag of a
subscription), the event tables' size, dead tuples and segment count (the parent pgmq.s_bench_s
and its segments: a stream never updates or deletes an event, so their dead tuples must stay 0),
the dead tuples of the streams' catalog rows (subscriptions, batches and ticks, which readers
update: they grow while the horizon is held), the oldest xmin's age, the p50 / p99 latency of a
consumer operation that got events and the consumers' server CPU per delivered event.

The summary compares the consumers before the hold (after --warmup), during it and after it:
throughput during the hold must stay within 10 % of before (the producers are paced, so the
consumers keep up unless the hold slows them down). At the end the producers stop, the consumers
drain what is left, and every subscription must have received every event sent exactly once.
The exit status is 1 when an event was lost or delivered twice or an event table had a dead
tuple.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import psycopg

from .run import check_dsn, log, prepare_database
from .server import Meter, backend_ticks, ticks_to_us
from .steady import (
    RECOVERY_TOLERANCE,
    STEADY_DB,
    _connect,
    _r,
    _ratio,
    describe_autovacuum,
    parse_duration,
    percentile,
    phase_of,
    settings_of,
)
from .streams import MESSAGE, STREAM

TICK_EVERY = 1.0  # seconds between the maintainer's stream_tick() calls
DRAIN_SECONDS = 60.0  # how long the consumers may take to catch up after the producers stop


# --- options -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Config:
    minutes: float = 10.0
    rate: float = 1000.0
    producers: int = 2
    subscriptions: int = 2
    poll_ms: float = 50.0
    sample: float = 10.0
    hold_at: float = 240.0
    hold_seconds: float = 120.0
    warmup: float = 60.0
    rotation: float = 60.0
    retention: float = 60.0

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
        limit = self.hold_at if self.hold else self.duration
        return min(self.warmup, limit / 2)

    def describe(self) -> str:
        hold = f"xmin hold {self.hold_at:g}-{self.hold_end:g} s" if self.hold else "no xmin hold"
        return (f"stream {STREAM}: {self.rate:g} events/s from {self.producers} paced producer(s) "
                f"(pgmq.stream_send, one event per transaction), {self.subscriptions} "
                f"subscription(s) with one consumer each (stream_read + stream_ack in one "
                f"transaction; {self.poll_ms:g} ms sleep after an empty read), stream_tick every "
                f"{TICK_EVERY:g} s, rotation every {self.rotation:g} s, retention {self.retention:g} s "
                f"| {self.minutes:g} min, a sample every {self.sample:g} s, warm-up "
                f"{self.steady_from:g} s | {hold}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python3 -m bench steady --streams",
                                description=__doc__.split("\n\n")[0])
    d = Config()
    p.add_argument("--dsn", help=f"use this server instead of a throwaway one (database {STEADY_DB} "
                   "is created there, replacing any old one, and dropped at the end)")
    p.add_argument("--minutes", type=float, default=d.minutes, help="run length (default 10)")
    p.add_argument("--rate", type=float, default=d.rate, help="events a second (default 1000)")
    p.add_argument("--producers", type=int, default=d.producers, help="default 2")
    p.add_argument("--subscriptions", type=int, default=d.subscriptions,
                   help="subscriptions, one consumer each (default 2)")
    p.add_argument("--poll-ms", type=float, default=d.poll_ms,
                   help="a consumer's sleep after a read that found nothing (default 50)")
    p.add_argument("--sample", type=parse_duration, default=d.sample, help="seconds between samples (default 10)")
    p.add_argument("--hold-at", type=parse_duration, default=d.hold_at, help="when the xmin hold starts (default 4m)")
    p.add_argument("--hold-seconds", type=parse_duration, default=d.hold_seconds,
                   help="how long it is held (default 120; 0: no hold)")
    p.add_argument("--warmup", type=parse_duration, default=d.warmup,
                   help="seconds not counted as steady (default 60; at most half of --hold-at)")
    p.add_argument("--rotation", type=parse_duration, default=d.rotation,
                   help="the stream's rotation_period (default 1m)")
    p.add_argument("--retention", type=parse_duration, default=d.retention,
                   help="the stream's retention (default 1m)")
    p.add_argument("--json", metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    if not all(math.isfinite(v) for v in (args.minutes, args.rate, args.poll_ms)):
        p.error("--minutes, --rate and --poll-ms must be finite numbers")
    if args.minutes <= 0 or args.rate <= 0 or args.sample <= 0:
        p.error("--minutes, --rate and --sample must be positive")
    if args.producers < 1 or args.subscriptions < 1 or args.poll_ms < 0:
        p.error("--producers and --subscriptions must be at least 1, --poll-ms >= 0")
    if args.rotation < 1 or args.retention < 0:
        p.error("--rotation must be at least 1 s and --retention not negative")
    check_dsn(p, args.dsn)
    if args.hold_seconds < 0 or args.warmup < 0:
        p.error("--hold-seconds and --warmup must not be negative")
    if args.hold_seconds and args.hold_at + args.hold_seconds >= args.minutes * 60:
        p.error("the hold must end before the run does (--hold-at + --hold-seconds < --minutes)")
    args.config = Config(args.minutes, args.rate, args.producers, args.subscriptions, args.poll_ms,
                         args.sample, args.hold_at, args.hold_seconds, args.warmup, args.rotation,
                         args.retention)
    return args


# --- the analysis (pure) -------------------------------------------------------------------------

class Ledger:
    """Which ev_ids were sent and which each subscription received: bitmaps (ev_ids count from 1)."""

    def __init__(self, subscriptions: list[str]) -> None:
        self.sent = bytearray()
        self.got = {s: bytearray() for s in subscriptions}
        self.duplicates = dict.fromkeys(subscriptions, 0)
        self.lock = threading.Lock()

    @staticmethod
    def _mark(bits: bytearray, i: int) -> bool:
        """Set bit i; whether it was set already."""
        byte, bit = divmod(i, 8)
        if byte >= len(bits):
            bits.extend(bytes(byte - len(bits) + 1 + 4096))
        was = bool(bits[byte] >> bit & 1)
        bits[byte] |= 1 << bit
        return was

    def sent_one(self, ev_id: int) -> None:
        with self.lock:
            self._mark(self.sent, ev_id)

    def received(self, sub: str, ev_ids: list[int]) -> None:
        with self.lock:
            for i in ev_ids:
                if self._mark(self.got[sub], i):
                    self.duplicates[sub] += 1

    @staticmethod
    def count(bits: bytearray) -> int:
        return sum(bin(b).count("1") for b in bits)

    def lost(self, sub: str) -> int:
        """Events sent that the subscription never received."""
        got = self.got[sub]
        got = got + bytes(max(0, len(self.sent) - len(got)))
        return sum(bin(s & ~g & 0xFF).count("1") for s, g in zip(self.sent, got, strict=False))

    def summary(self) -> dict:
        return {"sent": self.count(self.sent),
                "subscriptions": {s: {"received": self.count(self.got[s]), "lost": self.lost(s),
                                      "duplicates": self.duplicates[s]} for s in self.got}}


@dataclass
class Sample:
    t: float
    dt: float
    phase: str
    sent: int
    delivered: int  # events received, all subscriptions together
    ops: int
    backlog: int  # the largest lag of a subscription (events sent, not yet received)
    segments: int
    event_bytes: int
    event_dead: int  # n_dead_tup of the parent and every segment: must stay 0
    catalog_dead: dict[str, int]  # n_dead_tup of stream_subscriptions, stream_batches, stream_ticks
    xmin_age: int | None
    p50_ms: float | None
    p99_ms: float | None
    consumer_cpu_us_per_event: float | None

    @property
    def send_rate(self) -> float:
        return self.sent / self.dt if self.dt > 0 else 0.0

    @property
    def delivery_rate(self) -> float:
        return self.delivered / self.dt if self.dt > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "send_rate": round(self.send_rate, 1),
                "delivery_rate": round(self.delivery_rate, 1)}


@dataclass
class Op:
    t: float
    seconds: float
    events: int


def phase_stats(ops: list[Op], samples: list[Sample], start: float, end: float) -> dict:
    """The consumers over (start, end]: events delivered per second, p50/p99 of an operation,
    server CPU per delivered event, the largest backlog."""
    mine = [o for o in ops if start < o.t <= end]
    lat = [o.seconds * 1000 for o in mine]
    sams = [s for s in samples if start + 1e-6 < s.t <= end + 1e-6]
    delivered = sum(o.events for o in mine)
    cpu_known = sams and all(s.consumer_cpu_us_per_event is not None for s in sams)
    cons = sum(s.delivered for s in sams)
    return {
        "from_s": round(start, 1), "to_s": round(end, 1), "delivered": delivered,
        "delivery_rate": round(delivered / (end - start), 1) if end > start else None,
        "ops": len(mine), "events_per_op": round(delivered / len(mine), 2) if mine else None,
        "p50_ms": _r(percentile(lat, 0.50), 3), "p99_ms": _r(percentile(lat, 0.99), 3),
        "consumer_cpu_us_per_event": (round(sum(s.consumer_cpu_us_per_event * s.delivered for s in sams)
                                            / cons, 1) if cpu_known and cons else None),
        "max_backlog": max((s.backlog for s in sams), default=None),
        "max_catalog_dead": max((sum(s.catalog_dead.values()) for s in sams), default=None),
    }


def summarize(cfg: Config, samples: list[Sample], ops: list[Op], hold_times: tuple | None,
              ledger: dict) -> dict:
    end = samples[-1].t if samples else cfg.duration
    subs = ledger["subscriptions"].values()
    out: dict = {
        "events": ledger,
        "lost": sum(s["lost"] for s in subs), "duplicates": sum(s["duplicates"] for s in subs),
        "event_dead_max": max((s.event_dead for s in samples), default=0),
        "event_bytes_max": max((s.event_bytes for s in samples), default=0),
        "segments_max": max((s.segments for s in samples), default=0),
        "catalog_dead_max": {k: max((s.catalog_dead[k] for s in samples), default=0)
                             for k in (samples[0].catalog_dead if samples else {})},
    }
    if not cfg.hold:
        out["steady"] = phase_stats(ops, samples, cfg.steady_from, end)
        return out
    start, stop = hold_times or (cfg.hold_at, cfg.hold_end)
    phases = {"before": phase_stats(ops, samples, cfg.steady_from, start),
              "during": phase_stats(ops, samples, start, stop),
              "after": phase_stats(ops, samples, stop, end)}
    ratio = _ratio(phases["during"]["delivery_rate"], phases["before"]["delivery_rate"])
    out["hold"] = {"held_from_s": round(start, 2), "held_to_s": round(stop, 2), **phases,
                   "max_xmin_age": max((s.xmin_age or 0 for s in samples if s.phase == "hold"), default=None),
                   "throughput_ratio": _r(ratio, 3),
                   "throughput_within": ratio is not None and abs(ratio - 1) <= RECOVERY_TOLERANCE,
                   "p50_ratio": _r(_ratio(phases["during"]["p50_ms"], phases["before"]["p50_ms"]), 2),
                   "p99_ratio": _r(_ratio(phases["during"]["p99_ms"], phases["before"]["p99_ms"]), 2),
                   "cpu_ratio": _r(_ratio(phases["during"]["consumer_cpu_us_per_event"],
                                          phases["before"]["consumer_cpu_us_per_event"]), 2)}
    return out


def failed(summary: dict) -> list[str]:
    """What makes the run fail (exit 1)."""
    problems = []
    if summary["lost"]:
        problems.append(f"{summary['lost']:,} event(s) lost")
    if summary["duplicates"]:
        problems.append(f"{summary['duplicates']:,} event(s) delivered twice")
    if summary["event_dead_max"]:
        problems.append(f"{summary['event_dead_max']:,} dead tuple(s) in the event tables")
    return problems


# --- the report ----------------------------------------------------------------------------------

COLUMNS = [("t s", ">", 6), ("phase", "<", 6), ("sent/s", ">", 7), ("deliv/s", ">", 8),
           ("backlog", ">", 7), ("segs", ">", 4), ("events MB", ">", 9), ("ev dead", ">", 7),
           ("cat dead", ">", 8), ("xmin age", ">", 8), ("p50 ms", ">", 7), ("p99 ms", ">", 7),
           ("CPU µs/ev", ">", 9)]


def _num(v: float | None, fmt: str) -> str:
    return "?" if v is None else format(v, fmt)


def table_header() -> str:
    return (" | ".join(f"{n:{a}{w}}" for n, a, w in COLUMNS) + "\n"
            + "-+-".join("-" * w for _, _, w in COLUMNS))


def sample_row(s: Sample) -> str:
    cells = [f"{s.t:g}", s.phase, f"{s.send_rate:,.0f}", f"{s.delivery_rate:,.0f}", f"{s.backlog:,}",
             str(s.segments), f"{s.event_bytes / 1048576:.1f}", f"{s.event_dead:,}",
             f"{sum(s.catalog_dead.values()):,}", _num(s.xmin_age, ","), _num(s.p50_ms, ".2f"),
             _num(s.p99_ms, ".2f"), _num(s.consumer_cpu_us_per_event, ".0f")]
    return " | ".join(f"{c:{a}{w}}" for c, (_, a, w) in zip(cells, COLUMNS, strict=True))


def format_summary(cfg: Config, summary: dict) -> str:
    ev = summary["events"]
    lines = ["Summary (ours, a stream):",
             f"  events: sent {ev['sent']:,}; " + "; ".join(
                 f"{name} received {s['received']:,} (lost {s['lost']:,}, twice {s['duplicates']:,})"
                 for name, s in ev["subscriptions"].items()),
             f"  event tables (pgmq.s_{STREAM} and its segments): dead tuples max "
             f"{summary['event_dead_max']:,} ({'none, as it must be' if not summary['event_dead_max'] else 'NOT 0'}), "
             f"size max {summary['event_bytes_max'] / 1048576:.1f} MB over at most {summary['segments_max']} segments",
             "  catalog rows the readers update, dead tuples max: " + ", ".join(
                 f"{k} {v:,}" for k, v in summary["catalog_dead_max"].items())]
    if "steady" in summary:
        st = summary["steady"]
        lines.append(f"  consumers: {_num(st['delivery_rate'], ',.0f')} events/s delivered, p50 "
                     f"{_num(st['p50_ms'], '.2f')} ms, p99 {_num(st['p99_ms'], '.2f')} ms")
        return "\n".join(lines)
    h = summary["hold"]
    lines.append(f"  xmin hold: REPEATABLE READ transaction open {h['held_from_s']:g}-{h['held_to_s']:g} s "
                 f"(oldest xmin age reached {_num(h['max_xmin_age'], ',')})")
    rows = [("delivered events/s", "delivery_rate", ",.0f"), ("events per op", "events_per_op", ".1f"),
            ("p50 ms", "p50_ms", ".2f"), ("p99 ms", "p99_ms", ".2f"),
            ("CPU µs/event (cons.)", "consumer_cpu_us_per_event", ".1f"),
            ("max backlog", "max_backlog", ","), ("max catalog dead", "max_catalog_dead", ",")]
    phases = [(n, h[n]) for n in ("before", "during", "after")]
    lines.append(f"  {'':<20}" + "".join(
        f" | {n + ' ' + format(p['from_s'], 'g') + '-' + format(p['to_s'], 'g') + ' s':>22}" for n, p in phases))
    for title, key, fmt in rows:
        lines.append(f"  {title:<20}" + "".join(f" | {_num(p[key], fmt):>22}" for _, p in phases))
    lines.append(f"  -> during the hold vs before: throughput x{_num(h['throughput_ratio'], '.3f')} "
                 f"({'within' if h['throughput_within'] else 'NOT within'} {RECOVERY_TOLERANCE:.0%}), "
                 f"p50 x{_num(h['p50_ratio'], '.2f')}, p99 x{_num(h['p99_ratio'], '.2f')}, consumers' "
                 f"server CPU per event x{_num(h['cpu_ratio'], '.2f')}")
    return "\n".join(lines)


# --- the load ------------------------------------------------------------------------------------

EVENT_STATS_SQL = f"""
SELECT count(*) FILTER (WHERE c.relname <> 's_{STREAM}'), coalesce(sum(pg_table_size(c.oid)), 0)::bigint,
       coalesce(sum(pg_stat_get_dead_tuples(c.oid)), 0)::bigint
FROM pg_class c
WHERE c.oid = 'pgmq.s_{STREAM}'::regclass
   OR c.oid IN (SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = 'pgmq.s_{STREAM}'::regclass)"""
CATALOG = ("stream_subscriptions", "stream_batches", "stream_ticks")
CATALOG_STATS_SQL = ("SELECT relname, n_dead_tup FROM pg_stat_user_tables WHERE schemaname = 'pgmq' "
                     f"AND relname IN ({', '.join(repr(t) for t in CATALOG)})")
XMIN_SQL = ("SELECT coalesce(max(age(backend_xmin)), 0) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()")


def subscription_names(n: int) -> list[str]:
    return [f"sub{i}" for i in range(n)]


@dataclass
class Load:
    dsn: str
    cfg: Config
    ledger: Ledger
    t0: float = 0.0
    stop: threading.Event = field(default_factory=threading.Event)
    stop_producers: threading.Event = field(default_factory=threading.Event)
    errors: list[BaseException] = field(default_factory=list)
    ops: list[Op] = field(default_factory=list)
    sent: list[int] = field(default_factory=list)
    received: dict[str, int] = field(default_factory=dict)

    def start(self) -> None:
        cfg = self.cfg
        subs = subscription_names(cfg.subscriptions)
        self.producer_conns = [_connect(self.dsn) for _ in range(cfg.producers)]
        self.consumer_conns = {s: _connect(self.dsn) for s in subs}
        self.tick_conn = _connect(self.dsn)
        self.sent = [0] * cfg.producers
        self.received = dict.fromkeys(subs, 0)
        self.t0 = time.monotonic()
        self.threads = ([threading.Thread(target=self._guard, args=(self._produce, i, c), daemon=True)
                         for i, c in enumerate(self.producer_conns)]
                        + [threading.Thread(target=self._guard, args=(self._consume, s, c), daemon=True)
                           for s, c in self.consumer_conns.items()]
                        + [threading.Thread(target=self._guard, args=(self._tick, 0, self.tick_conn),
                                            daemon=True)])
        for t in self.threads:
            t.start()

    @property
    def consumer_pids(self) -> list[int]:
        return [c.info.backend_pid for c in self.consumer_conns.values()]

    def _guard(self, fn: Callable, who: object, conn: psycopg.Connection) -> None:
        try:
            fn(who, conn)
        except BaseException as exc:  # reported by the main thread
            self.errors.append(exc)
            self.stop.set()

    def _produce(self, i: int, conn: psycopg.Connection) -> None:
        cur = conn.cursor()
        interval = self.cfg.producers / self.cfg.rate
        due = self.t0 + interval * i / self.cfg.producers
        while not (self.stop.is_set() or self.stop_producers.is_set()):
            wait = due - time.monotonic()
            if wait > 0 and self.stop_producers.wait(wait):
                break
            cur.execute("SELECT pgmq.stream_send(%s, %s::jsonb)", (STREAM, MESSAGE))
            self.ledger.sent_one(cur.fetchone()[0])
            self.sent[i] += 1
            due += interval

    def _consume(self, sub: str, conn: psycopg.Connection) -> None:
        cur = conn.cursor()
        while not self.stop.is_set():
            t = time.monotonic()
            with conn.transaction():
                rows = cur.execute("SELECT batch_id, ev_id FROM pgmq.stream_read(%s, %s, 30)",
                                   (STREAM, sub)).fetchall()
                if rows:
                    cur.execute("SELECT pgmq.stream_ack(%s, %s, %s)", (STREAM, sub, rows[0][0]))
            t1 = time.monotonic()
            if rows:
                self.ledger.received(sub, [r[1] for r in rows])
                self.ops.append(Op(t1 - self.t0, t1 - t, len(rows)))
                self.received[sub] += len(rows)
            elif self.cfg.poll_ms:
                self.stop.wait(self.cfg.poll_ms / 1000)

    def _tick(self, _: object, conn: psycopg.Connection) -> None:
        while not self.stop.wait(TICK_EVERY):
            conn.execute("SELECT pgmq.stream_tick(%s)", (STREAM,))

    def backlog(self) -> int:
        sent = sum(self.sent)
        return max((sent - n for n in self.received.values()), default=0)

    def drain(self, seconds: float) -> None:
        """Producers stop; consumers go on until every subscription has everything sent."""
        self.stop_producers.set()
        deadline = time.monotonic() + seconds
        while self.backlog() > 0 and time.monotonic() < deadline and not self.errors:
            time.sleep(0.05)

    def finish(self) -> None:
        self.stop.set()
        self.stop_producers.set()
        for t in self.threads:
            t.join(timeout=60)
        for c in [*self.producer_conns, *self.consumer_conns.values(), self.tick_conn]:
            c.close()


def run_stream(dsn: str, cfg: Config, emit: Callable[[str], None]) -> dict:
    """The whole schedule on ours in `dsn`'s database; returns the result as data."""
    subs = subscription_names(cfg.subscriptions)
    with _connect(dsn) as admin:
        admin.execute("SELECT pgmq.drop_stream(%s)", (STREAM,))
        admin.execute("SELECT pgmq.create_stream(%s, retention => make_interval(secs => %s), "
                      "rotation_period => make_interval(secs => %s))", (STREAM, cfg.retention, cfg.rotation))
        for s in subs:
            admin.execute("SELECT pgmq.subscribe(%s, %s)", (STREAM, s))
        meter = Meter(admin)
        ledger = Ledger(subs)
        load = Load(dsn, cfg, ledger)
        events = [(k * cfg.sample, 0, "sample") for k in range(1, int(cfg.duration / cfg.sample + 1e-9) + 1)]
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
            prev_ticks = backend_ticks(load.consumer_pids) if meter.cpu else None
            prev_t, prev_sent, prev_got, prev_ops = load.t0, 0, 0, 0
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
                    log(f"stream: {hold_times[-1]:.1f} s: xmin hold: REPEATABLE READ transaction open")
                    continue
                if kind == "release":
                    assert hold_conn is not None
                    hold_conn.execute("COMMIT")
                    hold_conn.close()
                    hold_conn = None
                    hold_times.append(time.monotonic() - load.t0)
                    log(f"stream: {hold_times[-1]:.1f} s: xmin hold released")
                    continue
                now = time.monotonic()
                sent, got, n_ops = sum(load.sent), sum(load.received.values()), len(load.ops)
                ticks = backend_ticks(load.consumer_pids) if meter.cpu else None
                segs, ev_bytes, ev_dead = admin.execute(EVENT_STATS_SQL).fetchone()
                catalog = dict.fromkeys(CATALOG, 0) | dict(admin.execute(CATALOG_STATS_SQL).fetchall())
                lat = [o.seconds * 1000 for o in load.ops[prev_ops:n_ops]]
                d_got = got - prev_got
                cpu = (round(ticks_to_us(ticks - prev_ticks) / d_got, 1)
                       if ticks is not None and prev_ticks is not None and d_got else None)
                s = Sample(t=at, dt=round(now - prev_t, 3),
                           phase=phase_of(cfg, at, at - (samples[-1].t if samples else 0.0)),
                           sent=sent - prev_sent, delivered=d_got, ops=n_ops - prev_ops,
                           backlog=load.backlog(), segments=segs, event_bytes=ev_bytes,
                           event_dead=ev_dead, catalog_dead=catalog,
                           xmin_age=admin.execute(XMIN_SQL).fetchone()[0],
                           p50_ms=_r(percentile(lat, 0.5), 3), p99_ms=_r(percentile(lat, 0.99), 3),
                           consumer_cpu_us_per_event=cpu)
                samples.append(s)
                emit(sample_row(s))
                prev_t, prev_sent, prev_got, prev_ops, prev_ticks = now, sent, got, n_ops, ticks
            load.drain(DRAIN_SECONDS)
        finally:
            if hold_conn is not None:
                hold_conn.close()
            load.finish()
        if load.errors:
            raise load.errors[0]
        final_dead = admin.execute(EVENT_STATS_SQL).fetchone()[2]
        summary = summarize(cfg, samples, list(load.ops),
                            tuple(hold_times) if len(hold_times) == 2 else None, ledger.summary())
        summary["event_dead_max"] = max(summary["event_dead_max"], final_dead)
        return {"system": "ours", "samples": [s.as_dict() for s in samples], "summary": summary,
                "server_cpu_measured": meter.cpu}


def run(args: argparse.Namespace, dsn: str, server: str) -> int:
    cfg: Config = args.config
    t0 = time.monotonic()
    load_start = os.getloadavg()
    log(f"load average at the start: {' '.join(f'{x:.2f}' for x in load_start)}")
    ours_dsn, how = prepare_database(dsn, STEADY_DB)
    try:
        with _connect(ours_dsn) as conn:
            settings = settings_of(conn)
            ext = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'pgmq'").fetchone()
        print(f"pgmq steady state, streams | PostgreSQL {settings['server_version']['value']}, {server}, "
              f"fsync={settings['fsync']['value']}, synchronous_commit={settings['synchronous_commit']['value']} "
              f"| ours: pgmq {ext[0] if ext else '(standalone script)'} ({how}) | {os.cpu_count()} CPUs, load "
              f"{load_start[0]:.2f} at the start\n{cfg.describe()}\n{describe_autovacuum(settings)}", flush=True)
        log(f"stream: running for {cfg.minutes:g} min ...")
        res = run_stream(ours_dsn, cfg, lambda line: print(line, flush=True))
        print()
        print(format_summary(cfg, res["summary"]), flush=True)
    finally:
        with _connect(dsn) as conn:  # leave nothing behind on a --dsn server
            conn.execute(f"DROP DATABASE IF EXISTS {STEADY_DB} WITH (FORCE)")
    load_end = os.getloadavg()
    wall = time.monotonic() - t0
    print(f"\nload average (1, 5, 15 min) at the start {' '.join(f'{x:.2f}' for x in load_start)}, at "
          f"the end {' '.join(f'{x:.2f}' for x in load_end)}; {wall:.0f} s in all. deliv/s: events "
          "received by all subscriptions together; backlog: the largest lag of a subscription; ev "
          "dead: dead tuples of the event tables; cat dead: of the subscriptions', batches' and "
          "ticks' rows; latency: one stream_read + stream_ack transaction that got events, timed "
          "by the client; CPU µs/ev: the consumers' backends per delivered event.")
    if args.json:
        out = {"server": server, "settings": settings, "config": asdict(cfg),
               "pgmq_version": ext[0] if ext else None, "cpus": os.cpu_count(),
               "loadavg_start": load_start, "loadavg_end": load_end, "wall_seconds": round(wall, 1),
               "results": [res]}
        with open(args.json, "w") as fh:
            fh.write(json.dumps(out, indent=2) + "\n")
        log(f"wrote {args.json}")
    problems = failed(res["summary"])
    if problems:
        log("failed: " + "; ".join(problems))
        return 1
    return 0
