"""Acknowledging a batch by msg_id ranges with ``pgmq.ack_ranges`` (psycopg + pyarrow + numpy,
no pyspark import): a claim's rows as runs of consecutive ids that share one lease (one
pgmq.read stamps one vt on every row it leases, so a claim is one run or a few), a stream
batch's ids as ranges. Sending two arrays of every id and vt and joining them cost more than
the delete itself (docs/performance/spark-consumption.md); a few ranges cost nothing.

A server whose pgmq predates ack_ranges (2.9.0 and older) gets the callers' per-id statements
instead (``available``)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc

from .connections import QueueInfo

SIGNATURE = "pgmq.ack_ranges(text,bigint[],bigint[],timestamp with time zone[],boolean)"
_TS = pa.timestamp("us", tz="UTC")


def available(conn: psycopg.Connection) -> bool:
    """Whether the server's pgmq has ack_ranges."""
    return conn.execute("SELECT to_regprocedure(%s) IS NOT NULL", (SIGNATURE,)).fetchone()[0]


def lease_runs(ids: pa.Array, vts: pa.Array) -> tuple[list[int], list[int], list[datetime]]:
    """(first_ids, last_ids, leases): the rows (msg_id, vt) as runs of consecutive msg_ids with
    one vt, covering exactly these ids (rows with a NULL msg_id or vt are left out: they hold
    no lease)."""
    keep = pc.and_(ids.is_valid(), vts.is_valid())
    if keep.false_count:
        ids, vts = ids.filter(keep), vts.filter(keep)
    if not len(ids):
        return [], [], []
    i = np.asarray(ids.cast(pa.int64()))
    v = np.asarray(vts.cast(_TS).cast(pa.int64()))
    order = np.lexsort((v, i))
    i, v = i[order], v[order]
    cut = np.flatnonzero((np.diff(i) != 1) | (np.diff(v) != 0)) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut - 1, [len(i) - 1]))
    leases = pa.array(v[starts], pa.int64()).cast(_TS).to_pylist()
    return i[starts].tolist(), i[ends].tolist(), leases


def id_ranges(after: int, upto: int, without: Iterable[int],
              plus: Iterable[int] = ()) -> tuple[list[int], list[int]]:
    """(first_ids, last_ids) covering the ids in (after, upto] and in ``plus``, minus ``without``."""
    skip = set(without)
    firsts: list[int] = []
    lasts: list[int] = []
    lo = after + 1
    for x in sorted(x for x in skip if after < x <= upto):
        if x > lo:
            firsts.append(lo)
            lasts.append(x - 1)
        lo = x + 1
    if lo <= upto:
        firsts.append(lo)
        lasts.append(upto)
    for x in sorted(set(plus) - skip):
        firsts.append(x)
        lasts.append(x)
    return firsts, lasts


def ack(conn: psycopg.Connection, info: QueueInfo, firsts: Sequence[int], lasts: Sequence[int],
        leases: Sequence[datetime] | None, archive: bool) -> int:
    """One pgmq.ack_ranges call (its own transaction on an autocommit connection); how many
    messages it finished."""
    if not firsts:
        return 0
    row = conn.execute("SELECT pgmq.ack_ranges(queue_name => %s::text, first_ids => %s::bigint[], "
                       "last_ids => %s::bigint[], leases => %s::timestamptz[], archive => %s)",
                       (info.queue, list(firsts), list(lasts),
                        None if leases is None else list(leases), archive)).fetchone()
    return int(row[0])
