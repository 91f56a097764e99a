"""Publishing Arrow batches into pgmq (psycopg + pyarrow, no pyspark import): the encoding of a
batch (message / headers as JSON text, visibility times from the server's clock, priorities)
and the insert paths: COPY into the queue table, ``pgmq.send`` / ``pgmq.send_batch``, topic
routing (``pgmq.send_topic``) and exchanges (``pgmq.publish``).

Rows that the extension treats specially on insert (a header of ``headers.INSERT_RULES``:
dedup id, TTL, max retries, retry delay; or an ``x-pgmq-priority`` that is not a plain integer)
never take the COPY path: they go through ``pgmq.send`` so that the server applies its own rules
(tests/unit/test_headers.py checks that this list is what send reads). The exactly-once paths
stage the encoded rows first (staging.py).
"""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import sql

from .. import headers as pgmq_headers
from . import copybinary
from .connections import QueueInfo
from .errors import PgmqSparkError

if TYPE_CHECKING:
    from .stream_events import StreamRef

# Headers whose insert-time meaning lives in the extension's send paths (dedup, limit marks).
SPECIAL_HEADERS = pgmq_headers.INSERT_RULES
PRIORITY_HEADER = pgmq_headers.PRIORITY
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

_TS = pa.timestamp("us", tz="UTC")


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


_EMPTY_OBJECT = r"^\s*\{\s*\}\s*$"
_NONEMPTY_OBJECT = r"^\s*\{\s*\S[\s\S]*\}\s*$"


def _merge_priority(batch: pa.RecordBatch, column: str, headers: pa.Array, suspect: pa.Array,
                    priority: np.ndarray) -> tuple[pa.Array, pa.Array]:
    """Put a priority column's non-zero values into the headers as x-pgmq-priority, and into
    ``priority`` (changed in place). Returns the headers and the rows still to check in Python.

    Vectorized for the usual rows: no headers (or ``{}``) get ``{"x-pgmq-priority":p}``; a
    headers object that mentions no x-pgmq- key (and no escape) gets the key appended before its
    closing brace. The other rows (headers that are not an object, or already carry x-pgmq-
    keys, or an int64 priority outside int32) are merged in Python, as parsed JSON."""
    prio = _column(batch, column, "priority")
    if not pa.types.is_integer(prio.type):
        raise PgmqSparkError(f"the priority column must be an integer column, not {prio.type}")
    nonzero = pc.fill_null(pc.not_equal(prio, 0), False)
    if not pc.any(nonzero).as_py():
        return headers, suspect
    in_range = pc.fill_null(pc.and_(pc.greater_equal(prio, INT32_MIN),
                                    pc.less_equal(prio, INT32_MAX)), False)
    usual = pc.and_(nonzero, in_range)
    empty = pc.fill_null(pc.or_(pc.is_null(headers), pc.match_substring_regex(headers, _EMPTY_OBJECT)),
                         True)
    plain_object = pc.and_(pc.fill_null(pc.match_substring_regex(headers, _NONEMPTY_OBJECT), False),
                           pc.invert(suspect))
    as_new = pc.and_(usual, empty)
    appended = pc.and_(pc.and_(usual, plain_object), pc.invert(empty))
    fast = pc.or_(as_new, appended)
    value = pc.fill_null(prio, 0).cast(pa.string())
    key = f'"{PRIORITY_HEADER}":'
    head = pc.utf8_slice_codeunits(pc.utf8_rtrim_whitespace(pc.fill_null(headers, "{}")), 0, -1)
    merged = pc.case_when(pc.make_struct(as_new, appended),
                          pc.binary_join_element_wise("{" + key, value, "}", ""),
                          pc.binary_join_element_wise(head, "," + key, value, "}", ""),
                          headers)
    fast_np = np.asarray(fast)
    priority[fast_np] = np.asarray(pc.fill_null(prio, 0))[fast_np]
    slow = pc.and_(nonzero, pc.invert(fast))
    idx = pc.indices_nonzero(slow).to_pylist()
    if idx:
        rows = pa.array(idx, pa.int64())
        texts = headers.take(rows).to_pylist()
        values = prio.take(rows).to_pylist()
        out: list[str] = []
        for h, p in zip(texts, values, strict=True):
            d = {} if h is None else json.loads(h)
            if d is None:
                d = {}
            if not isinstance(d, dict):
                raise PgmqSparkError("headers must be JSON objects to carry a priority")
            d[PRIORITY_HEADER] = int(p)
            out.append(json.dumps(d, separators=(",", ":")))
        merged = pc.replace_with_mask(merged, slow, pa.array(out, merged.type))
    return merged, pc.or_(pc.and_(suspect, pc.invert(fast)), slow)


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

    # Rows whose headers mention x-pgmq- (or contain escapes) may be special: parsed in Python.
    suspect = pc.fill_null(pc.or_(pc.match_substring(headers, "x-pgmq-"),
                                  pc.match_substring(headers, "\\u")), False)
    priority = np.zeros(n, np.int32)
    if cols.priority:
        headers, suspect = _merge_priority(batch, cols.priority, headers, suspect, priority)

    special: list[int] = []
    if headers.null_count < n:
        idx = pc.indices_nonzero(suspect).to_pylist()
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
            low, high = (pc.min(d).as_py(), pc.max(d).as_py()) if n else (None, None)
            if low is not None and low < 0:
                raise PgmqSparkError(f"delay cannot be negative (column {cols.delay!r} holds {low})")
            if high is not None and high > INT32_MAX:  # pgmq.send's delay is an SQL integer
                raise PgmqSparkError(f"delay cannot exceed {INT32_MAX} seconds (column "
                                     f"{cols.delay!r} holds {high})")
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
    return Encoded(message, headers, vt.cast(_TS), pa.array(priority), special,
                   delay_s, routing_key)


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
# publish_routed, not publish: a row routed to streams only is routed (publish lists queues only)
_PUBLISH = ("SELECT count(DISTINCT t.o), count(DISTINCT t.o) FILTER (WHERE p.msg_id IS NULL AND p.ev_id IS NULL) "
            "FROM unnest(%s::text[], %s::text[], %s::text[], %s::integer[]) WITH ORDINALITY AS t(k, m, h, d, o) "
            "LEFT JOIN LATERAL pgmq.publish_routed(%s::text, t.k, t.m::jsonb, t.h::jsonb, t.d) AS p ON true")


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


