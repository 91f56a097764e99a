"""The chaos load's Spark structured streaming query, and the supervisor that keeps it running.

The query is the connector's own pipeline, end to end: ``readStream.format("pgmq")`` on queue
``spark`` (a log consumer: offsets are msg_ids, a batch's messages are archived once Spark has
committed it) into ``writeStream.format("pgmq")`` on queue ``spark_done``, the exactly-once sink
(batch ids recorded in ``pgmq_spark.sink_batches``). The connector documents that pair as
exactly-once end to end, so the ledger requires every message sent to ``spark`` to be in
``spark_done`` exactly once (ledger.py).

A streaming query that fails stays failed: Spark does not restart it. The supervisor does what an
operator's would: it restarts the query on the same checkpoint (so it resumes where Spark's
offset and commit logs say), with a short backoff while restarts keep failing, and records every
death (when, why) and every batch Spark had to run again. Consumption is metered from the
query's progress reports: the rows of each batch id, once.

pyspark is imported only here, and only when the load asks for Spark (``--spark``).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ledger import SPARK_QUEUE, SPARK_RESULT

TRIGGER = "500 milliseconds"  # a batch takes ~0.3-0.5 s on 2 cores: about one after another
POLL = 0.1  # the supervisor's look at the query
BACKOFF_MAX = 5.0  # seconds between restarts while they keep failing
STABLE = 10.0  # a run this long resets the backoff


def unavailable() -> str | None:
    """Why Spark cannot run here (None: it can)."""
    try:
        import pyarrow  # noqa: F401
        import pyspark  # noqa: F401
    except ImportError as exc:
        return f"pyspark is not installed (pip install -e '.[spark]'): {exc}"
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "no java for Spark (apt-get install openjdk-17-jre-headless)"
    return None


def session():
    """The process's local[2] SparkSession (made once, ~10 s), its JVM log silenced: a query's
    death is what a fault causes, and the supervisor reports it."""
    from pgmq_build.spark._session import local_session

    spark = local_session("pgmq-chaos", cores=2)
    spark.sparkContext.setLogLevel("OFF")
    logging.getLogger("pgmq_build.spark").setLevel(logging.WARNING)
    return spark


# "psycopg.errors.AdminShutdown: terminating ...": a Python exception's last traceback line
_PY_EXCEPTION = re.compile(r"^\s*((?:[A-Za-z_]\w*\.)+[A-Z]\w*|[A-Z]\w*(?:Error|Exception)): "
                           r"(\S.*)$", re.M)
_JVM = ("org.", "java.", "scala.", "py4j.")


def short_error(exc: BaseException | str | None) -> str:
    """One line out of a StreamingQueryException's text: its first line and the last Python
    exception in it (the connector's, from the driver's or a worker's traceback)."""
    if exc is None:
        return "stopped without an error"
    text = str(exc).strip()
    head = text.splitlines()[0] if text else type(exc).__name__
    # the JVM's trace holds the workers' Python tracebacks ("Caused by: ...PythonException")
    text += "\n" + str(getattr(exc, "_stackTrace", "") or "")
    found = [m for m in _PY_EXCEPTION.findall(text) if not m[0].startswith(_JVM)]
    if found:
        name, msg = found[-1]
        return f"{head[:90]} <- {name}: {msg.strip()[:120]}"
    return head[:200]


def pending_batch(checkpoint: Path) -> int | None:
    """The batch id Spark will run again when the query restarts on this checkpoint: one in the
    offset log without its commit-log entry (None: there is none)."""

    def ids(sub: str) -> set[int]:
        d = checkpoint / sub
        return {int(p.name) for p in d.iterdir() if p.name.isdigit()} if d.is_dir() else set()

    offsets, commits = ids("offsets"), ids("commits")
    if not offsets:
        return None
    last = max(offsets)
    return None if last in commits else last


@dataclass
class Death:
    at_s: float  # on the load's meter clock
    error: str
    ran_s: float  # how long that run of the query lasted
    replays_batch: int | None = None  # the batch id the restart runs again


@dataclass
class SparkQuery:
    """The query, started by start() and kept running until stop()."""

    dsn: str
    meter: Any  # load.Meter: adds "spark" (rows of each committed batch)
    deaths: list[Death] = field(default_factory=list)
    failed_starts: int = 0  # start() itself raised (the server was down, no connection slot)
    start_errors: dict[str, int] = field(default_factory=dict)  # why, how often
    batches: int = 0  # distinct batch ids with rows
    rows: int = 0
    first_batch_s: float | None = None  # when the first batch with rows was reported
    replayed_rows: int = 0  # rows of the batches Spark ran again after a restart
    running_at_end: bool = False  # the query was running when the load stopped it
    _replaying: set[int] = field(default_factory=set)
    _counted_upto: int = -1  # the highest batch id whose rows are metered
    _query: Any = None
    _started_at: float = 0.0
    _checkpoint: Path | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # -- lifecycle

    def start(self) -> SparkQuery:
        self._spark = session()
        self._checkpoint = Path(tempfile.mkdtemp(prefix="pgmq-chaos-spark-"))
        self._query = self._start_query()
        self._thread = threading.Thread(target=self._supervise, name="chaos-spark-supervisor",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._lock:
            q, self._query = self._query, None
        self.running_at_end = q is not None and q.isActive
        if q is not None:
            self._count(q)
            q.stop()
        if self._checkpoint is not None:
            shutil.rmtree(self._checkpoint, ignore_errors=True)

    def summary(self) -> dict:
        return {"batches": self.batches, "rows": self.rows, "restarts": len(self.deaths),
                "running_at_end": self.running_at_end,
                "failed_starts": self.failed_starts, "start_errors": self.start_errors,
                "replayed_batches": sum(d.replays_batch is not None for d in self.deaths),
                "replayed_rows": self.replayed_rows,
                "first_batch_s": self.first_batch_s,
                "deaths": [vars(d) for d in self.deaths]}

    # -- the query

    def _start_query(self):
        src = (self._spark.readStream.format("pgmq").option("dsn", self.dsn)
               .option("queue", SPARK_QUEUE).load())
        q = (src.select("message", "headers").writeStream.format("pgmq")
             .option("dsn", self.dsn).option("queue", SPARK_RESULT)
             .option("checkpointLocation", str(self._checkpoint))
             .trigger(processingTime=TRIGGER).start())
        self._started_at = time.monotonic()
        return q

    def _count(self, q) -> None:
        """Meter the rows of batch ids not counted yet (a batch Spark runs again after a restart
        is counted once: the sink publishes it once)."""
        last = q.lastProgress
        if last is None:
            return
        progress = [last] if last["batchId"] <= self._counted_upto + 1 else q.recentProgress
        for p in sorted(progress, key=lambda p: p["batchId"]):
            rows = int(p["numInputRows"])
            if p["batchId"] in self._replaying:  # its messages reached Spark a second time
                self._replaying.discard(p["batchId"])
                self.replayed_rows += rows
            if p["batchId"] > self._counted_upto and rows:
                self._counted_upto = p["batchId"]
                self.batches += 1
                self.rows += rows
                self.meter.add("spark", rows)
                if self.first_batch_s is None:
                    self.first_batch_s = round(self.meter.now(), 1)

    def _supervise(self) -> None:
        from pgmq_build.spark import register

        register(self._spark)  # this thread starts queries too: see register()
        backoff = 0.0
        while not self._stop.wait(POLL):
            with self._lock:
                q = self._query
            if q is not None and q.isActive:
                self._count(q)
                continue
            if q is not None:  # it died: record why, then restart it like a supervisor would
                self._count(q)
                ran = time.monotonic() - self._started_at
                assert self._checkpoint is not None
                death = Death(round(self.meter.now(), 1), short_error(q.exception()),
                              round(ran, 1), pending_batch(self._checkpoint))
                self.deaths.append(death)
                if death.replays_batch is not None:
                    self._replaying.add(death.replays_batch)
                backoff = 0.0 if ran >= STABLE else min(max(backoff * 2, 0.5), BACKOFF_MAX)
            if backoff and self._stop.wait(backoff):
                break
            with self._lock:
                self._query = None
                if self._stop.is_set():
                    break
                try:
                    self._query = self._start_query()
                except Exception as exc:  # it could not even start: again after the backoff
                    self.failed_starts += 1
                    why = short_error(exc)
                    self.start_errors[why] = self.start_errors.get(why, 0) + 1
                    backoff = min(max(backoff * 2, 0.5), BACKOFF_MAX)


def describe(summary: dict) -> str:
    """The report's words for a summary()."""
    if not summary:
        return "-"
    out = f"{summary['rows']:,} msgs in {summary['batches']} batches"
    if summary["restarts"]:
        out += f", restarted {summary['restarts']}x"
        if summary["replayed_batches"]:
            out += f" ({summary['replayed_batches']} batch(es) run again)"
    else:
        out += ", never restarted"
    return out
