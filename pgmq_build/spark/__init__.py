"""PySpark connector for pgmq queues (extra ``[spark]``: pyspark >= 4.2, pyarrow, pandas < 3).

A Python data source named ``"pgmq"`` (no JVM code, no jar). It is registered automatically
through the top-level module ``pyspark_pgmq`` when this package is installed where the Spark
driver's Python workers can import it, and explicitly by :func:`register`.

Directions and their guarantees:

* ``df.write.format("pgmq")`` publishes (``mode("append")``): at-least-once per task by
  default; ``exactlyOnce=true`` stages rows and publishes the whole job in one transaction in the
  driver's commit; ``idempotencyKey=K`` additionally makes a re-run of the same job a no-op.
* ``spark.read.format("pgmq")`` snapshots the queue (or ``table=archive``) without changing it.
* :func:`consume` claims messages (``pgmq.read`` with a visibility timeout) as competing
  consumers, materialized exactly once; finish them with :func:`ack` or :func:`nack`.
* ``spark.readStream.format("pgmq")`` is a log consumer (the queue's only consumer):
  at-least-once, exactly-once end-to-end with an idempotent or transactional sink.
* ``writeStream.format("pgmq")`` publishes exactly-once across restarts (committed batch ids are
  recorded in ``pgmq_spark.sink_batches``).
* With option ``stream`` instead of ``queue`` (a pgmq stream): ``readStream`` consumes a
  subscription (option ``subscription``; offsets are positions, the subscription follows what
  Spark commits; exactly-once end-to-end with an idempotent or transactional sink), ``read``
  returns the events between two positions (``fromPosition``, ``toPosition``) without consuming
  them, and the writers append events (``ev_id, ev_time, message, headers``).

Options (case-insensitive): docs/reference/spark-options.md, generated from their declaration
in pgmq_build/spark_options.py.

Unknown options, options of another direction, numbers out of range and columns of the wrong
type raise PgmqSparkError in the driver, before any task runs (options.py).
"""

from __future__ import annotations

try:
    import pyarrow  # noqa: F401
    import pyspark  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("pgmq_build.spark needs the spark extra: pip install 'pgmq-build[spark]' "
                      f"({exc})") from exc

from .claims import Finished, ack, consume, nack
from .errors import PgmqSparkError
from .source import PgmqDataSource
from .staging import cleanup_staging

__all__ = ["PgmqDataSource", "PgmqSparkError", "Finished", "register", "consume", "ack", "nack",
           "publish", "cleanup_staging"]


def register(spark) -> None:
    """Register the "pgmq" data source on this SparkSession (idempotent) and make the session
    the calling thread's active one. Spark looks a Python data source up for a write
    (``write.format``, ``writeStream.format``) in the thread's active session only: in a
    thread other than the one that made the session, such a write fails with
    DATA_SOURCE_NOT_FOUND until this is called there (publish() calls it)."""
    spark.dataSource.register(PgmqDataSource)
    jvm = getattr(spark, "_jvm", None)  # classic Spark; Spark Connect has no JVM here
    if jvm is not None:
        type(spark)._get_j_spark_session_class(jvm).setActiveSession(spark._jsparkSession)


def publish(df, *, dsn: str, queue: str | None = None, message: str | None = None,
            exactly_once: bool = False, **options: str) -> None:
    """Publish a DataFrame: ``message`` names a column to send as is (JSON text or a struct); by
    default every column but headers/delay/priority/routing_key becomes the JSON message,
    serialized in the JVM with ``to_json``. Extra keyword options go to the writer."""
    from pyspark.sql import functions as F

    reserved = {options.get(k, d) for k, d in (("headersColumn", "headers"), ("delayColumn", "delay"),
                                                ("priorityColumn", "priority"),
                                                ("routingKeyColumn", "routing_key"))}
    if message is None:
        body = [c for c in df.columns if c not in reserved]
        extra = [c for c in df.columns if c in reserved]
        df = df.select(F.to_json(F.struct(*body)).alias("message"), *extra)
    else:
        if message not in df.columns:
            raise PgmqSparkError(f"publish(message={message!r}): no such column in {df.columns}")
        dtype = df.schema[message].dataType.typeName()
        if dtype != "string":
            df = df.withColumn(message, F.to_json(F.col(message)))
        options.setdefault("messageColumn", message)
    register(df.sparkSession)
    writer = df.write.format("pgmq").option("dsn", dsn).mode("append")
    if queue is not None:
        writer = writer.option("queue", queue)
    if exactly_once:
        writer = writer.option("exactlyOnce", "true")
    writer.options(**{k: str(v) for k, v in options.items()}).save()
