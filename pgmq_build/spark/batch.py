"""Batch reading (non-destructive snapshot by msg_id ranges, the claim used by consume(), a
stream's events between two positions) and batch publishing (Arrow -> binary COPY into a queue
or a stream, at-least-once per task or exactly-once per job)."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)

from . import publishing, staging, stream_events
from .claims import claim
from .connections import connect, resolve_queue
from .errors import PgmqSparkError
from .options import ReadSpec, WriteSpec
from .snapshot import msg_id_bounds, read_range, split_range

log = logging.getLogger(__name__)

# Default snapshot partition size (msg_id span) when numPartitions is not given.
ROWS_PER_PARTITION = 100_000
MAX_DEFAULT_PARTITIONS = 64


@dataclass
class RangePartition(InputPartition):
    lo: int  # exclusive
    hi: int  # inclusive


@dataclass
class ClaimPartition(InputPartition):
    index: int
    qty: int


@dataclass
class EventPartition(InputPartition):
    """The events of a stream committed after snapshot ``after`` and by ``upto`` with
    lo < ev_id <= hi (lo None: no lower bound)."""

    after: str
    upto: str
    lo: int | None
    hi: int


def event_partitions(conn, ref: stream_events.StreamRef, start: int, end: int,
                     partitions: int) -> list[EventPartition]:
    """Partitions of the events between positions start and end (driver side)."""
    after, upto = stream_events.tick(conn, ref, start), stream_events.tick(conn, ref, end)
    if upto.tick_id <= after.tick_id:
        return []
    return [EventPartition(after.snapshot, upto.snapshot, lo, hi)
            for lo, hi in stream_events.split(after, upto, partitions)]


def read_event_partition(dsn: str, ref: stream_events.StreamRef,
                         p: EventPartition) -> Iterator[pa.RecordBatch]:
    yield from stream_events.read_events(dsn, ref, p.after, p.upto, p.lo, p.hi)


class SnapshotReader(DataSourceReader):
    """Non-destructive read of the queue or archive table, split into msg_id ranges. Each
    partition is its own read-only transaction; the upper bound is the largest msg_id at
    planning time, so rows sent later are not included."""

    def __init__(self, spec: ReadSpec) -> None:
        self.spec = spec
        with connect(spec.dsn, autocommit=True) as conn:
            self.info = resolve_queue(conn, spec.queue)

    def partitions(self) -> Sequence[InputPartition]:
        with connect(self.spec.dsn, autocommit=True) as conn:
            bounds = msg_id_bounds(conn, self.info, self.spec.table)
        if bounds is None:
            return [RangePartition(0, 0)]
        first, last = bounds
        n = self.spec.num_partitions or max(
            1, min(MAX_DEFAULT_PARTITIONS, -(-(last - first + 1) // ROWS_PER_PARTITION)))
        return [RangePartition(a, b) for a, b in split_range(first, last, n)]

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        if partition.hi <= partition.lo:
            return
        yield from read_range(self.spec.dsn, self.info, self.spec.table, partition.lo,
                                  partition.hi)


class StreamRangeReader(DataSourceReader):
    """A stream's events between two positions (option stream; fromPosition: default the
    earliest kept, toPosition: default a position made now), split by ev_id. Consumes nothing
    and touches no subscription; re-reading the same positions gives the same events."""

    def __init__(self, spec: ReadSpec) -> None:
        self.spec = spec
        with connect(spec.dsn, autocommit=True) as conn:
            self.ref = stream_events.resolve_stream(conn, spec.stream or "")

    def partitions(self) -> Sequence[InputPartition]:
        with connect(self.spec.dsn, autocommit=True) as conn:
            start = (self.spec.from_position if self.spec.from_position is not None
                     else stream_events.earliest(conn, self.ref))
            end = (self.spec.to_position if self.spec.to_position is not None
                   else stream_events.latest(conn, self.ref))
            parts = event_partitions(conn, self.ref, start, end, self.spec.num_partitions or 2)
        return parts or [RangePartition(0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, EventPartition):
            yield from read_event_partition(self.spec.dsn, self.ref, partition)


class ClaimReader(DataSourceReader):
    """``pgmq.read(queue, vt, qty)`` in N partitions (FOR UPDATE SKIP LOCKED keeps them
    disjoint). Every execution claims again: use pgmq_build.spark.consume(), which materializes
    the result exactly once."""

    def __init__(self, spec: ReadSpec) -> None:
        self.spec = spec
        with connect(spec.dsn, autocommit=True) as conn:
            self.info = resolve_queue(conn, spec.queue)

    def partitions(self) -> Sequence[InputPartition]:
        total = self.spec.claim_max
        n = max(1, min(self.spec.num_partitions or 2, total))
        return [ClaimPartition(i, total // n + (1 if i < total % n else 0)) for i in range(n)]

    def read(self, partition: ClaimPartition) -> Iterator[pa.RecordBatch]:
        assert self.spec.claim_vt is not None
        yield from claim(self.spec.dsn, self.info, self.spec.claim_vt, partition.qty,
                             self.spec.conditional)


# ----------------------------------------------------------------------------- publishing

@dataclass
class Published(WriterCommitMessage):
    part_id: str
    rows: int


def target_of(spec: WriteSpec) -> publishing.Target:
    """Resolve (driver side) where rows go; checks that the queue or stream exists."""
    if spec.stream is not None:
        with connect(spec.dsn, autocommit=True) as conn:
            return publishing.Target(stream=stream_events.resolve_stream(conn, spec.stream))
    if spec.routed:
        if spec.exchange:
            with connect(spec.dsn, autocommit=True) as conn:
                found = conn.execute("SELECT to_regprocedure("
                                     "'pgmq.publish(text, text, jsonb, jsonb, integer)')").fetchone()[0]
            if found is None:
                raise PgmqSparkError("option exchange needs pgmq.publish(exchange_name, "
                                         "routing_key, msg, headers, delay), which this pgmq "
                                         "build lacks")
        return publishing.Target(exchange=spec.exchange, routed=True,
                          allow_unroutable=spec.allow_unroutable)
    assert spec.queue is not None
    with connect(spec.dsn, autocommit=True) as conn:
        info = resolve_queue(conn, spec.queue, create=spec.create_queue)
        if spec.columns.priority is not None:
            # before any task: see publishing.note_priorities
            conn.execute("SELECT pgmq.enable_priorities(%s::text)", (info.queue,))
    return publishing.Target(queue=info)


def prepare_staging(spec: WriteSpec, with_progress: bool) -> None:
    with connect(spec.dsn, autocommit=True) as conn:
        staging.ensure_tables(conn, spec.staging_table, spec.progress_table if with_progress else None)


def publish_task(spec: WriteSpec, target: publishing.Target, batches: Iterator[pa.RecordBatch],
                 job_id: str | None) -> Published:
    """One Spark task: every row of the partition in one transaction, either straight into the
    target (job_id None) or into the staging table under job_id."""
    part_id = publishing.new_id()
    rows = 0
    with connect(spec.dsn) as conn, conn.cursor() as cur:
        clock = publishing.Clock(cur)
        encoded = (publishing.encode(batch, spec.columns, clock.now(), routed=spec.routed)
                   for batch in batches if batch.num_rows)
        if job_id is not None:
            rows = staging.stage_task(cur, spec.staging_table, job_id, part_id, encoded)
        elif target.stream is not None:
            if spec.write_mode == "send":
                for enc in encoded:
                    rows += stream_events.send_events(cur, target.stream, enc)
            else:
                rows = stream_events.copy_events(cur, target.stream, encoded)
        elif spec.routed:
            for enc in encoded:
                rows += publishing.route_rows(cur, enc, spec.exchange, spec.allow_unroutable)
        elif spec.write_mode == "send":
            assert target.queue is not None
            for enc in encoded:
                rows += publishing.send_batch_rows(cur, target.queue.queue, enc)
        else:
            assert target.queue is not None
            rows = publishing.copy_task(cur, target.queue, encoded)
        conn.commit()
    return Published(part_id, rows)


class PublishWriter(DataSourceArrowWriter):
    """``df.write.format("pgmq")``. Default: each task publishes its rows in one transaction
    (at-least-once: a retried task publishes its rows again). exactlyOnce=true: tasks stage
    their rows, and the driver's commit() publishes the parts of the successful task attempts
    in one transaction (all or nothing for the job); with idempotencyKey, a job that already
    committed under that key publishes nothing."""

    def __init__(self, spec: WriteSpec) -> None:
        self.spec = spec
        self.target = target_of(spec)
        self.job_id = publishing.new_id() if spec.exactly_once else None
        if spec.exactly_once:
            prepare_staging(spec, with_progress=spec.idempotency_key is not None)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> Published:
        return publish_task(self.spec, self.target, iterator, self.job_id)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.job_id is None:
            return
        parts = [(m.part_id, m.rows) for m in messages if isinstance(m, Published)]
        key = self.spec.idempotency_key
        done, rows = staging.commit_staged(
            self.spec.dsn, self.spec.staging_table, self.job_id, parts, self.target,
            progress=self.spec.progress_table if key else None,
            sink_id=f"batch:{key}" if key else None, batch_id=0 if key else None)
        if not done:
            log.warning("pgmq: a job with idempotencyKey %r was already published; nothing "
                        "written", key)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        if self.job_id is not None:
            staging.abort_staged(self.spec.dsn, self.spec.staging_table, self.job_id)
