"""Every PostgreSQL call of the Spark connector (psycopg + pyarrow, no pyspark import), so that
it can be exercised without Spark.

Reads go through ``COPY (SELECT ...) TO STDOUT (FORMAT csv)`` parsed by ``pyarrow.csv``; writes
through ``pyarrow.csv`` -> ``COPY ... FROM STDIN``. Rows that the extension treats specially on
insert (``x-pgmq-dedup-id``, ``x-pgmq-ttl``, ``x-pgmq-max-retries`` headers, or an
``x-pgmq-priority`` that is not a plain integer) never take the COPY path: they go through
``pgmq.send`` so that the server applies its own rules.
"""

from __future__ import annotations

import io
import json
import math
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pcsv
from psycopg import sql

APPLICATION_NAME = "pgmq-spark"
# The connector's own objects (staging rows, sink progress) live here unless options say otherwise.
DEFAULT_SCHEMA = "pgmq_spark"
DEFAULT_STAGING_TABLE = f"{DEFAULT_SCHEMA}.staging"
DEFAULT_PROGRESS_TABLE = f"{DEFAULT_SCHEMA}.sink_batches"
# Headers whose insert-time meaning lives in the extension's send paths (dedup, limit marks).
SPECIAL_HEADERS = ("x-pgmq-dedup-id", "x-pgmq-ttl", "x-pgmq-max-retries")
PRIORITY_HEADER = "x-pgmq-priority"
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Sink progress rows kept per sink (older batch ids can never be replayed by Spark).
PROGRESS_KEEP = 100
# Staging rows older than this belong to dead jobs and are removed by any later commit.
STAGING_RETENTION = timedelta(days=7)

# -- the columns a reader returns (Spark schema in source.py mirrors these) --------------------

_PRIORITY_FROM_HEADERS = ("CASE WHEN headers->>'x-pgmq-priority' ~ '^\\s*-?[0-9]+\\s*$' THEN "
                          "least(greatest((headers->>'x-pgmq-priority')::numeric, -2147483648), "
                          "2147483647)::integer ELSE 0 END")
QUEUE_COLUMNS = ("msg_id", "read_ct", "enqueued_at", "last_read_at", "vt", "message", "headers",
                 "priority")
ARCHIVE_COLUMNS = QUEUE_COLUMNS + ("archived_at",)
_QUEUE_SELECT = ("msg_id, read_ct, enqueued_at, last_read_at, vt, message::text, headers::text, "
                 "priority")
_ARCHIVE_SELECT = ("msg_id, read_ct, enqueued_at, last_read_at, vt, message::text, headers::text, "
                   f"{_PRIORITY_FROM_HEADERS}, archived_at")
_RECORD_SELECT = ("msg_id, read_ct, enqueued_at, last_read_at, vt, message::text, headers::text, "
                  f"{_PRIORITY_FROM_HEADERS}")

_TS = pa.timestamp("us", tz="UTC")
ARROW_TYPES = {"msg_id": pa.int64(), "read_ct": pa.int32(), "enqueued_at": _TS,
               "last_read_at": _TS, "vt": _TS, "message": pa.string(), "headers": pa.string(),
               "priority": pa.int32(), "archived_at": _TS}


def arrow_schema(columns: Sequence[str]) -> pa.Schema:
    return pa.schema([pa.field(c, ARROW_TYPES[c], nullable=True) for c in columns])


class PgmqSparkError(RuntimeError):
    """A usage error of the connector with a message meant for the user."""


# ----------------------------------------------------------------------------- connections

def connect(dsn: str, *, autocommit: bool = False) -> psycopg.Connection:
    conn = psycopg.connect(dsn, autocommit=autocommit, application_name=APPLICATION_NAME)
    # COPY's text output of timestamps is parsed by pyarrow: keep it ISO and in UTC.
    with conn.cursor() as cur:
        cur.execute("SET TimeZone = 'UTC'")
        cur.execute("SET DateStyle = 'ISO, YMD'")
    if not autocommit:
        conn.commit()
    return conn


def qualified(name: str) -> sql.Composable:
    """'schema.table' or 'table' (search_path) as a quoted identifier."""
    parts = name.split(".")
    if not 1 <= len(parts) <= 2 or not all(parts):
        raise PgmqSparkError(f"not a table name: {name!r} (use 'schema.table')")
    return sql.Identifier(*parts)


@dataclass(frozen=True)
class QueueInfo:
    queue: str
    qtable: str  # unquoted name in schema pgmq
    atable: str
    is_partitioned: bool

    @property
    def q(self) -> sql.Composable:
        return sql.Identifier("pgmq", self.qtable)

    @property
    def a(self) -> sql.Composable:
        return sql.Identifier("pgmq", self.atable)

    @property
    def qname(self) -> str:
        """The queue table as a regclass text literal."""
        return 'pgmq."' + self.qtable.replace('"', '""') + '"'


