"""A background thread that samples pgmq.queue_metrics() every few seconds into an in-memory
ring buffer per queue: the history behind the charts. Nothing is stored in the database."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from . import queries

log = logging.getLogger("pgmq_build.dashboard")

KEEP = 720  # samples per queue: an hour at the default 5-second interval


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


class Sampler:
    """Samples every `interval` seconds in a daemon thread; `history(queue)` returns the
    buffer. Database errors are logged and kept in `last_error` (shown on the pages); the thread
    keeps trying at the same pace."""

    def __init__(self, connection: Callable, interval: float, keep: int = KEEP) -> None:
        self._connection = connection  # a context manager factory yielding a connection
        self.interval = interval
        self._keep = keep
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

    def history(self, queue: str) -> list[Sample]:
        with self._lock:
            return list(self._buffers.get(queue, ()))

    def sample_once(self) -> None:
        with self._connection() as conn:
            rows = conn.execute(queries.METRICS_ALL).fetchall()
        with self._lock:
            seen = set()
            for r in rows:
                seen.add(r["queue_name"])
                buf = self._buffers.setdefault(r["queue_name"], deque(maxlen=self._keep))
                buf.append(Sample(at=r["measured_at"].timestamp(), depth=r["depth"],
                                  visible=r["visible"], in_flight=r["in_flight"],
                                  delayed=r["delayed"], oldest_age=r["oldest_msg_age_sec"],
                                  total_sent=r["total_sent"],
                                  dead_letter_depth=r["dead_letter_depth"]))
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
                    log.warning("sampling pgmq.queue_metrics() failed: %s", exc)
                self.last_error = str(exc).strip() or type(exc).__name__
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))