QUEUE_COPY_COLUMNS = "(vt, message, headers, priority)"


def queue_copy_data(enc: Encoded) -> pa.Buffer:
    """Binary COPY rows for a queue table's (vt, message, headers, priority)."""
    return copybinary.rows([(enc.vt, copybinary.TIMESTAMPTZ), (enc.message, copybinary.JSONB),
                            (enc.headers, copybinary.JSONB), (enc.priority, copybinary.INT4)])


def subset(enc: Encoded, idx: list[int] | np.ndarray) -> Encoded:
    """The rows ``idx`` of an encoded batch, with an empty ``special`` list."""
    ix = pa.array(idx, pa.int64())
    return Encoded(enc.message.take(ix), enc.headers.take(ix), enc.vt.take(ix),
                   enc.priority.take(ix), [],
                   None if enc.delay_s is None else enc.delay_s.take(ix),
                   None if enc.routing_key is None else enc.routing_key.take(ix))


# A queue serves priority order once a message with a priority arrives (the extension's
# _note_priorities builds its index). The driver does it before the tasks when the rows have a
# priority column (batch.target_of); a task that still meets a priority (one inside a headers
# column) does it after its COPY, in its transaction: then two tasks doing it at once can
# deadlock, and Spark retries the one PostgreSQL aborts.
def note_priorities(cur: psycopg.Cursor, queue: str) -> None:
    cur.execute("SELECT pgmq._note_priorities(%s::text)", (queue,))


def copy_task(cur: psycopg.Cursor, info: QueueInfo, batches: Iterable[Encoded]) -> int:
    """Every batch of a task into the queue table through one ``COPY ... (FORMAT binary)``
    (priority set as the extension's inserts set it); the special rows are kept and go through
    pgmq.send once the COPY is done, so they get msg_ids after the task's plain rows. One
    transaction is the caller's."""
    later: list[Encoded] = []
    done = 0
    ranked = False
    stmt = sql.SQL("COPY {} " + QUEUE_COPY_COLUMNS + " FROM STDIN (FORMAT binary)").format(info.q)
    with cur.copy(stmt) as copy:
        copy.write(copybinary.SIGNATURE)
        for enc in batches:
            plain = enc
            if enc.special:
                plain = subset(enc, np.setdiff1d(np.arange(enc.num_rows), enc.special))
                later.append(subset(enc, enc.special))
            if plain.num_rows:
                copy.write(queue_copy_data(plain))
                done += plain.num_rows
                ranked = ranked or bool(np.any(np.asarray(plain.priority) != 0))
        copy.write(copybinary.TRAILER)
    if ranked:
        note_priorities(cur, info.queue)
    for enc in later:
        done += send_rows(cur, info.queue, enc)
    return done


def copy_rows(cur: psycopg.Cursor, info: QueueInfo, enc: Encoded) -> int:
    """One encoded batch by copy_task."""
    return copy_task(cur, info, [enc])


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
        bound = "queue binding" if exchange is None else "queue or stream binding"
        raise PgmqSparkError(f"{unroutable} message(s) matched no {bound} (set option "
                             "allowUnroutable=true to drop them)")
    return int(rows)


@dataclass
class Target:
    """Where published rows go: a queue (COPY/INSERT), topic routing, an exchange, or a stream."""

    queue: QueueInfo | None = None
    exchange: str | None = None
    routed: bool = False
    allow_unroutable: bool = False
    stream: StreamRef | None = None  # events appended to a stream

    @property
    def label(self) -> str:
        if self.stream is not None:
            return f"stream:{self.stream.stream}"
        if self.exchange:
            return f"exchange:{self.exchange}"
        if self.routed:
            return "topic"
        assert self.queue is not None
        return f"queue:{self.queue.queue}"


def new_id() -> str:
    """A fresh job or part id."""
    return uuid.uuid4().hex
