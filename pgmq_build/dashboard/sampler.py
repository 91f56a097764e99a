"""A background thread that samples the queues every few seconds: the history behind the charts.

Where the role may (pgmq.sample_metrics(), 2.11.0: granted to pg_monitor), the samples go to the
database's bounded table pgmq.metrics_history and the charts read them back, so a restart
keeps them and every dashboard of the database shares them. Otherwise (an older extension, a
role without the grant, a standby) queue_metrics() is sampled into an in-memory ring per queue
that a restart starts afresh; `persistent` says which (None: not known yet)."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from . import queries

log = logging.getLogger("pgmq_build.dashboard")

KEEP = 720  # in memory: samples per queue, an hour at the default 5-second interval
HISTORY_MAX_AGE = 86400.0  # in the database: seconds of samples kept (sample_metrics' max_age)
MAX_ROWS = 1_000_000  # the most samples per queue sample_metrics takes as a bound


@dataclass(frozen=True)
class Sample:
    at: float  # unix time of the measurement
    depth: int
    visible: int
    in_flight: int
    delayed: int
    oldest_age: float | None
    total_sent: int
    dead_letter_depth: int | None


def rates(samples: Sequence[Sample]) -> list[tuple[float, float | None, float | None]]:
    """(time, sent per second, consumed per second) between consecutive samples. Consumed is
    what left the queue: sent minus the depth's growth (read-and-deleted, archived,
    dead-lettered, purged). A counter that went backwards (queue dropped and made again) leaves
    a gap."""
    out: list[tuple[float, float | None, float | None]] = []
    for a, b in zip(samples, samples[1:], strict=False):
        dt, sent = b.at - a.at, b.total_sent - a.total_sent
        if dt <= 0:
            continue
        if sent < 0:
            out.append((b.at, None, None))
            continue
        consumed = max(0, sent - (b.depth - a.depth))
        out.append((b.at, sent / dt, consumed / dt))
    return out


def window_rates(samples: Sequence[Sample], seconds: float = 60.0) -> tuple[float, float] | None:
    """Sent and consumed per second over the last `seconds` (None: fewer than two samples)."""
    if len(samples) < 2:
        return None
    last = samples[-1]
    first = next(s for s in samples if s.at >= last.at - seconds)
    if first is last:
        first = samples[-2]
    got = rates([first, last])
    return (got[0][1] or 0.0, got[0][2] or 0.0) if got else None


def _sample(r: dict, at: datetime) -> Sample:
    """A queue_metrics() or metrics_history row as a Sample."""
    return Sample(at=at.timestamp(), depth=r["depth"], visible=r["visible"], in_flight=r["in_flight"],
                  delayed=r["delayed"], oldest_age=r["oldest_msg_age_sec"], total_sent=r["total_sent"],
                  dead_letter_depth=r["dead_letter_depth"])


class Sampler:
    """Samples every `interval` seconds in a daemon thread (into the database where the role
    may, else into memory); `history(queue)` returns the samples from where they are. Database
    errors are logged and kept in `last_error` (shown on the pages); the thread keeps trying at
    the same pace."""

    def __init__(self, connection: Callable, interval: float, keep: int = KEEP,
                 max_age: float = HISTORY_MAX_AGE) -> None:
        self._connection = connection  # a context manager factory yielding a connection
        self.interval = interval
        self._keep = keep
        self.max_age = max_age
        # the table's per-queue bound: max_age at this interval (one more for jitter)
        self.max_rows = min(MAX_ROWS, int(max_age / interval) + 1)
        self.persistent: bool | None = None
        self._latest: list[dict] | None = None
        self._buffers: dict[str, deque[Sample]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dashboard-sampler", daemon=True)
        self.last_error: str | None = None

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def history(self, queue: str, seconds: float | None = None) -> list[Sample]:
        """The samples of one queue over the last `seconds` (None: all kept), oldest first."""
        return self.histories([queue], seconds).get(queue, [])

    def histories(self, queues: Sequence[str], seconds: float | None = None) -> dict[str, list[Sample]]:
        """The samples of these queues over the last `seconds` (None: all kept), by queue."""
        if self.persistent is None:
            with self._connection() as conn:
                self.persistent = bool(conn.execute(queries.MAY_SAMPLE).fetchone()["may"])
        if self.persistent:
            out: dict[str, list[Sample]] = {}
            with self._connection() as conn:
                for r in conn.execute(queries.HISTORY, (list(queues), seconds, seconds)):
                    out.setdefault(r["queue_name"], []).append(_sample(r, r["sampled_at"]))
            return out
        with self._lock:
            found = {q: list(self._buffers.get(q, ())) for q in queues}
        if seconds is not None:
            found = {q: [s for s in h if s.at >= h[-1].at - seconds] if h else h for q, h in found.items()}
        return found

    def latest(self) -> list[dict] | None:
        """The queue_metrics() rows of the last sample (None: none yet), as they were then."""
        with self._lock:
            return None if self._latest is None else [dict(r) for r in self._latest]

    def sample_once(self) -> None:
        with self._connection() as conn:
            self.persistent = bool(conn.execute(queries.MAY_SAMPLE).fetchone()["may"])
            if self.persistent:
                rows = conn.execute(queries.SAMPLE, (self.max_age, self.max_rows)).fetchall()
                with self._lock:
                    self._buffers.clear()
                    self._latest = rows
                return
            rows = conn.execute(queries.METRICS_ALL).fetchall()
        with self._lock:
            self._latest = rows
            seen = set()
            for r in rows:
                seen.add(r["queue_name"])
                buf = self._buffers.setdefault(r["queue_name"], deque(maxlen=self._keep))
                buf.append(_sample(r, r["measured_at"]))
            for gone in set(self._buffers) - seen:  # dropped queues lose their history
                del self._buffers[gone]

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample_once()
                self.last_error = None
            except Exception as exc:  # the database may be away; keep sampling
                if self.last_error is None:
                    log.warning("sampling the queues failed: %s", exc)
                self.last_error = str(exc).strip() or type(exc).__name__
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