def resolve_queue(conn: psycopg.Connection, queue: str, *, create: bool = False) -> QueueInfo:
    """Table names of a queue; raises PgmqSparkError when it does not exist (unless create)."""
    if not queue:
        raise PgmqSparkError("option 'queue' is required")
    with conn.cursor() as cur:
        if create:
            cur.execute("SELECT pgmq.create(queue_name => %s::text)", (queue,))
        cur.execute(
            "SELECT pgmq.format_table_name(%s::text, 'q'), pgmq.format_table_name(%s::text, 'a'), "
            "(SELECT m.is_partitioned FROM pgmq.meta m WHERE m.queue_name = %s::text)",
            (queue, queue, queue))
        qtable, atable, partitioned = cur.fetchone()
    if not conn.autocommit:
        conn.commit()
    if partitioned is None:
        raise PgmqSparkError(f"queue {queue!r} does not exist (SELECT pgmq.create({queue!r}); "
                             "or option createQueue=true when writing)")
    return QueueInfo(queue, qtable, atable, bool(partitioned))


# ----------------------------------------------------------------------------- COPY out -> Arrow

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


def claim(dsn: str, info: QueueInfo, vt: int, qty: int,
          conditional: str | None) -> list[pa.RecordBatch]:
    """``pgmq.read(queue, vt, qty)`` in one transaction; the rows are returned only after it has
    committed (a claim that fails to commit hands nothing to Spark)."""
    query = sql.SQL("SELECT " + _RECORD_SELECT + " FROM pgmq.read(queue_name => %s::text, "
                    "vt => %s::integer, qty => %s::integer, conditional => %s::jsonb)")
    with connect(dsn) as conn, conn.cursor() as cur:
        batches = list(copy_out_batches(cur, query, (info.queue, vt, qty, conditional or "{}"),
                                        QUEUE_COLUMNS))
        conn.commit()
    return batches


# ----------------------------------------------------------------------------- acks (claims)

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


# ----------------------------------------------------------------------------- publish encoding

def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value) if value == value.to_integral_value() or abs(value) < 1e15 else str(value)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _has_map(t.value_type)
    return False


def _maps_to_dicts(value: Any, t: pa.DataType) -> Any:
    if value is None:
        return None
    if pa.types.is_map(t):
        return {str(k): _maps_to_dicts(v, t.item_type) for k, v in value}
    if pa.types.is_struct(t):
        return {t.field(i).name: _maps_to_dicts(value[t.field(i).name], t.field(i).type)
                for i in range(t.num_fields)}
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [_maps_to_dicts(v, t.value_type) for v in value]
    return value


def json_text(arr: pa.Array, what: str) -> pa.Array:
    """A column as JSON text: strings pass through (the server validates them), binary is
    decoded as UTF-8, structs / maps / arrays are serialized (prefer to_json in Spark for large
    data: it runs in the JVM)."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return arr.cast(pa.string())
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return arr.cast(pa.string())
    if pa.types.is_struct(t) or pa.types.is_map(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        values = arr.to_pylist()
        if _has_map(t):
            values = [_maps_to_dicts(v, t) for v in values]
        return pa.array([None if v is None else json.dumps(v, default=_json_default, separators=(",", ":"))
                         for v in values], pa.string())
    raise PgmqSparkError(f"the {what} column must be a string (JSON text), binary, struct, map or "
                         f"array column, not {t}")


@dataclass
class Columns:
    """Which input columns carry what (names as in the DataFrame)."""

    message: str = "message"
    headers: str | None = None
    delay: str | None = None
    priority: str | None = None
    routing_key: str | None = None


@dataclass
class Encoded:
    """One Arrow batch turned into what the insert paths need."""

    message: pa.Array  # string, JSON text, no nulls
    headers: pa.Array  # string, JSON text or null
    vt: pa.Array  # timestamp[us, UTC]
    priority: pa.Array  # int32 (meaningful where not special)
    special: list[int]  # row indexes that must go through pgmq.send
    delay_s: pa.Array | None = None  # int32 seconds (topic/exchange routing)
    routing_key: pa.Array | None = None  # string

    @property
    def num_rows(self) -> int:
        return len(self.message)


def _column(batch: pa.RecordBatch, name: str, what: str) -> pa.Array:
    idx = batch.schema.get_field_index(name)
    if idx < 0:
        raise PgmqSparkError(f"no column {name!r} for the {what} (columns: {batch.schema.names}); "
                             f"set option {what}Column")
    return batch.column(idx)


def _header_info(text: str | None) -> tuple[bool, int]:
    """(special, priority) of one headers JSON text, mirroring the extension's insert paths."""
    if text is None:
        return False, 0
    try:
        h = json.loads(text)
    except ValueError:
        return True, 0  # let the server report the bad JSON
    if not isinstance(h, dict):
        return False, 0
    if any(k in h for k in SPECIAL_HEADERS):
        return True, 0
    p = h.get(PRIORITY_HEADER)
    if p is None:
        return False, 0
    if isinstance(p, int) and not isinstance(p, bool) and INT32_MIN <= p <= INT32_MAX:
        return False, p
    return True, 0  # a string, float or out-of-range value: the server decides


