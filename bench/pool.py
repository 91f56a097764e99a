"""The `worker` workload's runner: the real callback worker (pgmq_build.worker.Worker, every
option at its default, so its default pool) on a prefilled queue with a no-op callback.

Instead of clients running an operation in a loop, the runner starts a Worker, waits until its
dispatchers are connected and dispatching, then measures a window of `seconds`: callbacks
committed (the Worker's totals), the server CPU of every connection the Worker holds (its
dispatchers and its listener; read from /proc as for the other workloads, a connection opened
during the window counts from its connection), the WAL written and this process's CPU. Then it
stops the Worker.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from typing import Any

import psycopg

from .server import Meter, Usage, backend_ticks, ticks_to_us

WARM_CALLBACKS = 20  # per dispatcher, before the window opens
WARM_TIMEOUT = 30.0


def run_worker(workload: Any, side: str, dsn: str, clients: int, seconds: float,
               stop_when_dry: bool, meter: Meter | None = None) -> Any:
    """A Run (see run.py) of one window of the default Worker; `clients` is ignored (the pool
    sizes itself), `side` must be pgmq. A queue found empty after the window counts as dry."""
    from pgmq_build.worker import TextFormatter, Worker

    from .run import ClientResult, Run
    from .workloads import PGMQ, PGMQ_TABLE

    if side != PGMQ:
        raise ValueError("the worker workload runs on pgmq only")
    cpu = meter is not None and meter.cpu
    lock = threading.Lock()
    opened: list[tuple[psycopg.Connection[Any], int, int | None]] = []  # conn, pid, ticks then

    class MeteredWorker(Worker):
        def _connect(self) -> psycopg.Connection[Any]:
            conn = super()._connect()
            pid = conn.info.backend_pid
            with lock:
                opened.append((conn, pid, backend_ticks([pid]) if cpu else None))
            return conn

    def live() -> list[tuple[int, int | None]]:
        with lock:
            return [(pid, ticks) for conn, pid, ticks in opened if not conn.closed]

    def ticks_now(pids: list[int]) -> dict[int, int] | None:
        out = {}
        for pid in pids:
            t = backend_ticks([pid])
            if t is None:
                return None
            out[pid] = t
        return out

    errors: list[dict] = []  # the worker's dispatch_error events

    class Errors(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.getMessage() == "dispatch_error":
                errors.append(dict(getattr(record, "fields", {})))

    logger = logging.getLogger("pgmq_build.bench.worker")
    logger.propagate = False
    logger.setLevel(logging.WARNING)
    shown = logging.StreamHandler(sys.stderr)  # the worker's warnings and errors, as text
    shown.setFormatter(TextFormatter())
    logger.handlers[:] = [Errors(), shown]
    worker = MeteredWorker(dsn, logger=logger)
    try:
        worker.start()
        deadline = time.monotonic() + WARM_TIMEOUT
        while (worker.totals.done < WARM_CALLBACKS * worker.min_workers
               and not worker.totals.errors and time.monotonic() < deadline):
            time.sleep(0.005)
        before = ticks_now([pid for pid, _ in live()]) if cpu else None
        probe = meter.sample([]) if meter is not None else None
        done0 = worker.totals.done
        c0 = time.process_time()
        t_start = time.monotonic()
        if stop_when_dry:  # the warm-up: stop early once nothing more comes
            last, last_t = done0, t_start
            while time.monotonic() < t_start + seconds:
                time.sleep(0.01)
                n = worker.totals.done
                if n != last:
                    last, last_t = n, time.monotonic()
                elif time.monotonic() - last_t > 0.2:
                    break
        else:
            time.sleep(seconds)
        done1 = worker.totals.done
        t_end = time.monotonic()
        client_cpu = time.process_time() - c0
        usage = None
        if meter is not None and probe is not None:
            cpu_us = None
            if before is not None:
                now = live()
                after = ticks_now([pid for pid, _ in now])
                if after is not None:
                    cpu_us = ticks_to_us(sum(
                        after[pid] - (before[pid] if pid in before
                                      else at_connect if at_connect is not None else after[pid])
                        for pid, at_connect in now))
            usage = Usage(cpu_us, meter.usage(probe, meter.sample([])).wal_bytes)
        failed_statements = worker.totals.errors
    finally:
        worker.stop(timeout=30)
    if failed_statements:
        # the server's error, as a psycopg error with its SQLSTATE: an optional workload's
        # failure is then reported as n/a (see Bench._guard)
        first = errors[0] if errors else {}
        text = f"the worker's dispatch failed: {first.get('error', 'see its log')}"
        try:
            error_class = psycopg.errors.lookup(first["sqlstate"])
        except (KeyError, TypeError):  # no event, or no SQLSTATE: not the server's error
            raise RuntimeError(text) from None
        raise error_class(text)
    with psycopg.connect(dsn, autocommit=True) as conn:
        dry = not conn.execute(f"SELECT EXISTS (SELECT 1 FROM {PGMQ_TABLE})").fetchone()[0]
    msgs = done1 - done0
    return Run([ClientResult(msgs, msgs, int(dry), t_start, t_end, client_cpu)], usage)
