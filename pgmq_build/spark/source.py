"""The "pgmq" Python data source: batch read (snapshot or claim), batch write, stream read and
stream write. Options are documented in pgmq_build/spark/__init__.py.

Where each direction lives (the modules marked * import no pyspark and run on executors too):

* batch.py: SnapshotReader, ClaimReader, StreamRangeReader, PublishWriter (Spark's side of
  batch reads and writes)
* stream.py: PgmqStreamReader, SubscriptionStreamReader, PgmqStreamWriter (Spark's side of
  streaming)
* options.py*: option parsing into picklable specs
* connections.py*: connections, quoted names, a queue's tables; errors.py*: PgmqSparkError
* snapshot.py*: rows as Arrow (COPY to CSV parsed by pyarrow), msg_id ranges
* claims.py*: pgmq.read claims, lease-fenced ack/nack, and consume() / ack() / nack()
* offsets.py*: the stream reader's offsets, safe high-water mark, planning and acks
* acker.py*: the stream reader's acks in the background (one connection and thread)
* publishing.py*: Arrow batch encoding and the insert paths (COPY, send, topics, exchanges)
* copybinary.py*: Arrow columns as PostgreSQL binary COPY rows (the publish paths' COPY format)
* staging.py*: exactly-once publishing (staging table, sink progress, the connector's tables)
* stream_events.py*: a pgmq stream's positions, events between two of them, subscriptions,
  and the writes into a stream
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
)
from pyspark.sql.types import StructType

from .errors import PgmqSparkError
from .options import read_spec, stream_spec, write_spec

QUEUE_SCHEMA = ("msg_id long, read_ct int, enqueued_at timestamp, last_read_at timestamp, "
                "vt timestamp, message string, headers string, priority int")
ARCHIVE_SCHEMA = QUEUE_SCHEMA + ", archived_at timestamp"
STREAM_SCHEMA = "ev_id long, ev_time timestamp, message string, headers string"  # option stream


def column_types(schema: StructType) -> dict[str, str]:
    """Each column's Spark type, for write_spec's checks in the driver (before any task runs)."""
    return {f.name: f.dataType.simpleString() for f in schema.fields}


class PgmqDataSource(DataSource):
    """``format("pgmq")``: PostgreSQL pgmq queues and streams as a Spark source and sink."""

    @classmethod
    def name(cls) -> str:
        return "pgmq"

    def schema(self) -> str:
        if self.options.get("stream") is not None:
            return STREAM_SCHEMA
        table = (self.options.get("table") or "queue").strip().lower()
        return ARCHIVE_SCHEMA if table == "archive" else QUEUE_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch import ClaimReader, SnapshotReader, StreamRangeReader

        spec = read_spec(self.options)
        if spec.stream is not None:
            return StreamRangeReader(spec)
        if spec.claim_vt is not None:
            if spec.table != "queue":
                raise PgmqSparkError("a claim reads the queue table, not the archive")
            return ClaimReader(spec)
        return SnapshotReader(spec)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .batch import PublishWriter

        if overwrite:
            raise PgmqSparkError("a pgmq queue can only be appended to: use .mode('append')")
        return PublishWriter(write_spec(self.options, column_types(schema), streaming=False))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream import FailedStreamReader, PgmqStreamReader, SubscriptionStreamReader

        try:
            spec = stream_spec(self.options)
            if spec.stream is not None:
                return SubscriptionStreamReader(spec)
            return PgmqStreamReader(spec)
        except Exception as e:  # raised at Spark's first call (FailedStreamReader says why)
            return FailedStreamReader(e)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .options import sink_key
        from .stream import PgmqStreamWriter

        if overwrite:
            raise PgmqSparkError("a pgmq queue can only be appended to: use outputMode('append')")
        spec = write_spec(self.options, column_types(schema), streaming=True)
        return PgmqStreamWriter(spec, sink_key(spec, self.options) if spec.exactly_once else "")
