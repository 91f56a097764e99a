"""The options of the Spark data source "pgmq", declared once: which directions read each one,
its default and what it means. pgmq_build/spark/options.py takes its lists of known options
from here, and `pgmq-build generate` renders docs/reference/spark-options.md from it. Kept
outside pgmq_build.spark, which needs pyspark to import: the build commands do not.
"""

from __future__ import annotations

from dataclasses import dataclass

DIRECTIONS = ("read", "readStream", "write")
_ALL = DIRECTIONS


@dataclass(frozen=True)
class SparkOption:
    name: str
    where: tuple[str, ...]  # the directions that accept it (others refuse it)
    default: str  # as documented: the code applies it where it parses the option
    doc: str
    applies: str = "both"  # "queue": refused with option stream; "stream": refused without it


# In an order that keeps each direction's list (OPTIONS below) in the order it always had: the
# "known: ..." list of an unknown-option error is that order.
DECLARED: tuple[SparkOption, ...] = (
    SparkOption("dsn", _ALL, "(required)", "libpq connection string or URL."),
    SparkOption("user", _ALL, "", "Added to dsn."),
    SparkOption("password", _ALL, "", "Added to dsn (Spark redacts a `password` option in plans and "
                "logs; a password inside `dsn` is not redacted)."),
    SparkOption("queue", _ALL, "", "Queue name."),
    SparkOption("stream", _ALL, "", "Stream name (instead of queue; queue-only options are refused)."),
    SparkOption("subscription", ("readStream",), "", "The stream's subscription the query consumes "
                "(made from startingOffsets when missing; the query is its only consumer).",
                applies="stream"),
    SparkOption("table", ("read",), "queue", "`queue` or `archive`.", applies="queue"),
    SparkOption("numPartitions", ("read", "readStream"), "read: one per 100k msg_ids; readStream: 2",
                "Spark partitions."),
    SparkOption("claimVt", ("read",), "", "Claim mode (`pgmq_build.spark.consume`): lease the messages "
                "with `pgmq.read` for this many seconds instead of a snapshot.", applies="queue"),
    SparkOption("claimMax", ("read",), "1000", "Claim mode: at most this many messages.", applies="queue"),
    SparkOption("conditional", ("read",), "", "Claim mode: `pgmq.read`'s conditional, a JSON object.",
                applies="queue"),
    SparkOption("fromPosition", ("read",), "the earliest kept",
                "A stream's position: events committed after it.", applies="stream"),
    SparkOption("toPosition", ("read",), "a position made when the read is planned",
                "A stream's position: events committed by it.", applies="stream"),
    SparkOption("maxRowsPerBatch", ("readStream",), "", "At most this many messages per micro-batch "
                "(streams: counted at whole positions, at least one per batch)."),
    SparkOption("startingOffsets", ("readStream",), "earliest",
                "`earliest` or `latest` (streams: or a position)."),
    SparkOption("onCommit", ("readStream",), "archive", "`archive`, `delete` or `none`.", applies="queue"),
    SparkOption("ackOnLatestOffset", ("readStream",), "true", "Also ack when Spark plans the next batch "
                "(the only way the last batch of an availableNow run is acked)."),
    SparkOption("safeOffsets", ("readStream",), "true", "Wait for in-flight producers before advancing.",
                applies="queue"),
    SparkOption("inflightWaitSeconds", ("readStream",), "5", "How long one trigger waits for them.",
                applies="queue"),
    SparkOption("respectVisibility", ("readStream",), "true",
                "Hold back messages whose vt is in the future.", applies="queue"),
    SparkOption("maxPendingMessages", ("readStream",), "10000",
                "At most this many held-back ids in an offset.", applies="queue"),
    SparkOption("messageColumn", ("write",), "message", "JSON text, binary or struct/map/array column."),
    SparkOption("headersColumn", ("write",), "headers, if present", "JSON object column."),
    SparkOption("delayColumn", ("write",), "delay, if present",
                "Seconds (integer) or visibility timestamp.", applies="queue"),
    SparkOption("priorityColumn", ("write",), "priority, if present", "Integer, goes into header "
                "`x-pgmq-priority` (lower is served first).", applies="queue"),
    SparkOption("exchange", ("write",), "", "Publish through `pgmq.publish(exchange, routing_key, ...)`.",
                applies="queue"),
    SparkOption("routingKeyColumn", ("write",), "routing_key", "Routing key column; without `exchange` "
                "the rows go through `pgmq.send_topic`.", applies="queue"),
    SparkOption("allowUnroutable", ("write",), "false", "Topic routing: drop rows no binding matches "
                "(otherwise fail).", applies="queue"),
    SparkOption("writeMode", ("write",), "copy", "`copy` (COPY into the queue table, or a stream's current "
                "segment) or `send` (every row through `pgmq.send_batch` / `pgmq.stream_send_batch`)."),
    SparkOption("exactlyOnce", ("write",), "batch: false; stream: true",
                "Stage rows and publish the whole job in one transaction in the driver's commit."),
    SparkOption("idempotencyKey", ("write",), "", "Batch: publish a job with this key at most once."),
    SparkOption("createQueue", ("write",), "false", "`pgmq.create(queue)` first.", applies="queue"),
    SparkOption("sinkId", ("write",), "the checkpoint location + the query id stored in it",
                "The stream sink's name in the progress table."),
    SparkOption("stagingTable", ("write",), "pgmq_spark.staging", "Staging table (created on first use)."),
    SparkOption("progressTable", ("write",), "pgmq_spark.sink_batches",
                "Committed stream batch ids (created on first use)."),
    SparkOption("checkpointLocation", ("write",), "", "Set by Spark from writeStream's option: names the "
                "exactly-once stream sink when sinkId is not given."),
    SparkOption("path", _ALL, "", "Set by Spark from `load(path)` / `save(path)`; not used."),
)

OPTIONS: dict[str, tuple[str, ...]] = {d: tuple(o.name for o in DECLARED if d in o.where) for d in DIRECTIONS}
QUEUE_ONLY = tuple(o.name for o in DECLARED if o.applies == "queue")
STREAM_ONLY = tuple(o.name for o in DECLARED if o.applies == "stream")
