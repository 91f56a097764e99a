"""A pgmq stream's side of the Spark connector (psycopg + pyarrow, no pyspark import): positions
(ticks: a tick is a transaction snapshot), the events committed between two positions read as
Arrow, ranges split into partitions, a subscription moved to a position, and the write paths
into a stream (binary COPY into its current segment, or ``pgmq.stream_send_batch``).

Events between positions A and B are those committed after A's snapshot and by B's, exactly what
``pgmq.stream_read`` hands out for a batch cut at A and B (the predicate below is the one of
``pgmq._stream_events``; tests/spark/test_stream_source.py compares both). Reading a range
changes nothing, so re-reading it gives the same events: Spark's replay of a micro-batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import psycopg
import pyarrow as pa
from psycopg import sql

from . import copybinary
from .connections import connect
from .errors import PgmqSparkError
from .publishing import Encoded
from .snapshot import copy_out_batches

# templates/_macros/stream.sql.j2's SEGMENT_NAMES: segment n of stream s is table
# s_<s>$<n % SEGMENT_NAMES> (tests/unit/test_spark_layout.py checks that both agree).
SEGMENT_NAMES = 100_000

EVENT_COLUMNS = ("ev_id", "ev_time", "message", "headers")
_EVENTS = ("SELECT ev_id, ev_time, message::text, headers::text FROM {} "
           "WHERE ev_txid >= pg_snapshot_xmin(%(after)s::pg_snapshot) "
           "AND ev_txid < pg_snapshot_xmax(%(upto)s::pg_snapshot) "
           "AND pg_visible_in_snapshot(ev_txid, %(upto)s::pg_snapshot) "
           "AND NOT pg_visible_in_snapshot(ev_txid, %(after)s::pg_snapshot) {} ORDER BY ev_id")


@dataclass(frozen=True)
class StreamRef:
    """A stream and its (parent) table in schema pgmq; reading the parent reads every segment."""

    stream: str
    table: str

    @property
    def t(self) -> sql.Composable:
        return sql.Identifier("pgmq", self.table)


@dataclass(frozen=True)
class Tick:
    """A position: its id, its snapshot (text) and the last ev_id drawn when it was made."""

    tick_id: int
    snapshot: str
    last_ev_id: int


def resolve_stream(conn: psycopg.Connection, stream: str) -> StreamRef:
    """The stream's table; PgmqSparkError when there is no such stream."""
    if not stream:
        raise PgmqSparkError("option 'stream' is required")
    row = conn.execute("SELECT EXISTS (SELECT 1 FROM pgmq.streams WHERE stream_name = %s), "
                       "pgmq.format_table_name(%s::text, 's')", (stream, stream)).fetchone()
    if not conn.autocommit:
        conn.commit()
    if not row[0]:
        raise PgmqSparkError(f"stream {stream!r} does not exist (SELECT pgmq.create_stream({stream!r}))")
    return StreamRef(stream, row[1])


def tick(conn: psycopg.Connection, ref: StreamRef, tick_id: int) -> Tick:
    """Position ``tick_id``, or when retention removed it, the newest kept position before it:
    a position goes only once every subscription has acknowledged what it covers and nothing
    newer than the next kept one lives in a dropped segment, so both cut the stream alike."""
    row = conn.execute("SELECT tick_id, tick_snapshot::text, last_ev_id FROM pgmq.stream_ticks "
                       "WHERE stream_name = %s AND tick_id <= %s ORDER BY tick_id DESC LIMIT 1",
                       (ref.stream, tick_id)).fetchone()
    if row is None:
        row = conn.execute("SELECT tick_id, tick_snapshot::text, last_ev_id FROM pgmq.stream_ticks "
                           "WHERE stream_name = %s ORDER BY tick_id LIMIT 1", (ref.stream,)).fetchone()
    if row is None:
        raise PgmqSparkError(f"stream {ref.stream!r} has no positions (was it dropped?)")
    return Tick(int(row[0]), row[1], int(row[2]))


def earliest(conn: psycopg.Connection, ref: StreamRef) -> int:
    """The oldest position kept (where 'earliest' starts)."""
    return tick(conn, ref, 0).tick_id


def latest(conn: psycopg.Connection, ref: StreamRef) -> int:
    """A position after every event committed by now: pgmq.stream_tick makes one when events
    came since the last (and runs the stream's rotation and retention)."""
    conn.execute("SELECT pgmq.stream_tick(stream_name => %s::text)", (ref.stream,))
    return int(conn.execute("SELECT max(tick_id) FROM pgmq.stream_ticks WHERE stream_name = %s",
                            (ref.stream,)).fetchone()[0])


def plan_end(conn: psycopg.Connection, ref: StreamRef, start: int, high: int,
             max_rows: int | None) -> int:
    """The end of the next range after ``start``, at most ``high``: the furthest position whose
    events, counted from the ev_ids drawn in between, stay within ``max_rows`` (at least the
    next position: a range is never cut inside one). ``start`` when nothing is new."""
    begin = tick(conn, ref, start)
    rows = conn.execute("SELECT tick_id, last_ev_id FROM pgmq.stream_ticks WHERE stream_name = %s "
                        "AND tick_id > %s AND tick_id <= %s ORDER BY tick_id",
                        (ref.stream, start, high)).fetchall()
    end = start
    for tick_id, last_ev_id in rows:
        if max_rows is not None and end != start and last_ev_id - begin.last_ev_id > max_rows:
            break
        end = int(tick_id)
    return end


