"""Reading queue and archive rows as Arrow (psycopg + pyarrow, no pyspark import): ``COPY (SELECT
...) TO STDOUT (FORMAT csv)`` parsed by ``pyarrow.csv`` into record batches of a fixed schema.
Used by the snapshot reader (msg_id ranges of the queue or archive, each in a read-only
transaction), by the stream reader's batches (the same range reads) and by claims."""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.csv as pcsv
from psycopg import sql

from .. import headers as pgmq_headers
from .connections import QueueInfo, connect

# -- the columns a reader returns (Spark schema in source.py mirrors these) --------------------

_PRIORITY_FROM_HEADERS = (f"CASE WHEN headers->>'{pgmq_headers.PRIORITY}' ~ '^\\s*-?[0-9]+\\s*$' THEN "
                          f"least(greatest((headers->>'{pgmq_headers.PRIORITY}')::numeric, -2147483648), "
                          "2147483647)::integer ELSE 0 END")
QUEUE_COLUMNS = ("msg_id", "read_ct", "enqueued_at", "last_read_at", "vt", "message", "headers",
                 "priority")
ARCHIVE_COLUMNS = QUEUE_COLUMNS + ("archived_at",)
_QUEUE_SELECT = ("msg_id, read_ct, enqueued_at, last_read_at, vt, message::text, headers::text, "
                 "priority")
_ARCHIVE_SELECT = ("msg_id, read_ct, enqueued_at, last_read_at, vt, message::text, headers::text, "
                   f"{_PRIORITY_FROM_HEADERS}, archived_at")
# The columns of a pgmq.read() result (a message record has no priority column: claims.py).
RECORD_SELECT = ("msg_id, read_ct, enqueued_at, last_read_at, vt, message::text, headers::text, "
                 f"{_PRIORITY_FROM_HEADERS}")

_TS = pa.timestamp("us", tz="UTC")
ARROW_TYPES = {"msg_id": pa.int64(), "read_ct": pa.int32(), "enqueued_at": _TS,
               "last_read_at": _TS, "vt": _TS, "message": pa.string(), "headers": pa.string(),
               "priority": pa.int32(), "archived_at": _TS,
               "ev_id": pa.int64(), "ev_time": _TS}  # a stream's events (stream_events.py)


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    return pa.schema([pa.field(c, ARROW_TYPES[c], nullable=True) for c in columns])


class _CopyStream(io.RawIOBase):
    """A read-only file over the chunks of a psycopg Copy (for pyarrow.csv.open_csv). libpq
    hands COPY data over one row at a time: read(n) gathers rows up to n bytes."""

    def __init__(self, chunks: Iterator[bytes], first: bytes) -> None:
        self._chunks = chunks
        self._rest = first

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        parts = [self._rest] if self._rest else []
        size = len(self._rest)
        self._rest = b""
        while n < 0 or size < n:
            nxt = next(self._chunks, None)
            if nxt is None:
                break
            parts.append(nxt)
            size += len(nxt)
        data = b"".join(parts)
        if 0 <= n < len(data):
            data, self._rest = data[:n], data[n:]
        return data

    def readinto(self, b: Any) -> int:
        data = self.read(len(b))
        b[:len(data)] = data
        return len(data)


def copy_out_batches(cur: psycopg.Cursor, query: sql.Composable, params: Sequence[Any] | None,
                     columns: Sequence[str], block_size: int = 1 << 20) -> Iterator[pa.RecordBatch]:
    """Run ``COPY (query) TO STDOUT (FORMAT csv)`` and yield Arrow record batches whose schema
    is exactly ``arrow_schema(columns)``."""
    schema = arrow_schema(columns)
    stmt = sql.SQL("COPY ({}) TO STDOUT (FORMAT csv)").format(query)
    with cur.copy(stmt, params) as copy:
        chunks = (bytes(c) for c in copy)
        first = next(chunks, None)
        if first is None:
            return
        reader = pcsv.open_csv(
            _CopyStream(chunks, first),
            read_options=pcsv.ReadOptions(column_names=list(columns), block_size=block_size),
            parse_options=pcsv.ParseOptions(newlines_in_values=False),
            convert_options=pcsv.ConvertOptions(
                column_types={c: ARROW_TYPES[c] for c in columns},
                strings_can_be_null=True, quoted_strings_can_be_null=False))
        for batch in reader:
            if batch.num_rows:
                yield batch if batch.schema.equals(schema) else batch.cast(schema)


def table_select(info: QueueInfo, table: str) -> tuple[sql.Composable, tuple[str, ...]]:
    if table == "archive":
        return sql.SQL("SELECT " + _ARCHIVE_SELECT + " FROM {}").format(info.a), ARCHIVE_COLUMNS
    return sql.SQL("SELECT " + _QUEUE_SELECT + " FROM {}").format(info.q), QUEUE_COLUMNS


def msg_id_bounds(conn: psycopg.Connection, info: QueueInfo, table: str) -> tuple[int, int] | None:
    rel = info.a if table == "archive" else info.q
    row = conn.execute(sql.SQL("SELECT min(msg_id), max(msg_id) FROM {}").format(rel)).fetchone()
    if not conn.autocommit:
        conn.commit()
    return None if row is None or row[0] is None else (int(row[0]), int(row[1]))


def read_range(dsn: str, info: QueueInfo, table: str, lo: int, hi: int,
               exclude: Sequence[int] = (), include: Sequence[int] = ()) -> Iterator[pa.RecordBatch]:
    """Rows with lo < msg_id <= hi (minus ``exclude``) plus the ids in ``include``, in one
    read-only transaction."""
    select, columns = table_select(info, table)
    where = [sql.SQL("(msg_id > %s AND msg_id <= %s AND msg_id <> ALL(%s::bigint[]))")]
    params: list[Any] = [lo, hi, list(exclude)]
    if include:
        where.append(sql.SQL("msg_id = ANY(%s::bigint[])"))
        params.append(list(include))
    query = sql.SQL("{} WHERE {} ORDER BY msg_id").format(select, sql.SQL(" OR ").join(where))
    with connect(dsn) as conn, conn.cursor() as cur:
        cur.execute("SET TRANSACTION READ ONLY")
        yield from copy_out_batches(cur, query, params, columns)
        conn.commit()


def split_range(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """(lo-1, hi] cut into up to ``parts`` half-open id ranges (a, b]."""
    span = hi - lo + 1
    k = max(1, min(parts, span))
    start = lo - 1
    return [(start + span * i // k, start + span * (i + 1) // k) for i in range(k)]