def encode(batch: pa.RecordBatch, cols: Columns, base: datetime, *, routed: bool) -> Encoded:
    """Turn one input batch into message/headers text, visibility times and priorities.

    ``base`` is the server's clock (UTC) for "now": a row's vt is base + its delay (seconds), or
    its delay column's timestamp. For ``routed`` (topic/exchange) publishing the delay is kept as
    whole seconds instead, since those functions take an integer delay.
    """
    n = batch.num_rows
    message = json_text(_column(batch, cols.message, "message"), "message")
    if message.null_count:
        raise PgmqSparkError(f"the message column {cols.message!r} has {message.null_count} null "
                             "value(s); a message must be JSON (use a JSON 'null' if you mean it)")
    if cols.headers:
        headers = json_text(_column(batch, cols.headers, "headers"), "headers")
    else:
        headers = pa.nulls(n, pa.string())

    if cols.priority:
        prio = _column(batch, cols.priority, "priority")
        if not pa.types.is_integer(prio.type):
            raise PgmqSparkError(f"the priority column must be an integer column, not {prio.type}")
        prios = prio.to_pylist()
        htexts = headers.to_pylist()
        merged: list[str | None] = []
        for h, p in zip(htexts, prios, strict=True):
            if p is None or p == 0:
                merged.append(h)
                continue
            d = {} if h is None else json.loads(h)
            if d is None:
                d = {}
            if not isinstance(d, dict):
                raise PgmqSparkError("headers must be JSON objects to carry a priority")
            d[PRIORITY_HEADER] = int(p)
            merged.append(json.dumps(d, separators=(",", ":")))
        headers = pa.array(merged, pa.string())

    # Only rows whose headers mention x-pgmq- (or contain escapes) can be special.
    special: list[int] = []
    priority = [0] * n
    if headers.null_count < n:
        suspect = pc.or_(pc.match_substring(headers, "x-pgmq-"), pc.match_substring(headers, "\\u"))
        idx = pc.indices_nonzero(pc.fill_null(suspect, False)).to_pylist()
        htexts = headers.take(pa.array(idx, pa.int64())).to_pylist() if idx else []
        for i, text in zip(idx, htexts, strict=True):
            is_special, p = _header_info(text)
            if is_special:
                special.append(i)
            else:
                priority[i] = p

    delay_s = None
    if cols.delay:
        d = _column(batch, cols.delay, "delay")
        if pa.types.is_integer(d.type):
            if n and pc.min(d).as_py() is not None and pc.min(d).as_py() < 0:
                raise PgmqSparkError("delay cannot be negative")
            secs = pc.fill_null(d, 0).cast(pa.int64())
            vt = pc.add(pa.repeat(pa.scalar(base, _TS), n),
                        pc.multiply(secs, 1_000_000).cast(pa.duration("us")))
            delay_s = secs.cast(pa.int32())
        elif pa.types.is_timestamp(d.type):
            ts = d.cast(pa.timestamp("us", tz="UTC"))
            vt = pc.fill_null(ts, pa.scalar(base, _TS))
            if routed:
                diffs = [0 if t is None else max(0, math.ceil((t - base).total_seconds()))
                         for t in ts.to_pylist()]
                delay_s = pa.array(diffs, pa.int32())
        else:
            raise PgmqSparkError(f"the delay column must hold seconds (integer) or a timestamp, "
                                 f"not {d.type}")
    else:
        vt = pa.repeat(pa.scalar(base, _TS), n)
        if routed:
            delay_s = pa.array([0] * n, pa.int32())

    routing_key = None
    if routed:
        assert cols.routing_key
        routing_key = _column(batch, cols.routing_key, "routingKey").cast(pa.string())
        if routing_key.null_count:
            raise PgmqSparkError("the routing key column has null values")
    return Encoded(message, headers, vt.cast(_TS), pa.array(priority, pa.int32()), special,
                   delay_s, routing_key)


