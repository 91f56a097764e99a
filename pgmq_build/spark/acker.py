"""The stream reader's acknowledgements in the background (psycopg, no pyspark import): the
archive or delete of a committed batch runs on its own connection and thread while Spark reads
the next batch, instead of in front of it (docs/performance/spark-consumption.md: the archive
of a 50k-row batch took 0.2-0.4 s of every trigger's latestOffset).

Safe to overlap: a batch's ack touches only ids of (done, upto] and done's pending ids, minus
upto's pending ids, and the next batch reads ids above upto plus upto's pending ids, so the two
never share a row; the ack is idempotent by range, so one that is lost (the driver dies first)
is made again by the next run's first latestOffset. One ack runs at a time, in order."""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor

import psycopg

from . import offsets
from .connections import QueueInfo, connect
from .offsets import Offset

log = logging.getLogger(__name__)


class Acker:
    """Acks (done, upto] of a queue in the background, one at a time; ``wait()`` returns once
    the last one finished and raises its error. Not picklable: the reader drops it."""

    def __init__(self, dsn: str, info: QueueInfo, mode: str) -> None:
        self.dsn = dsn
        self.info = info
        self.mode = mode
        self._conn: psycopg.Connection | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._job: Future | None = None
        self._pid: int | None = None  # the acks' backend (read by the reader's thread)

    @property
    def pids(self) -> list[int]:
        """The backend the acks run in (none before the first): the reader's safe high-water
        mark must not wait for it, as an ack draws no msg_id (it would serialize the overlap)."""
        return [self._pid] if self._pid is not None else []

    def start(self, done: Offset, upto: Offset) -> None:
        """Ack (done, upto] after the ack in flight, without waiting for it."""
        self.wait()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pgmq-ack")
        self._job = self._pool.submit(self._ack, done, upto)

    def wait(self) -> None:
        job, self._job = self._job, None
        if job is not None:
            job.result()

    def close(self) -> None:
        try:
            self.wait()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True)
                self._pool = None
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _ack(self, done: Offset, upto: Offset) -> int:
        # a broken connection (server restart, terminated backend) is replaced once: the ack
        # is by range, so running it again finishes what the first attempt did not
        for attempt in (1, 2):
            if self._conn is None or self._conn.closed:
                self._conn = connect(self.dsn, autocommit=True)
                self._pid = self._conn.info.backend_pid
            try:
                n = offsets.ack_range(self._conn, self.info, done, upto, self.mode)
            except psycopg.OperationalError:
                if attempt == 2 or not self._conn.broken:
                    raise
                self._conn.close()
                self._conn = None
                continue
            if n:
                log.info("pgmq stream %s: %s %d message(s) up to %d", self.info.queue,
                         self.mode + "d", n, upto.msg_id)
            return n
        raise AssertionError("unreachable")
