"""Table sizes and dead tuples of the queue tables while a scenario or the soak runs, as
bench.steady's Samples (its stats query, its flat rule), so that the steady-state
run and the chaos suite judge "flat" the same way.

The sampler's connection breaks with the server (restarts, terminations): it reconnects and
skips the samples it could not take. Note that an immediate stop resets the statistics
collector, so n_dead_tup starts again from 0 after a crash restart."""

from __future__ import annotations

import threading

import psycopg

from bench import steady

from .load import Meter

TABLES = ("pgmq.q_work", "pgmq.q_jobs", "pgmq.q_client", "pgmq.a_client")


class Sampler:
    def __init__(self, dsn: str, meter: Meter, interval: float) -> None:
        self.dsn, self.meter, self.interval = dsn, meter, interval
        self.samples: dict[str, list[steady.Sample]] = {t: [] for t in TABLES}
        self.phase = "load"  # set by the runner: load, fault, recovery, drain
        self.missed = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="chaos-sampler", daemon=True)
        self._prev: dict[str, tuple] = {}

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        conn = None
        last_t, last = self.meter.now(), (0, 0)
        while not self._stop.wait(self.interval):
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=3,
                                           application_name="chaos-admin-sampler")
                rows = {t: conn.execute(steady.stats_sql(t)).fetchone() for t in TABLES}
            except psycopg.Error:
                self.missed += 1
                if conn is not None and conn.broken:
                    conn.close()
                continue
            t = self.meter.now()
            totals = (sum(self.meter.series("produced", t + 1)),
                      sum(self.meter.series("consumed", t + 1)))
            for table, row in rows.items():
                prev = self._prev.get(table, row)
                self.samples[table].append(steady.Sample(
                    t=round(t, 2), dt=round(t - last_t, 3), phase=self.phase,
                    sent=totals[0] - last[0], consumed=totals[1] - last[1], ops=0, empty=0,
                    depth=row[4], table_bytes=row[1], index_bytes=row[2], n_dead_tup=row[3],
                    n_live_tup=row[4], autovacuum_count=row[5], xmin_age=row[7], p50_ms=None,
                    p99_ms=None, consumer_cpu_us_per_msg=None, producer_cpu_us_per_msg=None,
                    wal_bytes=0, buffers=max(0, row[0] - prev[0]),
                    seq_scans=max(0, row[6] - prev[6])))
                self._prev[table] = row
            last_t, last = t, totals
        if conn is not None:
            conn.close()

    def peaks(self, start: float, end: float) -> dict[str, dict[str, int]]:
        """Max table bytes and dead tuples of each table over samples ending in (start, end]."""
        out = {}
        for table, samples in self.samples.items():
            win = steady.in_window(samples, start, end)
            if win:
                out[table] = {"table_bytes": max(s.table_bytes for s in win),
                              "index_bytes": max(s.index_bytes for s in win),
                              "n_dead_tup": max(s.n_dead_tup for s in win)}
        return out

    def flat(self, earlier: tuple[float, float], later: tuple[float, float]) -> dict:
        """steady.flat per table: later window vs earlier window."""
        out = {t: steady.flat(steady.in_window(s, *earlier), steady.in_window(s, *later))
               for t, s in self.samples.items()}
        judged = [v for v in out.values() if v.get("judged")]
        return {"tables": out, "judged": bool(judged),
                "flat": bool(judged) and all(v["flat"] for v in judged)}