def _csv(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pcsv.write_csv(table, buf, pcsv.WriteOptions(include_header=False))
    return buf.getvalue()


def server_now(cur: psycopg.Cursor) -> datetime:
    cur.execute("SELECT clock_timestamp()")
    return cur.fetchone()[0].astimezone(timezone.utc)


class Clock:
    """The server's clock, read once and advanced with the local monotonic clock (so that
    executors with a skewed clock still compute delays against the database's time)."""

    def __init__(self, cur: psycopg.Cursor) -> None:
        self._server = server_now(cur)
        self._t0 = time.monotonic()

    def now(self) -> datetime:
        return self._server + timedelta(seconds=time.monotonic() - self._t0)


def _take(arr: pa.Array, idx: list[int]) -> pa.Array:
    return arr.take(pa.array(idx, pa.int64()))


# The send path: one statement for many rows, each through pgmq.send (dedup, limits, priority).
_SEND_ROWS = ("SELECT count(*) FROM unnest(%s::text[], %s::text[], %s::timestamptz[]) "
              "WITH ORDINALITY AS t(m, h, v, o), "
              "LATERAL pgmq.send(%s::text, t.m::jsonb, t.h::jsonb, t.v) AS s")
_SEND_BATCH = ("SELECT count(*) FROM pgmq.send_batch(%s::text, %s::text[]::jsonb[], "
               "%s::text[]::jsonb[], %s::timestamptz)")
_SEND_TOPIC = ("SELECT count(*), count(*) FILTER (WHERE s = 0) FROM unnest(%s::text[], %s::text[], "
               "%s::text[], %s::integer[]) WITH ORDINALITY AS t(k, m, h, d, o), "
               "LATERAL pgmq.send_topic(t.k, t.m::jsonb, t.h::jsonb, t.d) AS s")
_PUBLISH = ("SELECT count(DISTINCT t.o), count(DISTINCT t.o) FILTER (WHERE p.msg_id IS NULL) FROM unnest(%s::text[], %s::text[], "
            "%s::text[], %s::integer[]) WITH ORDINALITY AS t(k, m, h, d, o) "
            "LEFT JOIN LATERAL pgmq.publish(%s::text, t.k, t.m::jsonb, t.h::jsonb, t.d) AS p ON true")


def send_rows(cur: psycopg.Cursor, queue: str, enc: Encoded, idx: list[int] | None = None) -> int:
    """Rows through pgmq.send (one call per row, one statement)."""
    m, h, v = enc.message, enc.headers, enc.vt
    if idx is not None:
        m, h, v = _take(m, idx), _take(h, idx), _take(v, idx)
    if not len(m):
        return 0
    cur.execute(_SEND_ROWS, (m.to_pylist(), h.to_pylist(), v.to_pylist(), queue))
    return int(cur.fetchone()[0])


def send_batch_rows(cur: psycopg.Cursor, queue: str, enc: Encoded) -> int:
    """All rows through pgmq.send_batch, one call per distinct vt (usually one)."""
    n = 0
    vts = enc.vt.to_pylist()
    groups: dict[datetime, list[int]] = {}
    for i, t in enumerate(vts):
        groups.setdefault(t, []).append(i)
    for t, idx in groups.items():
        m, h = _take(enc.message, idx), _take(enc.headers, idx)
        hdrs = None if h.null_count == len(h) else h.to_pylist()
        cur.execute(_SEND_BATCH, (queue, m.to_pylist(), hdrs, t))
        n += int(cur.fetchone()[0])
    return n


def copy_rows(cur: psycopg.Cursor, info: QueueInfo, enc: Encoded) -> int:
    """The plain rows by COPY into the queue table (priority set as the extension's inserts set
    it); the special ones through pgmq.send. One transaction is the caller's."""
    n = enc.num_rows
    if enc.special:
        keep = sorted(set(range(n)) - set(enc.special))
        plain = pa.table({"vt": _take(enc.vt, keep), "message": _take(enc.message, keep),
                          "headers": _take(enc.headers, keep),
                          "priority": _take(enc.priority, keep)})
    else:
        plain = pa.table({"vt": enc.vt, "message": enc.message, "headers": enc.headers,
                          "priority": enc.priority})
    done = 0
    if plain.num_rows:
        stmt = sql.SQL("COPY {} (vt, message, headers, priority) FROM STDIN (FORMAT csv)").format(info.q)
        with cur.copy(stmt) as copy:
            copy.write(_csv(plain))
        done += plain.num_rows
    if enc.special:
        done += send_rows(cur, info.queue, enc, enc.special)
    return done


def route_rows(cur: psycopg.Cursor, enc: Encoded, exchange: str | None,
               allow_unroutable: bool) -> int:
    """Rows through pgmq.publish(exchange, ...) or, without an exchange, pgmq.send_topic."""
    assert enc.routing_key is not None and enc.delay_s is not None
    args = [enc.routing_key.to_pylist(), enc.message.to_pylist(), enc.headers.to_pylist(),
            enc.delay_s.to_pylist()]
    if exchange is None:
        cur.execute(_SEND_TOPIC, args)
    else:
        cur.execute(_PUBLISH, [*args, exchange])
    rows, unroutable = cur.fetchone()
    if unroutable and not allow_unroutable:
        raise PgmqSparkError(f"{unroutable} message(s) matched no queue binding (set option "
                             "allowUnroutable=true to drop them)")
    return int(rows)


# ----------------------------------------------------------------------------- staging (exactly-once)

_STAGING_DDL = """
CREATE TABLE IF NOT EXISTS {t} (
    job_id      text NOT NULL,
    part_id     text NOT NULL,
    ord         bigint NOT NULL,
    vt          timestamptz NOT NULL,
    message     jsonb,
    headers     jsonb,
    routing_key text,
    delay_s     integer,
    staged_at   timestamptz NOT NULL DEFAULT now()
)"""
_PROGRESS_DDL = """
CREATE TABLE IF NOT EXISTS {t} (
    sink_id      text NOT NULL,
    batch_id     bigint NOT NULL,
    target       text,
    rows         bigint NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (sink_id, batch_id)
)"""


# The owner of a table can attach code (triggers, rules, defaults) that runs with the rights of
# whoever writes to it, and a schema's owner can swap the tables in it. The connector writes into
# its staging and progress tables only when their owners (and their schema's) have every right
# of the role it runs as, so no less privileged role's code can run with that role's rights.
_OWNERS = """
SELECT kind, owner, pg_catalog.pg_has_role(owner_oid, current_user, 'USAGE')
FROM (SELECT 'schema' AS kind, n.nspowner AS owner_oid
      FROM pg_catalog.pg_namespace n
      WHERE n.nspname = coalesce(%(schema)s, pg_catalog.current_schema())
      UNION ALL
      SELECT 'table', c.relowner FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass(%(table)s)) o,
     LATERAL (SELECT pg_catalog.pg_get_userbyid(o.owner_oid) AS owner) u
"""


def check_owners(conn: psycopg.Connection, name: str) -> None:
    """Refuse a staging or progress table (or its schema) owned by a less privileged role."""
    schema = name.split(".")[0] if "." in name else None
    for kind, owner, trusted in conn.execute(
            _OWNERS, {"schema": schema, "table": qualified(name).as_string(conn)}).fetchall():
        if not trusted:
            raise PgmqSparkError(
                f"the {kind} of {name!r} belongs to role {owner!r}, which lacks rights of the role the "
                "connector runs as: its code could run with those rights. Use a table and schema "
                "owned by this role (options stagingTable / progressTable).")


def ensure_tables(conn: psycopg.Connection, staging: str, progress: str | None) -> None:
    """Create the connector's schema and tables when missing (driver side, serialized)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext('pgmq_spark.ddl'))")
        for name, ddl in ((staging, _STAGING_DDL), (progress, _PROGRESS_DDL)):
            if name is None:
                continue
            check_owners(conn, name)
            exists = conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                  (str(qualified(name).as_string(conn)),)).fetchone()[0]
            if exists:
                continue
            if "." in name:
                conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                    sql.Identifier(name.split(".")[0])))
            conn.execute(sql.SQL(ddl).format(t=qualified(name)))
            if ddl is _STAGING_DDL:
                idx = sql.Identifier(name.split(".")[-1] + "_job_idx")
                conn.execute(sql.SQL("CREATE INDEX IF NOT EXISTS {} ON {} (job_id, part_id, ord)")
                             .format(idx, qualified(name)))


def stage_rows(cur: psycopg.Cursor, staging: str, job_id: str, part_id: str, first_ord: int,
               enc: Encoded) -> int:
    n = enc.num_rows
    if not n:
        return 0
    table = pa.table({
        "job_id": pa.array([job_id] * n, pa.string()),
        "part_id": pa.array([part_id] * n, pa.string()),
        "ord": pa.array(range(first_ord, first_ord + n), pa.int64()),
        "vt": enc.vt, "message": enc.message, "headers": enc.headers,
        "routing_key": enc.routing_key if enc.routing_key is not None else pa.nulls(n, pa.string()),
        "delay_s": enc.delay_s if enc.delay_s is not None else pa.nulls(n, pa.int32()),
    })
    stmt = sql.SQL("COPY {} (job_id, part_id, ord, vt, message, headers, routing_key, delay_s) "
                   "FROM STDIN (FORMAT csv)").format(qualified(staging))
    with cur.copy(stmt) as copy:
        copy.write(_csv(table))
    return n


@dataclass
class Target:
    """Where published rows go: a queue (COPY/INSERT), topic routing, or an exchange."""

    queue: QueueInfo | None = None
    exchange: str | None = None
    routed: bool = False
    allow_unroutable: bool = False

    @property
    def label(self) -> str:
        if self.exchange:
            return f"exchange:{self.exchange}"
        if self.routed:
            return "topic"
        assert self.queue is not None
        return f"queue:{self.queue.queue}"


def move_staged(cur: psycopg.Cursor, staging: str, job_id: str, part_ids: Sequence[str],
                target: Target) -> int:
    """Insert the staged rows of these parts into the target, in staging order. Caller's
    transaction."""
    st = qualified(staging)
    sel = sql.SQL("FROM {} s WHERE s.job_id = %s AND s.part_id = ANY(%s::text[])").format(st)
    params: list[Any] = [job_id, list(part_ids)]
    if target.routed:
        if target.exchange is None:
            cur.execute(sql.SQL(
                "SELECT count(*), count(*) FILTER (WHERE r = 0) FROM (SELECT pgmq.send_topic("
                "s.routing_key, s.message, s.headers, s.delay_s) AS r {} "
                "ORDER BY s.part_id, s.ord) x").format(sel), params)
            rows, unroutable = cur.fetchone()
            if unroutable and not target.allow_unroutable:
                raise PgmqSparkError(f"{unroutable} message(s) matched no queue binding (set "
                                     "option allowUnroutable=true to drop them)")
            return int(rows)
        cur.execute(sql.SQL(
            "SELECT count(*) FROM (SELECT (SELECT count(*) FROM pgmq.publish(%s::text, "
            "s.routing_key, s.message, s.headers, s.delay_s)) AS c {} ORDER BY s.part_id, s.ord) x"
        ).format(sel), [target.exchange, *params])
        return int(cur.fetchone()[0])
    assert target.queue is not None
    special = sql.SQL("coalesce(s.headers ?| ARRAY['x-pgmq-dedup-id', 'x-pgmq-ttl', "
                      "'x-pgmq-max-retries'], false)")
    cur.execute(sql.SQL(
        "INSERT INTO {q} (vt, message, headers, priority) "
        "SELECT s.vt, s.message, s.headers, coalesce((s.headers->>'x-pgmq-priority')::integer, 0) "
        "{sel} AND NOT {special} ORDER BY s.part_id, s.ord").format(
            q=target.queue.q, sel=sel, special=special), params)
    n = cur.rowcount
    cur.execute(sql.SQL(
        "SELECT count(*) FROM (SELECT s.message, s.headers, s.vt {sel} AND {special} "
        "ORDER BY s.part_id, s.ord) s, LATERAL pgmq.send(%s::text, s.message, s.headers, s.vt) AS r"
    ).format(sel=sel, special=special), [*params, target.queue.queue])
    return n + int(cur.fetchone()[0])


def drop_staged(cur: psycopg.Cursor, staging: str, job_id: str) -> None:
    cur.execute(sql.SQL("DELETE FROM {} WHERE job_id = %s").format(qualified(staging)), (job_id,))


def commit_staged(dsn: str, staging: str, job_id: str, parts: Sequence[tuple[str, int]],
                  target: Target, progress: str | None = None, sink_id: str | None = None,
                  batch_id: int | None = None) -> tuple[bool, int]:
    """Move the staged parts into the target and forget the job's staging rows, in one
    transaction. With ``progress``/``sink_id``/``batch_id``: skip (and only clean up) when the
    sink already committed this batch id or a later one, else record it in the same transaction.
    Returns (published, rows)."""
    expected = sum(rows for _, rows in parts)
    with connect(dsn) as conn, conn.cursor() as cur:
        if progress is not None:
            assert sink_id is not None and batch_id is not None
            cur.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"pgmq_spark.sink:{sink_id}",))
            cur.execute(sql.SQL("SELECT max(batch_id) FROM {} WHERE sink_id = %s").format(
                qualified(progress)), (sink_id,))
            last = cur.fetchone()[0]
            if last is not None and last >= batch_id:
                drop_staged(cur, staging, job_id)
                conn.commit()
                return False, 0
        cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE job_id = %s AND part_id = ANY(%s::text[])")
                    .format(qualified(staging)), (job_id, [p for p, _ in parts]))
        staged = int(cur.fetchone()[0])
        if staged != expected:
            raise PgmqSparkError(f"staging table {staging} holds {staged} rows of job {job_id}, "
                                 f"expected {expected}: refusing to publish a partial job")
        moved = move_staged(cur, staging, job_id, [p for p, _ in parts], target) if expected else 0
        drop_staged(cur, staging, job_id)
        # rows of jobs that died without commit or abort (see also cleanup_staging)
        cur.execute(sql.SQL("DELETE FROM {} WHERE staged_at < now() - %s").format(
            qualified(staging)), (STAGING_RETENTION,))
        if progress is not None:
            cur.execute(sql.SQL("INSERT INTO {} (sink_id, batch_id, target, rows) "
                                "VALUES (%s, %s, %s, %s)").format(qualified(progress)),
                        (sink_id, batch_id, target.label, moved))
            cur.execute(sql.SQL("DELETE FROM {} WHERE sink_id = %s AND batch_id < %s").format(
                qualified(progress)), (sink_id, batch_id - PROGRESS_KEEP))
        conn.commit()
    return True, moved


def abort_staged(dsn: str, staging: str, job_id: str) -> None:
    with connect(dsn, autocommit=True) as conn, conn.cursor() as cur:
        drop_staged(cur, staging, job_id)


def cleanup_staging(dsn: str, older_than: timedelta = timedelta(days=1),
                    staging: str = DEFAULT_STAGING_TABLE) -> int:
    """Delete staging rows left by jobs that died before commit or abort; returns the count."""
    with connect(dsn, autocommit=True) as conn:
        if not conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                            (qualified(staging).as_string(conn),)).fetchone()[0]:
            return 0
        cur = conn.execute(sql.SQL("DELETE FROM {} WHERE staged_at < now() - %s").format(
            qualified(staging)), (older_than,))
        return cur.rowcount


def new_id() -> str:
    return uuid.uuid4().hex


# ----------------------------------------------------------------------------- stream offsets

@dataclass
class Offset:
    """A stream position: every message with msg_id <= ``msg_id`` has been planned into a batch,
    except ``pending``: ids <= msg_id that were not yet visible (delayed, leased, reserved) when
    planned, delivered in a later batch once they are."""

    msg_id: int = 0
    pending: list[int] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"msg_id": self.msg_id, "pending": sorted(self.pending)}

    @classmethod
    def from_json(cls, d: dict | None) -> Offset:
        if not d:
            return cls()
        return cls(int(d.get("msg_id", 0)), sorted(int(x) for x in d.get("pending", [])))


def last_msg_id(conn: psycopg.Connection, info: QueueInfo) -> int:
    """The queue sequence's last value (0 before the first message)."""
    row = conn.execute(
        "SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence(%s, 'msg_id')::regclass), 0), "
        "(SELECT s.seqcache FROM pg_sequence s "
        " WHERE s.seqrelid = pg_get_serial_sequence(%s, 'msg_id')::regclass)",
        (info.qname, info.qname)).fetchone()
    if row[1] is not None and row[1] > 1:
        raise PgmqSparkError(f"the msg_id sequence of {info.qtable} has CACHE {row[1]}; the stream's "
                             "safe offsets need CACHE 1 (ALTER SEQUENCE ... CACHE 1), or set "
                             "option safeOffsets=false")
    return int(row[0])


_WRITERS = ("SELECT DISTINCT l.virtualtransaction FROM pg_locks l "
            "WHERE l.locktype = 'relation' AND l.relation = %s::regclass AND l.granted "
            "AND l.mode = 'RowExclusiveLock' AND l.pid IS DISTINCT FROM pg_backend_pid() "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())")
_STILL = ("SELECT DISTINCT l.virtualtransaction FROM pg_locks l "
          "WHERE l.locktype = 'relation' AND l.relation = %s::regclass "
          "AND l.virtualtransaction = ANY(%s::text[])")


def safe_high_water_mark(conn: psycopg.Connection, info: QueueInfo, wait_seconds: float,
                         poll: float = 0.02) -> tuple[int, bool]:
    """(L, settled): L is the sequence's last value read *before* looking at the writers; it is
    safe (every transaction that may hold an id <= L has ended, so all such rows that will ever
    exist are visible) once settled is True. A transaction must hold RowExclusiveLock on the
    queue table before it can draw an id, so the writers holding it right after L was read are
    the only ones that may still commit an id <= L; we wait (up to ``wait_seconds``) until each
    of them has ended. Needs an autocommit connection (fresh snapshots)."""
    high = last_msg_id(conn, info)
    writers = [r[0] for r in conn.execute(_WRITERS, (info.qname,)).fetchall()]
    deadline = time.monotonic() + wait_seconds
    while writers:
        writers = [r[0] for r in conn.execute(_STILL, (info.qname, writers)).fetchall()]
        if not writers:
            break
        if time.monotonic() >= deadline:
            return high, False
        time.sleep(poll)
    return high, True


def plan_batch(conn: psycopg.Connection, info: QueueInfo, start: Offset, high: int,
               max_rows: int | None, honor_vt: bool, max_pending: int) -> Offset:
    """The end offset of the next batch after ``start`` with ids up to ``high``: at most
    ``max_rows`` visible messages (pending ones first); messages not yet visible (vt in the
    future) are remembered as pending instead (at most ``max_pending``; beyond that the batch
    stops before the next invisible message). Returns ``start`` when there is nothing new."""
    with conn.transaction():
        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        now = conn.execute("SELECT clock_timestamp()").fetchone()[0]
        budget = max_rows if max_rows is not None else None
        pending: list[int] = []
        if start.pending:
            rows = conn.execute(sql.SQL(
                "SELECT msg_id, vt <= %s FROM {} WHERE msg_id = ANY(%s::bigint[]) ORDER BY msg_id")
                .format(info.q), (now, start.pending)).fetchall()
            for mid, due in rows:  # ids that are gone (finished by someone, expired) drop out
                if (due or not honor_vt) and (budget is None or budget > 0):
                    if budget is not None:
                        budget -= 1
                else:
                    pending.append(int(mid))
        end = start.msg_id
        if high > start.msg_id and (budget is None or budget > 0):
            end = high
            if budget is not None:
                row = conn.execute(sql.SQL(
                    "SELECT msg_id FROM {} WHERE msg_id > %s AND msg_id <= %s {} "
                    "ORDER BY msg_id OFFSET %s LIMIT 1").format(
                        info.q, sql.SQL("AND vt <= %s") if honor_vt else sql.SQL("")),
                    [start.msg_id, high, *([now] if honor_vt else []), budget - 1]).fetchone()
                if row is not None:
                    end = int(row[0])
            if honor_vt:
                room = max_pending - len(pending)
                later = [int(r[0]) for r in conn.execute(sql.SQL(
                    "SELECT msg_id FROM {} WHERE msg_id > %s AND msg_id <= %s AND vt > %s "
                    "ORDER BY msg_id LIMIT %s").format(info.q),
                    (start.msg_id, end, now, max(room, 0) + 1)).fetchall()]
                if len(later) > room:
                    # too many invisible messages: stop right before the first one over the limit
                    end = later[max(room, 0)] - 1
                    later = later[:max(room, 0)]
                pending.extend(later)
    out = Offset(max(end, start.msg_id), sorted(pending))
    return start if out == start else out


def stream_parts(start: Offset, end: Offset, partitions: int) -> list[tuple[int, int, list[int], list[int]]]:
    """(lo, hi, exclude, include) slices of the batch start -> end: ids in (start, end] minus
    end.pending, plus the start.pending ids that are no longer pending."""
    due = sorted(set(start.pending) - set(end.pending))
    later = set(end.pending)
    span = end.msg_id - start.msg_id
    parts: list[tuple[int, int, list[int], list[int]]] = []
    k = max(1, min(partitions, span)) if span > 0 else 0
    for i in range(k):
        lo = start.msg_id + span * i // k
        hi = start.msg_id + span * (i + 1) // k
        parts.append((lo, hi, sorted(x for x in later if lo < x <= hi), []))
    if due:
        if parts:
            lo, hi, ex, _ = parts[0]
            parts[0] = (lo, hi, ex, due)
        else:
            parts.append((0, 0, [], due))
    return parts


def ack_range(conn: psycopg.Connection, info: QueueInfo, done: Offset, upto: Offset,
              mode: str) -> int:
    """Delete or archive what the stream delivered between ``done`` (already acked) and
    ``upto``: ids in (done, upto] or in done.pending, minus upto.pending."""
    if mode == "none" or (upto.msg_id <= done.msg_id and not set(done.pending) - set(upto.pending)):
        return 0
    fn = "delete" if mode == "delete" else "archive"
    ids = sql.SQL("SELECT msg_id FROM {} WHERE ((msg_id > %s AND msg_id <= %s) "
                  "OR msg_id = ANY(%s::bigint[])) AND msg_id <> ALL(%s::bigint[])").format(info.q)
    stmt = sql.SQL("SELECT count(*) FROM pgmq.{}(queue_name => %s::text, msg_ids => ARRAY({})::bigint[])"
                   ).format(sql.Identifier(fn), ids)
    with conn.transaction():
        n = conn.execute(stmt, (info.queue, done.msg_id, upto.msg_id, done.pending,
                                upto.pending)).fetchone()[0]
    return int(n)


def split_range(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """(lo-1, hi] cut into up to ``parts`` half-open id ranges (a, b]."""
    span = hi - lo + 1
    k = max(1, min(parts, span))
    start = lo - 1
    return [(start + span * i // k, start + span * (i + 1) // k) for i in range(k)]

