"""Streaming: ``spark.readStream.format("pgmq")`` of a queue (offsets = msg_id with a safe
high-water mark, ack on commit) or of a stream subscription (offsets = positions, the
subscription moved on commit), and ``writeStream.format("pgmq")`` (exactly-once by recorded
batch ids) into a queue or a stream.

The stream source is PgmqStreamReader here (what Spark calls: offsets, partitions, commit, read)
plus offsets.py, its SQL side without pyspark (Offset, the safe high-water mark, batch planning,
the range ack); a partition's rows are read by snapshot.read_range. The sink publishes through
batch.publish_task and commits a batch with staging.commit_staged."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import psycopg
import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from . import offsets, staging, stream_events
from .acker import Acker
from .batch import (
    EventPartition,
    Published,
    event_partitions,
    prepare_staging,
    publish_task,
    read_event_partition,
    target_of,
)
from .connections import connect, resolve_queue
from .errors import PgmqSparkError
from .offsets import Offset
from .options import StreamSpec, WriteSpec, sink_id
from .snapshot import read_range

log = logging.getLogger(__name__)


def _reconnecting(method: Callable) -> Callable:
    """For Spark's driver-side calls of a stream reader: when the reader's connection broke
    since it was last used (the server restarted, the backend was terminated, an idle
    connection was cut), connect again and run the call once more instead of failing the
    query. Each of these calls can run twice: offsets are read again, acks and positions are
    set by range, a position made twice is only one more position."""

    @functools.wraps(method)  # keeps the signature: Spark inspects latestOffset's parameters
    def call(self: _DriverConnection, *args: Any, **kw: Any) -> Any:
        try:
            return method(self, *args, **kw)
        except psycopg.OperationalError as exc:
            if self._conn is None or not self._conn.broken:
                raise
            log.warning("pgmq stream: the driver's connection broke (%s); connecting again",
                        str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
            self._conn.close()
            self._conn = None
            return method(self, *args, **kw)

    return call


class _DriverConnection:
    """What the stream readers share in Spark's driver: the one connection kept for the whole
    query (made on first use, never pickled to executors) and the read limit of the options."""

    spec: StreamSpec
    _conn: psycopg.Connection | None = None

    def getDefaultReadLimit(self) -> ReadLimit:  # noqa: N802 (Spark's name)
        if self.spec.max_rows:
            return ReadMaxRows(self.spec.max_rows)
        return ReadAllAvailable()

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_conn"] = None
        return state

    def _db(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.spec.dsn, autocommit=True)
        return self._conn

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


@dataclass
class StreamPartition(InputPartition):
    lo: int  # exclusive
    hi: int  # inclusive
    exclude: list[int] = field(default_factory=list)
    include: list[int] = field(default_factory=list)


class FailedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stands in for a stream reader that could not be made (no such queue or stream, no
    connection) and raises its error at Spark's first call. PySpark's source runner stops the
    reader in a `finally` even when making it failed, so an error raised by streamReader()
    reached the user as UnboundLocalError ('reader') instead of its own text."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def _fail(self, *args: object) -> NoReturn:
        raise self.error

    initialOffset = latestOffset = partitions = read = commit = _fail  # noqa: N815 (Spark's names)
    getDefaultReadLimit = prepareForTriggerAvailableNow = _fail  # noqa: N815

    def stop(self) -> None:
        pass


class PgmqStreamReader(_DriverConnection, DataSourceStreamReader, SupportsTriggerAvailableNow):
    """The stream is a log consumer and must be the only consumer of its queue.

    A batch (start, end] holds the messages with start.msg_id < msg_id <= end.msg_id plus the
    start's pending ids, minus end.pending (ids not yet visible when planned: delayed, leased or
    reserved messages; they come in a later batch once visible). Rows are changed only by the
    ack, so a replayed batch re-reads exactly the same rows. The ack (delete/archive, option
    onCommit) starts in commit(end) and, because Spark never commits the last batch of a run, in
    latestOffset(start) too: Spark asks for the next offset only once ``start``'s batch is in the
    commit log. It runs in the background (acker.py) while Spark reads the next batch; a
    latestOffset that finds nothing new waits for it, and so does stop(). The high-water mark
    is "safe": no transaction that may still commit a msg_id below it is running (see
    offsets.safe_high_water_mark).

    The instance Spark uses for offsets and commits lives in one driver process for the whole
    query and keeps a connection; read() runs on executors on a pickled copy without it.
    """

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self._conn = None
        with connect(spec.dsn, autocommit=True) as conn:
            self.info = resolve_queue(conn, spec.queue)
        self._initial: Offset | None = None
        self._acked: Offset | None = None  # everything up to here is acked or being acked
        self._ack_from: Offset | None = None  # where the ack in flight started
        self._acker: Acker | None = None  # made on first use, never pickled to executors
        self._safe = 0  # the highest high-water mark proven safe so far
        self._target: int | None = None  # Trigger.AvailableNow: never go past this

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["_acker"] = None
        return state

    # -- driver side

    def _high_water_mark(self) -> int:
        conn = self._db()
        if not self.spec.safe_offsets:
            return offsets.last_msg_id(conn, self.info)
        high, settled = offsets.safe_high_water_mark(
            conn, self.info, self.spec.inflight_wait,
            ignore=self._acker.pids if self._acker is not None else ())
        if settled:
            self._safe = max(self._safe, high)
        else:
            log.info("pgmq stream %s: writers still in flight after %.1fs; holding the offset at %s",
                     self.spec.queue, self.spec.inflight_wait, self._safe)
        return self._safe

    @_reconnecting
    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        if self._initial is not None:  # Spark asks again when it plans the first batch
            return self._initial.to_json()
        if self.spec.starting == "latest":
            self._initial = Offset(self._high_water_mark())
        else:
            self._initial = Offset(0)
        # acks start here: with startingOffsets=latest the messages before it were never this
        # query's (the first ack used to archive them too)
        self._acked = self._initial
        return self._initial.to_json()

    @_reconnecting
    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = self._high_water_mark()

    def _ack(self, upto: Offset) -> None:
        """Start acking what was delivered up to ``upto`` (acker.py: it runs while Spark reads
        the next batch; _settle() waits for it)."""
        if self.spec.on_commit == "none":
            return
        done = self._acked or Offset(0)
        if self._acked is not None and (upto.msg_id < done.msg_id or upto == done):
            return
        self._settle()
        if self._acker is None:
            self._acker = Acker(self.spec.dsn, self.info, self.spec.on_commit)
        self._acker.start(done, upto)
        self._ack_from, self._acked = done, upto

    def _settle(self) -> None:
        """Wait for the ack in flight; when it failed, its range is acked again next time."""
        if self._acker is None:
            return
        try:
            self._acker.wait()
        except BaseException:
            self._acked = self._ack_from
            raise

    @_reconnecting
    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:  # noqa: N802
        begin = Offset.from_json(start) if start is not None else (self._initial or Offset())
        # ``start``'s batch is in Spark's commit log by now: ack it (this is what acks the last
        # batch of an availableNow run). Never ack the initial offset: with
        # startingOffsets=latest it covers messages this query never delivered.
        if self.spec.ack_on_latest_offset and start is not None and begin != self._initial:
            self._ack(begin)
        high = self._high_water_mark()
        last = offsets.last_msg_id(self._db(), self.info) if self.spec.safe_offsets else high
        if last < begin.msg_id:
            raise PgmqSparkError(
                f"queue {self.spec.queue!r}: its msg_id sequence ({last}) is behind this stream's "
                f"offset ({begin.msg_id}); was the queue dropped and re-created? Start the query "
                "with a new checkpoint location")
        if self._target is not None:
            high = min(high, self._target)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        end = offsets.plan_batch(self._db(), self.info, begin, max(high, begin.msg_id), max_rows,
                             self.spec.respect_visibility, self.spec.max_pending)
        if end == begin:
            # caught up (and the last trigger of an availableNow run): nothing is left in flight
            # when the query stops here
            self._settle()
        return end.to_json()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        parts = offsets.stream_parts(Offset.from_json(start), Offset.from_json(end),
                                 self.spec.num_partitions)
        return [StreamPartition(lo, hi, ex, inc) for lo, hi, ex, inc in parts]

    @_reconnecting
    def commit(self, end: dict) -> None:
        self._ack(Offset.from_json(end))

    def stop(self) -> None:
        try:
            if self._acker is not None:
                self._acker.close()
        except Exception as exc:  # made again by the next run's first latestOffset
            log.warning("pgmq stream %s: the last ack failed (%s); the next run makes it",
                        self.spec.queue, exc)
        finally:
            self._acker = None
            super().stop()

    # -- executors

    def read(self, partition: StreamPartition) -> Iterator[pa.RecordBatch]:
        if partition.hi <= partition.lo and not partition.include:
            return
        yield from read_range(self.spec.dsn, self.info, "queue", partition.lo, partition.hi,
                                  partition.exclude, partition.include)


class SubscriptionStreamReader(_DriverConnection, DataSourceStreamReader,
                               SupportsTriggerAvailableNow):
    """``readStream.format("pgmq").option("stream", S).option("subscription", U)``: the query
    consumes subscription U of stream S and must be its only consumer.

    Offsets are positions ({"position": tick id}). A micro-batch (start, end] is the events
    committed after start's snapshot and by end's (stream_events.py), read without changing
    anything, so Spark's replay of a batch re-reads the same events: exactly-once end to end
    with an idempotent or transactional sink (the pgmq sink is one). The subscription's position
    follows what Spark has committed (pgmq.stream_rewind to the offset): in commit(end) and, as
    for queues, in latestOffset(start), which is what moves it past the last batch of an
    availableNow run. Retention keeps every event after the position (unless the stream has
    drop_unacked; the subscription's stream_info().lost counts what it dropped). Positions are
    made by pgmq.stream_tick when the next batch is planned; maxRowsPerBatch bounds a batch by
    whole positions (at least one).
    """

    def __init__(self, spec: StreamSpec) -> None:
        self.spec = spec
        self._conn = None
        with connect(spec.dsn, autocommit=True) as conn:
            self.ref = stream_events.resolve_stream(conn, spec.stream or "")
        self._initial: int | None = None
        self._at: int | None = None  # the subscription's position as we last set it
        self._target: int | None = None  # Trigger.AvailableNow: never go past this

    # -- driver side

    @_reconnecting
    def initialOffset(self) -> dict:  # noqa: N802 (Spark's names)
        # a new query starts at the subscription's position (made from startingOffsets when
        # the subscription does not exist yet)
        self._initial = stream_events.subscribe(self._db(), self.ref, self.spec.subscription or "",
                                                self.spec.starting)
        self._at = self._initial
        return {"position": self._initial}

    @_reconnecting
    def prepareForTriggerAvailableNow(self) -> None:  # noqa: N802
        self._target = stream_events.latest(self._db(), self.ref)

    def _commit(self, offset: int) -> None:
        if offset == self._at:
            return
        self._at = stream_events.move_to(self._db(), self.ref, self.spec.subscription or "", offset)
        log.info("pgmq stream %s: subscription %s at position %s", self.spec.stream,
                 self.spec.subscription, self._at)

    @_reconnecting
    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:  # noqa: N802
        begin = int(start["position"]) if start is not None else self._initial
        if begin is None:
            begin = int(self.initialOffset()["position"])
        # ``start``'s batch is in Spark's commit log by now (see PgmqStreamReader)
        if self.spec.ack_on_latest_offset and start is not None:
            self._commit(begin)
        conn = self._db()
        if stream_events.position(conn, self.ref, self.spec.subscription or "") is None:
            raise PgmqSparkError(f"subscription {self.spec.subscription!r} of stream "
                                 f"{self.spec.stream!r} is gone (unsubscribed, or the stream was "
                                 "dropped); start the query with a new checkpoint location")
        high = self._target if self._target is not None else stream_events.latest(conn, self.ref)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return {"position": stream_events.plan_end(conn, self.ref, begin, high, max_rows)}

    @_reconnecting
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return event_partitions(self._db(), self.ref, int(start["position"]), int(end["position"]),
                                self.spec.num_partitions)

    @_reconnecting
    def commit(self, end: dict) -> None:
        self._commit(int(end["position"]))

    # -- executors

    def read(self, partition: EventPartition) -> Iterator[pa.RecordBatch]:
        yield from read_event_partition(self.spec.dsn, self.ref, partition)


def _batch_id_of_task() -> str:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    value = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
    return value if value is not None else "unknown"


class PgmqStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("pgmq")``. Exactly-once (default): tasks stage their rows under
    "<sink>#<batch id>"; commit(batchId) publishes them and records (sink id, batch id) in the
    progress table in one transaction, and a batch id that is already recorded (a batch Spark
    re-runs after a failure or restart) publishes nothing. exactlyOnce=false: every task
    publishes directly (at-least-once)."""

    def __init__(self, spec: WriteSpec, key: str) -> None:
        self.spec = spec
        self.key = key
        self.target = target_of(spec)
        if spec.exactly_once:
            prepare_staging(spec, with_progress=True)

    def _job(self, batch_id: object) -> str:
        return f"{self.key}#{batch_id}"

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        job = self._job(_batch_id_of_task()) if self.spec.exactly_once else None
        return publish_task(self.spec, self.target, iterator, job)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if not self.spec.exactly_once:
            return
        parts = [(m.part_id, m.rows) for m in messages if isinstance(m, Published)]
        done, rows = staging.commit_staged(
            self.spec.dsn, self.spec.staging_table, self._job(batchId), parts, self.target,
            progress=self.spec.progress_table, sink_id=sink_id(self.spec, self.key),
            batch_id=batchId)
        if not done:
            log.warning("pgmq sink: batch %s was already committed; skipped", batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        if self.spec.exactly_once:
            staging.abort_staged(self.spec.dsn, self.spec.staging_table, self._job(batchId))
