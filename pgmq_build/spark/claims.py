"""Competing-consumer batches: consume() claims messages with pgmq.read (visibility timeout,
FOR UPDATE SKIP LOCKED), materialized exactly once; ack() and nack() finish them by msg_id,
fenced by the lease (msg_id and vt as claimed). ack() sends each partition's rows as lease runs
in one pgmq.ack_ranges call (ranges.py); nack(), and ack() on a pgmq without ack_ranges, send
every (msg_id, vt) (fenced_finish).

No pyspark import at module level: claim() runs in the claim reader's tasks and fenced_finish()
in ack()/nack()'s tasks, the DataFrame functions get the session from their arguments."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql

from .. import validate
from . import ranges
from .connections import QueueInfo, connect, resolve_queue
from .errors import PgmqSparkError
from .snapshot import QUEUE_COLUMNS, RECORD_SELECT, copy_out_batches

# consume() tags the msg_id column with {"pgmq.claim": token}; the DSN stays in this process.
_CLAIMS: dict[str, tuple[str, str]] = {}
CLAIM_KEY = "pgmq.claim"


@dataclass(frozen=True)
class Finished:
    """What ack()/nack() did: ``done`` messages finished; ``skipped`` were no longer ours (the
    lease expired and someone else took the message, or it is gone)."""

    done: int
    skipped: int


# -- the SQL side: one claim, one lease-fenced finish

def claim(dsn: str, info: QueueInfo, vt: int, qty: int,
          conditional: str | None) -> list[pa.RecordBatch]:
    """``pgmq.read(queue, vt, qty)`` in one transaction; the rows are returned only after it has
    committed (a claim that fails to commit hands nothing to Spark)."""
    query = sql.SQL("SELECT " + RECORD_SELECT + " FROM pgmq.read(queue_name => %s::text, "
                    "vt => %s::integer, qty => %s::integer, conditional => %s::jsonb)")
    with connect(dsn) as conn, conn.cursor() as cur:
        batches = list(copy_out_batches(cur, query, (info.queue, vt, qty, conditional or "{}"),
                                        QUEUE_COLUMNS))
        conn.commit()
    return batches


_FENCE = ("SELECT q.msg_id FROM {q} q JOIN unnest(%s::bigint[], %s::timestamptz[]) AS c(id, vt) "
          "ON q.msg_id = c.id AND q.vt = c.vt ORDER BY q.msg_id FOR UPDATE OF q")


def fenced_finish(conn: psycopg.Connection, info: QueueInfo, ids: Sequence[int],
                  vts: Sequence[datetime], mode: str, error: str | None = None) -> int:
    """Delete, archive or nack the claimed messages that still carry the lease we got (same
    msg_id and vt), in one transaction. A message whose lease expired and was taken by someone
    else, or that is gone, is skipped. Returns how many were finished."""
    if not ids:
        return 0
    fence = sql.SQL(_FENCE).format(q=info.q)
    if mode == "delete":
        stmt = sql.SQL("SELECT count(*) FROM pgmq.delete(queue_name => %s::text, "
                       "msg_ids => ARRAY({})::bigint[])").format(fence)
        params: tuple = (info.queue, list(ids), list(vts))
    elif mode == "archive":
        stmt = sql.SQL("SELECT count(*) FROM pgmq.archive(queue_name => %s::text, "
                       "msg_ids => ARRAY({})::bigint[])").format(fence)
        params = (info.queue, list(ids), list(vts))
    elif mode == "nack":
        stmt = sql.SQL("SELECT count(*) FILTER (WHERE pgmq.nack(queue_name => %s::text, "
                       "msg_id => f.msg_id, error => %s::text)) FROM ({}) f").format(fence)
        params = (info.queue, error, list(ids), list(vts))
    else:
        raise PgmqSparkError(f"mode must be 'delete', 'archive' or 'nack', got {mode!r}")
    with conn.transaction():
        n = conn.execute(stmt, params).fetchone()[0]
    return int(n)


# -- the DataFrame API (driver side)

def _default_partitions(spark) -> int:
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect has no SparkContext
        return 2


def consume(spark, *, dsn: str, queue: str, vt: int, max_messages: int,
            partitions: int | None = None, conditional: dict[str, Any] | None = None,
            reliable: bool = False):
    """Claim up to ``max_messages`` visible messages of ``queue`` for ``vt`` seconds as a
    DataFrame, in ``partitions`` parallel ``pgmq.read`` calls (disjoint by SKIP LOCKED; each
    partition asks for its share, so fewer may come back). The claim runs exactly once: the
    result is materialized before it is returned (``localCheckpoint``; ``reliable=True`` uses
    ``checkpoint()``, which needs ``spark.sparkContext.setCheckpointDir``), so later actions never
    claim again. Columns: msg_id, read_ct, enqueued_at, last_read_at, vt, message (JSON text),
    headers (JSON text), priority.

    Finish the rows with :func:`ack` (delete or archive) or :func:`nack`; rows left alone come
    back when their lease expires (at-least-once). A task that Spark retries claims again: the
    first attempt's messages reappear after ``vt``.
    """
    from . import register

    # checked before Spark is asked anything (TypeError: wrong kind; ValueError: out of range)
    validate.queue_name("queue", queue)
    validate.integer("vt", vt, 0)
    validate.integer("max_messages", max_messages, 1)
    if partitions is not None:
        validate.integer("partitions", partitions, 1)
    if conditional is not None and not isinstance(conditional, dict):
        raise TypeError(f"conditional must be a dict (a JSON object) or None, got "
                        f"{type(conditional).__name__}")
    n = partitions or _default_partitions(spark)
    register(spark)
    reader = (spark.read.format("pgmq").option("dsn", dsn).option("queue", queue)
              .option("claimVt", str(vt)).option("claimMax", str(max_messages))
              .option("numPartitions", str(min(n, max_messages))))
    if conditional:
        reader = reader.option("conditional", json.dumps(conditional))
    df = reader.load()
    df = df.checkpoint(eager=True) if reliable else df.localCheckpoint(eager=True)
    token = uuid.uuid4().hex
    _CLAIMS[token] = (dsn, queue)
    return df.withMetadata("msg_id", {CLAIM_KEY: token, "pgmq.queue": queue})


def _resolve(df, dsn: str | None, queue: str | None) -> tuple[str, str]:
    if dsn is not None and queue is not None:
        return dsn, queue
    meta = {}
    if "msg_id" in df.columns:
        meta = df.schema["msg_id"].metadata or {}
    known = _CLAIMS.get(meta.get(CLAIM_KEY, ""))
    if known is None:
        raise PgmqSparkError("this DataFrame does not come from pgmq_build.spark.consume() in "
                                 "this process (its msg_id column lost the claim tag): pass dsn= "
                                 "and queue=")
    return dsn or known[0], queue or known[1]


def _finish(df, mode: str, dsn: str | None, queue: str | None, error: str | None) -> Finished:
    dsn, queue = _resolve(df, dsn, queue)
    for col in ("msg_id", "vt"):
        if col not in df.columns:
            raise PgmqSparkError(f"{mode} needs the columns msg_id and vt of the claim")
    with connect(dsn, autocommit=True) as conn:
        info = resolve_queue(conn, queue)
        by_range = mode != "nack" and ranges.available(conn)

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        done = rows = 0
        conn = None
        ids: list[pa.Array] = []
        vts: list[pa.Array] = []
        try:
            for batch in batches:
                if not batch.num_rows:
                    continue
                rows += batch.num_rows
                if by_range:  # the whole partition in one call, below
                    ids.append(batch.column("msg_id"))
                    vts.append(batch.column("vt"))
                    continue
                if conn is None:
                    conn = connect(dsn, autocommit=True)
                done += fenced_finish(conn, info, batch.column("msg_id").to_pylist(),
                                      batch.column("vt").to_pylist(), mode, error)
            if ids:
                firsts, lasts, leases = ranges.lease_runs(pa.concat_arrays(ids), pa.concat_arrays(vts))
                conn = connect(dsn, autocommit=True)
                done += ranges.ack(conn, info, firsts, lasts, leases, archive=mode == "archive")
        finally:
            if conn is not None:
                conn.close()
        yield pa.record_batch([pa.array([done], pa.int64()), pa.array([rows], pa.int64())],
                              names=["done", "rows"])

    out = df.select("msg_id", "vt").mapInArrow(run, "done long, rows long").collect()
    done = sum(r["done"] for r in out)
    return Finished(done, sum(r["rows"] for r in out) - done)


def ack(df, mode: str = "archive", *, dsn: str | None = None, queue: str | None = None) -> Finished:
    """Finish claimed messages: ``mode="archive"`` (default) moves them to the archive,
    ``"delete"`` deletes them. Only rows whose lease is still the one claimed (same msg_id and
    vt) are finished; the rest are counted as skipped."""
    if mode not in ("archive", "delete"):
        raise ValueError(f"mode must be 'archive' or 'delete', got {mode!r}")
    return _finish(df, mode, dsn, queue, None)


def nack(df, error: str | None = None, *, dsn: str | None = None,
         queue: str | None = None) -> Finished:
    """Report failed deliveries with ``pgmq.nack``: each message comes back after the queue's
    retry delay, or is dead-lettered once its deliveries are used up (lease-fenced like ack)."""
    return _finish(df, "nack", dsn, queue, error)