def split(after: Tick, upto: Tick, partitions: int) -> list[tuple[int | None, int]]:
    """(lo, hi] ev_id ranges covering the events of (after, upto]: ids drawn between the two
    ticks cut evenly; the first range also takes every lower id (events whose producers
    committed late). lo None: no lower bound."""
    span = max(0, upto.last_ev_id - after.last_ev_id)
    k = max(1, min(partitions, span))
    bounds = [after.last_ev_id + span * i // k for i in range(k + 1)]
    return [(None if i == 0 else bounds[i], bounds[i + 1]) for i in range(k)]


def read_events(dsn: str, ref: StreamRef, after: str, upto: str, lo: int | None,
                hi: int) -> Iterator[pa.RecordBatch]:
    """The events committed after snapshot ``after`` and by ``upto`` with lo < ev_id <= hi, in
    ev_id order, as Arrow batches (one read-only transaction)."""
    where = sql.SQL("AND ev_id <= %(hi)s" if lo is None else "AND ev_id > %(lo)s AND ev_id <= %(hi)s")
    query = sql.SQL(_EVENTS).format(ref.t, where)
    with connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SET TRANSACTION READ ONLY")
        yield from copy_out_batches(cur, query, {"after": after, "upto": upto, "lo": lo, "hi": hi},
                                    EVENT_COLUMNS)
        conn.commit()


# -- subscriptions

def subscribe(conn: psycopg.Connection, ref: StreamRef, subscription: str, start: str) -> int:
    """pgmq.subscribe (idempotent: an existing subscription keeps its position); its position."""
    return int(conn.execute("SELECT pgmq.subscribe(stream_name => %s::text, subscription_name => "
                            "%s::text, start => %s::text)", (ref.stream, subscription, start)).fetchone()[0])


def position(conn: psycopg.Connection, ref: StreamRef, subscription: str) -> int | None:
    row = conn.execute("SELECT position FROM pgmq.stream_info(stream_name => %s::text) "
                       "WHERE subscription_name = %s", (ref.stream, subscription)).fetchone()
    return None if row is None else int(row[0])


def move_to(conn: psycopg.Connection, ref: StreamRef, subscription: str, tick_id: int) -> int:
    """Set the subscription's position (pgmq.stream_rewind): retention keeps what follows it.
    A position retention removed meanwhile stands for the newest kept one before it (tick())."""
    target = tick(conn, ref, tick_id).tick_id
    return int(conn.execute("SELECT pgmq.stream_rewind(stream_name => %s::text, subscription_name "
                            "=> %s::text, to_position => %s::bigint)",
                            (ref.stream, subscription, target)).fetchone()[0])


# -- writing

def current_segment(cur: psycopg.Cursor, ref: StreamRef) -> sql.Composable:
    """The segment table producers write to now (the caller's transaction then holds it: a
    segment is dropped only once every transaction that could write to it has ended)."""
    cur.execute("SELECT current_segment FROM pgmq.streams WHERE stream_name = %s", (ref.stream,))
    row = cur.fetchone()
    if row is None:
        raise PgmqSparkError(f"stream {ref.stream!r} does not exist")
    return sql.Identifier("pgmq", f"{ref.table}${int(row[0]) % SEGMENT_NAMES}")


STREAM_COPY_COLUMNS = "(message, headers)"


def copy_events(cur: psycopg.Cursor, ref: StreamRef, batches: Iterable[Encoded]) -> int:
    """Every batch into the stream's current segment through one ``COPY ... (FORMAT binary)``;
    ev_id, ev_txid and ev_time come from the segment's defaults as for pgmq.stream_send. One
    transaction is the caller's."""
    n = 0
    stmt = sql.SQL("COPY {} " + STREAM_COPY_COLUMNS + " FROM STDIN (FORMAT binary)").format(
        current_segment(cur, ref))
    with cur.copy(stmt) as copy:
        copy.write(copybinary.SIGNATURE)
        for enc in batches:
            if enc.num_rows:
                copy.write(copybinary.rows([(enc.message, copybinary.JSONB),
                                            (enc.headers, copybinary.JSONB)]))
                n += enc.num_rows
        copy.write(copybinary.TRAILER)
    return n


def send_events(cur: psycopg.Cursor, ref: StreamRef, enc: Encoded) -> int:
    """One encoded batch through pgmq.stream_send_batch."""
    if not enc.num_rows:
        return 0
    hdrs = None if enc.headers.null_count == enc.num_rows else enc.headers.to_pylist()
    cur.execute("SELECT count(*) FROM pgmq.stream_send_batch(%s::text, %s::text[]::jsonb[], "
                "%s::text[]::jsonb[])", (ref.stream, enc.message.to_pylist(), hdrs))
    return int(cur.fetchone()[0])
