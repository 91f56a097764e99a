"""A small synchronous Python client for the pgmq extension, built on psycopg 3 and a
psycopg_pool connection pool. (The worker daemon uses its own autocommit connections, one transaction per message.)

Usage::

    import threading

    from pgmq_build.client import Client

    with Client("postgresql://app@db/app") as q:
        q.create("jobs")
        q.send("jobs", {"task": 1}, headers={"x-pgmq-priority": -1})
        for msg in q.read("jobs", vt=30, qty=10):
            print(msg.msg_id, msg.message)
            q.archive("jobs", msg.msg_id)

        # A worker loop: archive on success, nack (retry or dead-letter) on failure.
        stop = threading.Event()
        handled = q.consume("jobs", lambda m: process(m.message), stop=stop)

Every call goes through a named-argument SQL call with explicit casts (``queue_name =>
%s::text``), so PostgreSQL picks exactly one overload. Errors raised by the server propagate
as ``psycopg.Error`` (look at ``.sqlstate``). Arguments are checked before any round trip, so a
call that raises ``TypeError`` (wrong kind of value) or ``ValueError`` (out of range) changed
nothing, and the message names the argument, the value and what is allowed: queue names are
non-empty ``str`` (the server judges the rest: README, Queue names); ``vt``, ``qty`` and delays
are ``int`` within SQL's integer range (or, where documented, a timezone-aware ``datetime``);
msg ids are ``int`` or a sequence of them; messages are JSON-serializable (no NaN, no NUL);
headers are ``dict`` or ``None``, with integer ``x-pgmq-priority``/``-ttl``/``-max-retries``/
``-retry-delay``. ``send_batch`` checks every message and header before sending any.

Calls run in autocommit mode: each one is its own transaction. For a read and a delete in one
transaction, use psycopg directly on a connection of your own.

Streams (README: Streams): ``create_stream``, ``stream_send(_batch)``, ``subscribe``,
``stream_read`` / ``stream_ack``, ``stream_rewind``, ``stream_info``, ``stream_tick``, and
``consume_stream(stream, subscription, handler)``, which runs ``handler(batch, conn)`` and the
batch's ack in one transaction on ``conn``, so that what the handler writes there is
exactly-once (pgmq_build.streams)::

    def bill(batch, conn):
        conn.execute("INSERT INTO invoices SELECT * FROM jsonb_populate_recordset("
                     "NULL::invoices, %s)", (Jsonb(batch.messages),))

    q.subscribe("orders", "billing", start="earliest")
    q.consume_stream("orders", "billing", bill, stop=stop)
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from time import monotonic
from typing import Any, Literal, overload

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolClosed

from . import streams, validate
from .streams import StreamBatch, StreamRecord, SubscriptionInfo

__all__ = ["Client", "Message", "QueueMetrics", "StreamBatch", "StreamRecord", "SubscriptionInfo"]

log = logging.getLogger(__name__)

Delay = int | datetime

# How often consume() looks at its stop event while waiting for a notification.
_STOP_CHECK_SECONDS = 0.1
# consume()'s wait after a transient error: doubling from the first to the last.
_RETRY_FIRST, _RETRY_MAX = 0.1, 5.0
# SQLSTATEs (or classes) that retrying can fix: connection exceptions, insufficient resources
# (too many connections, disk full), operator intervention (query_canceled by statement_timeout,
# admin_shutdown, crash_shutdown, cannot_connect_now), lock_not_available (lock_timeout),
# serialization failures and deadlocks. A broken connection has no SQLSTATE at all.
_TRANSIENT_CLASSES = ("08", "53", "57")
_TRANSIENT_STATES = ("55P03", "40001", "40P01")
# After a lost connection (a failover, a restart) every pooled connection is presumed dead: the
# pool is dropped, and consume() tries the server again every _RECONNECT_EVERY seconds (a refused
# or read-only connect costs a millisecond or two) for _RECONNECT_FAST_FOR seconds, so that it is
# back within ~0.1 s of a new primary accepting writes; after that the doubling backoff applies.
_RECONNECT_EVERY, _RECONNECT_FAST_FOR = 0.05, 60.0


def _transient(exc: psycopg.Error) -> bool:
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES


class _FailureLog:
    """A handler's failures on one queue, logged at most once per ``every`` seconds: the first
    with its traceback, then the count of those not logged since, with the latest error. A
    handler that keeps failing is visible without filling the log."""

    def __init__(self, queue: str, every: float = 10.0) -> None:
        self.queue, self.every = queue, every
        self.last: float | None = None
        self.unlogged = 0

    def failed(self, msg_id: int, exc: BaseException) -> None:
        now = time.monotonic()
        if self.last is not None and now - self.last < self.every:
            self.unlogged += 1
            return
        more = f" ({self.unlogged} more failures since the last report)" if self.unlogged else ""
        log.warning("pgmq handler failed on %s message %s%s", self.queue, msg_id, more,
                    exc_info=(type(exc), exc, exc.__traceback__))
        self.last, self.unlogged = now, 0


class _Retrier:
    """The consume loops' transient errors: logged and retried after a wait that doubles from
    _RETRY_FIRST to _RETRY_MAX while they repeat (cut short by ``stop``); anything else, and
    everything with ``retry=False``, is raised. While the server is unreachable (``wait(fast=
    True)``) the retries come every _RECONNECT_EVERY seconds instead, logged once."""

    def __init__(self, loop: str, retry: bool, stop: threading.Event | None) -> None:
        self.loop, self.retry, self.stop = loop, retry, stop
        self.backoff = _RETRY_FIRST
        self.reconnecting = False

    def check(self, exc: psycopg.Error, what: str, fast: bool = False) -> None:
        if not self.retry or not _transient(exc):
            raise exc
        if fast and self.reconnecting:
            return
        text = str(exc).strip()
        wait = (f"reconnecting every {_RECONNECT_EVERY:g} s" if fast
                else f"retrying in {self.backoff:.1f} s")
        log.warning("pgmq %s: %s failed, %s: %s", self.loop, what, wait,
                    text.splitlines()[0] if text else type(exc).__name__)

    def wait(self, fast: bool = False) -> None:
        delay = _RECONNECT_EVERY if fast else self.backoff
        if self.stop is None:
            time.sleep(delay)
        else:
            self.stop.wait(delay)
        if fast:
            self.reconnecting = True
        else:
            self.backoff = min(self.backoff * 2, _RETRY_MAX)

    def reset(self) -> None:
        self.backoff = _RETRY_FIRST
        self.reconnecting = False


@dataclass(frozen=True, slots=True)
class Message:
    """One row of ``pgmq.message_record``."""

    msg_id: int
    read_ct: int
    enqueued_at: datetime
    last_read_at: datetime | None
    vt: datetime
    message: Any
    headers: dict[str, Any] | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Message:
        return cls(msg_id=row["msg_id"], read_ct=row["read_ct"], enqueued_at=row["enqueued_at"],
                   last_read_at=row["last_read_at"], vt=row["vt"], message=row["message"],
                   headers=row["headers"])


@dataclass(frozen=True, slots=True)
class QueueMetrics:
    """One row of ``pgmq.metrics_result``."""

    queue_name: str
    queue_length: int
    newest_msg_age_sec: int | None
    oldest_msg_age_sec: int | None
    total_messages: int
    scrape_time: datetime
    queue_visible_length: int
    default_partition_length: int | None

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> QueueMetrics:
        return cls(queue_name=row["queue_name"], queue_length=row["queue_length"],
                   newest_msg_age_sec=row["newest_msg_age_sec"],
                   oldest_msg_age_sec=row["oldest_msg_age_sec"],
                   total_messages=row["total_messages"], scrape_time=row["scrape_time"],
                   queue_visible_length=row["queue_visible_length"],
                   default_partition_length=row["default_partition_length"])


# ----------------------------------------------------------------------------- validation

_check_int = validate.integer  # (name, value, minimum[, maximum]): SQL integer range by default
_queue = validate.queue_name


def _check_time(name: str, value: object) -> int | datetime:
    """An int (seconds, 0 to 2**31-1) or a timezone-aware datetime."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError(f"{name} must be a timezone-aware datetime, got naive {value!r}")
        return value
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int (seconds) or a timezone-aware datetime, got "
                        f"{type(value).__name__} {value!r:.60}")
    return _check_int(name, value, 0)


def _time_cast(value: int | datetime) -> sql.SQL:
    return sql.SQL("timestamptz" if isinstance(value, datetime) else "integer")


def _text_jsonb(text: str | None) -> Jsonb | None:
    """Already-checked JSON text, sent as jsonb as is."""
    return None if text is None else Jsonb(None, dumps=lambda _obj: text)


def _message(name: str, value: Any) -> Jsonb:
    return _text_jsonb(validate.json_text(name, value))  # type: ignore[return-value]


def _headers(name: str, value: object) -> Jsonb | None:
    return _text_jsonb(validate.headers_text(name, value))


def _check_batch_shape(messages: object, headers: object) -> None:
    """A non-empty sequence of messages, and None or one header entry per message."""
    if isinstance(messages, (str, bytes)) or not isinstance(messages, Sequence):
        raise TypeError(f"messages must be a sequence (list) of messages, got {type(messages).__name__}")
    if not messages:
        raise ValueError("messages must not be empty")
    if headers is not None:
        if isinstance(headers, (str, bytes)) or not isinstance(headers, Sequence):
            raise TypeError(f"headers must be a sequence with one dict or None per message, "
                            f"got {type(headers).__name__}")
        if len(headers) != len(messages):
            raise ValueError(f"headers has {len(headers)} entries for {len(messages)} messages")


def _batch(messages: Sequence[Any],
           headers: Sequence[Any] | None) -> tuple[list[Jsonb], list[Jsonb | None] | None]:
    """Every element checked before anything is sent: a bad one sends none."""
    msgs = [_message(f"messages[{i}]", m) for i, m in enumerate(messages)]
    hdrs = None if headers is None else [_headers(f"headers[{i}]", h) for i, h in enumerate(headers)]
    return msgs, hdrs


def _interval(name: str, value: object, minimum: timedelta) -> timedelta:
    """A timedelta or int seconds, at least ``minimum``."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = timedelta(seconds=validate.integer(name, value, 0, validate.INT64_MAX // 10**6))
    if not isinstance(value, timedelta):
        raise TypeError(f"{name} must be a datetime.timedelta or int seconds, got "
                        f"{type(value).__name__} {value!r:.60}")
    if value < minimum:
        raise ValueError(f"{name} must be at least {minimum}, got {value}")
    return value


def _bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r:.60}")
    return value


def _subscription(value: object) -> str:
    return validate.text("subscription", value, empty=False)


def _position(name: str, value: object) -> int:
    """A stream position: a tick id (stream_info().position, subscribe's result)."""
    return validate.integer(name, value, 0, validate.INT64_MAX)


def _error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


# ----------------------------------------------------------------------------- client

class Client:
    """A thread-safe pgmq client over a psycopg_pool.ConnectionPool of autocommit connections.

    Pass ``dsn`` to let the client own its pool (closed by :meth:`close`), or ``pool`` to share
    one you manage (its connections should be autocommit; the client never closes it). The DSN
    of a shared pool is taken from ``pool.conninfo`` when ``dsn`` is omitted; :meth:`consume`
    needs it for its dedicated LISTEN connection.

    When a call finds its connection dead (server restart, failover, pg_terminate_backend), the
    others in the pool are presumed dead too: the call raises, and the next one first connects
    once to check that the server answers (raising that error while it does not), then gets a
    new pool (a shared pool is drained instead). With a multi-host DSN and
    ``target_session_attrs=read-write`` that finds the new primary.
    """

    def __init__(self, dsn: str | None = None, *, min_size: int = 1, max_size: int = 4,
                 pool: ConnectionPool | None = None) -> None:
        if dsn is not None and not isinstance(dsn, str):
            raise TypeError(f"dsn must be a str (libpq DSN or URI), got {type(dsn).__name__}")
        if pool is not None and not isinstance(pool, ConnectionPool):
            raise TypeError(f"pool must be a psycopg_pool.ConnectionPool, got {type(pool).__name__}")
        if pool is None:
            if dsn is None:
                raise ValueError("Client needs a dsn or a pool")
            _check_int("min_size", min_size, 0)
            _check_int("max_size", max_size, max(min_size, 1))
            # Connect once up front: a bad DSN fails here with the server's own error instead of
            # a pool timeout at the first call.
            psycopg.connect(dsn, autocommit=True).close()
            self._sizes = (min_size, max_size)
            self._pool = self._new_pool(dsn)
            self._owns_pool = True
        else:
            self._pool = pool
            self._owns_pool = False
        self._dsn = dsn if dsn is not None else self._pool.conninfo
        self._closed = False
        # _lost_since: when a pooled connection was found dead (None: the pool is presumed
        # good). The next call checks the server first and then drops the pool (_renew_pool).
        self._pool_lock = threading.Lock()
        self._lost_since: float | None = None

    def _new_pool(self, dsn: str) -> ConnectionPool:
        min_size, max_size = self._sizes
        return ConnectionPool(dsn, min_size=min_size, max_size=max_size,
                              kwargs={"autocommit": True}, name="pgmq-client", open=True)

    # -- lifecycle

    def close(self) -> None:
        """Close the pool if this client made it. Idempotent."""
        with self._pool_lock:
            if self._closed:
                return
            self._closed = True
        if self._owns_pool:
            self._pool.close()

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pool(self) -> ConnectionPool:
        return self._pool

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plumbing

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[Any]]:
        if self._closed:
            raise RuntimeError("Client is closed")
        if self._lost_since is not None:
            self._renew_pool()
        pool = self._pool
        try:
            conn = pool.getconn()
        except PoolClosed:
            if pool is self._pool:
                raise
            pool = self._pool  # another thread renewed the pool meanwhile
            conn = pool.getconn()
        try:
            with conn:  # as pool.connection() does: commit, or roll back on an error
                yield conn
        except psycopg.OperationalError:
            if conn.broken:
                self._connection_lost(pool)
            raise
        finally:
            pool.putconn(conn)

    def _connection_lost(self, pool: ConnectionPool | None = None) -> None:
        """A connection died (the server restarted, failed over, or killed it): its pool
        siblings are presumably dead too, each costing a failed call if handed out."""
        with self._pool_lock:
            if (pool is None or pool is self._pool) and self._lost_since is None:
                self._lost_since = monotonic()

    @property
    def reconnecting(self) -> bool:
        """A connection was lost and the server has not answered since (for less than
        _RECONNECT_FAST_FOR seconds): the consume loops retry every _RECONNECT_EVERY s."""
        since = self._lost_since
        return since is not None and monotonic() - since < _RECONNECT_FAST_FOR

    def _renew_pool(self) -> None:
        """After a lost connection: connect once to check that the server (whichever host of a
        multi-host DSN accepts us now) answers, raising the connect error while it does not;
        then replace the whole pool (a shared pool is drained: its idle connections are
        closed, those in use are closed when given back)."""
        with self._pool_lock:
            if self._lost_since is None:
                return
            psycopg.connect(self._dsn, autocommit=True).close()
            if self._closed:  # closed meanwhile: no new pool to leak
                raise RuntimeError("Client is closed")
            old = self._pool
            if self._owns_pool:
                self._pool = self._new_pool(self._dsn)
            else:
                old.drain()
            self._lost_since = None
        if self._owns_pool:
            log.info("pgmq client: connection lost earlier, server back: pool replaced")
            old.close(timeout=1.0)

    @contextmanager
    def _cursor(self) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        with self._connection() as conn, conn.cursor(row_factory=dict_row) as cur:
            yield cur

    def _rows(self, query: sql.Composable | str, params: Sequence[Any]) -> list[dict[str, Any]]:
        with self._cursor() as cur:
            cur.execute(query, params)  # type: ignore[arg-type]
            return cur.fetchall()

    def _value(self, query: sql.Composable | str, params: Sequence[Any]) -> Any:
        rows = self._rows(query, params)
        return next(iter(rows[0].values())) if rows else None

    def _messages(self, query: sql.Composable | str, params: Sequence[Any]) -> list[Message]:
        return [Message.from_row(r) for r in self._rows(query, params)]

    # -- queues

    def create(self, queue: str, *, unlogged: bool = False) -> None:
        """Create a queue and its archive (idempotent); ``unlogged`` makes UNLOGGED tables."""
        _queue("queue", queue)
        _bool("unlogged", unlogged)
        if unlogged:
            self._rows("SELECT pgmq.create_unlogged(queue_name => %s::text)", (queue,))
        else:
            self._rows("SELECT pgmq.create(queue_name => %s::text)", (queue,))

    def drop(self, queue: str) -> bool:
        """Drop a queue, its archive and its settings; False when it did not exist."""
        _queue("queue", queue)
        return bool(self._value("SELECT pgmq.drop_queue(queue_name => %s::text)", (queue,)))

    # -- sending

    def send(self, queue: str, message: Any, *, headers: dict[str, Any] | None = None,
             delay: Delay = 0) -> int:
        """Send one message; ``delay`` is seconds or a timezone-aware datetime. Returns its id."""
        _queue("queue", queue)
        msg, hdrs = _message("message", message), _headers("headers", headers)
        delay = _check_time("delay", delay)
        query = sql.SQL("SELECT * FROM pgmq.send(queue_name => %s::text, msg => %s::jsonb, "
                        "headers => %s::jsonb, delay => %s::{})").format(_time_cast(delay))
        return int(self._value(query, (queue, msg, hdrs, delay)))

    def send_batch(self, queue: str, messages: Sequence[Any], *,
                   headers: Sequence[dict[str, Any] | None] | None = None,
                   delay: Delay = 0) -> list[int]:
        """Send many messages in one statement; ``headers``, when given, has one entry (a dict
        or None) per message. Returns the ids in the order of ``messages``."""
        _queue("queue", queue)
        _check_batch_shape(messages, headers)
        delay = _check_time("delay", delay)
        msgs, hdrs = _batch(messages, headers)
        query = sql.SQL("SELECT * FROM pgmq.send_batch(queue_name => %s::text, msgs => %s::jsonb[], "
                        "headers => %s::jsonb[], delay => %s::{})").format(_time_cast(delay))
        rows = self._rows(query, (queue, msgs, hdrs, delay))
        return [int(next(iter(r.values()))) for r in rows]

    def send_topic(self, routing_key: str, message: Any, *,
                   headers: dict[str, Any] | None = None, delay: int = 0) -> int:
        """Send a copy to every queue bound to a pattern matching ``routing_key`` (all or
        nothing); returns the number of queues. ``delay`` is in seconds."""
        validate.text("routing_key", routing_key)
        msg, hdrs = _message("message", message), _headers("headers", headers)
        delay = _check_int("delay", delay, 0)
        return int(self._value(
            "SELECT pgmq.send_topic(routing_key => %s::text, msg => %s::jsonb, "
            "headers => %s::jsonb, delay => %s::integer)",
            (routing_key, msg, hdrs, delay)))

    def publish(self, exchange: str, routing_key: str | None, message: Any, *,
                headers: dict[str, Any] | None = None, delay: Delay = 0) -> list[tuple[str, int]]:
        """Publish through an exchange: one copy per queue (and one event per stream) it routes
        to, atomically. Returns (queue, msg_id) per queue copy; an unroutable message returns []
        (or raises, as the exchange is set up with pgmq.set_unroutable)."""
        rows = self._publish("publish", exchange, routing_key, message, headers, delay)
        return [(r["queue_name"], int(r["msg_id"])) for r in rows]

    def publish_routed(self, exchange: str, routing_key: str | None, message: Any, *,
                       headers: dict[str, Any] | None = None,
                       delay: Delay = 0) -> list[tuple[str, str, int]]:
        """publish(), returning every copy: ("queue", queue, msg_id) and ("stream", stream,
        ev_id)."""
        rows = self._publish("publish_routed", exchange, routing_key, message, headers, delay)
        return [("queue", r["queue_name"], int(r["msg_id"])) if r["queue_name"] is not None
                else ("stream", r["stream_name"], int(r["ev_id"])) for r in rows]

    def _publish(self, function: str, exchange: str, routing_key: str | None, message: Any,
                 headers: dict[str, Any] | None, delay: Delay) -> list[dict[str, Any]]:
        validate.text("exchange", exchange, empty=False)
        if routing_key is not None:
            validate.text("routing_key", routing_key)
        msg, hdrs = _message("message", message), _headers("headers", headers)
        delay = _check_time("delay", delay)
        query = sql.SQL("SELECT * FROM pgmq.{}(exchange_name => %s::text, routing_key => %s::text, "
                        "msg => %s::jsonb, headers => %s::jsonb, delay => %s::{})").format(
                            sql.Identifier(function), _time_cast(delay))
        return self._rows(query, (exchange, routing_key, msg, hdrs, delay))

    # -- reading

    def read(self, queue: str, *, vt: int = 30, qty: int = 1,
             conditional: dict[str, Any] | None = None) -> list[Message]:
        """Lease up to ``qty`` visible messages for ``vt`` seconds; ``conditional`` keeps only
        messages whose payload contains it (jsonb ``@>``)."""
        _queue("queue", queue)
        _check_int("vt", vt, 0)
        _check_int("qty", qty, 1)
        cond = _message("conditional", conditional or {})
        return self._messages(
            "SELECT * FROM pgmq.read(queue_name => %s::text, vt => %s::integer, qty => %s::integer, "
            "conditional => %s::jsonb)",
            (queue, vt, qty, cond))

    def read_with_poll(self, queue: str, *, vt: int = 30, qty: int = 1, max_poll_seconds: int = 5,
                       poll_interval_ms: int = 100,
                       conditional: dict[str, Any] | None = None) -> list[Message]:
        """Like :meth:`read`, but the server keeps retrying every ``poll_interval_ms`` for up to
        ``max_poll_seconds`` while nothing is visible (holding one pool connection meanwhile)."""
        _queue("queue", queue)
        _check_int("vt", vt, 0)
        _check_int("qty", qty, 1)
        _check_int("max_poll_seconds", max_poll_seconds, 0)
        _check_int("poll_interval_ms", poll_interval_ms, 1)
        cond = _message("conditional", conditional or {})
        return self._messages(
            "SELECT * FROM pgmq.read_with_poll(queue_name => %s::text, vt => %s::integer, "
            "qty => %s::integer, max_poll_seconds => %s::integer, poll_interval_ms => %s::integer, "
            "conditional => %s::jsonb)",
            (queue, vt, qty, max_poll_seconds, poll_interval_ms, cond))

    def pop(self, queue: str, qty: int = 1) -> list[Message]:
        """Read and delete up to ``qty`` messages at once (at-most-once delivery)."""
        _queue("queue", queue)
        _check_int("qty", qty, 1)
        return self._messages("SELECT * FROM pgmq.pop(queue_name => %s::text, qty => %s::integer)",
                              (queue, qty))

    # -- finishing

    @overload
    def delete(self, queue: str, msg_id: int) -> bool: ...
    @overload
    def delete(self, queue: str, msg_id: Sequence[int]) -> list[int]: ...

    def delete(self, queue: str, msg_id: int | Sequence[int]) -> bool | list[int]:
        """Delete one message (True if it existed) or several (the ids that existed)."""
        _queue("queue", queue)
        ids = validate.msg_ids("msg_id", msg_id)
        if isinstance(ids, int):
            return bool(self._value(
                "SELECT pgmq.delete(queue_name => %s::text, msg_id => %s::bigint)", (queue, ids)))
        return [int(r["delete"]) for r in self._rows(
            "SELECT * FROM pgmq.delete(queue_name => %s::text, msg_ids => %s::bigint[])",
            (queue, ids))]

    @overload
    def archive(self, queue: str, msg_id: int) -> bool: ...
    @overload
    def archive(self, queue: str, msg_id: Sequence[int]) -> list[int]: ...

    def archive(self, queue: str, msg_id: int | Sequence[int]) -> bool | list[int]:
        """Move one message to the archive (True if it existed) or several (the ids moved)."""
        _queue("queue", queue)
        ids = validate.msg_ids("msg_id", msg_id)
        if isinstance(ids, int):
            return bool(self._value(
                "SELECT pgmq.archive(queue_name => %s::text, msg_id => %s::bigint)", (queue, ids)))
        return [int(r["archive"]) for r in self._rows(
            "SELECT * FROM pgmq.archive(queue_name => %s::text, msg_ids => %s::bigint[])",
            (queue, ids))]

    @overload
    def set_vt(self, queue: str, msg_id: int, vt: Delay) -> Message | None: ...
    @overload
    def set_vt(self, queue: str, msg_id: Sequence[int], vt: Delay) -> list[Message]: ...

    def set_vt(self, queue: str, msg_id: int | Sequence[int],
               vt: Delay) -> Message | None | list[Message]:
        """Make messages visible ``vt`` seconds from now (0 releases a lease) or at a
        timezone-aware datetime. Returns the updated message (None if it does not exist), or
        the updated messages for a list of ids."""
        _queue("queue", queue)
        ids = validate.msg_ids("msg_id", msg_id)
        vt = _check_time("vt", vt)
        single = isinstance(ids, int)
        query = sql.SQL("SELECT * FROM pgmq.set_vt(queue_name => %s::text, {} => %s::{}, "
                        "vt => %s::{})").format(
            sql.SQL("msg_id" if single else "msg_ids"), sql.SQL("bigint" if single else "bigint[]"),
            _time_cast(vt))
        msgs = self._messages(query, (queue, ids, vt))
        if single:
            return msgs[0] if msgs else None
        return msgs

    def nack(self, queue: str, msg_id: int, error: str | None = None) -> bool:
        """Report a failed delivery: the message comes back after the queue's retry delay, or is
        dead-lettered once its deliveries are used up. False when it does not exist."""
        _queue("queue", queue)
        validate.integer("msg_id", msg_id, -validate.INT64_MAX - 1, validate.INT64_MAX)
        if error is not None:
            validate.text("error", error)
        return bool(self._value(
            "SELECT pgmq.nack(queue_name => %s::text, msg_id => %s::bigint, error => %s::text)",
            (queue, msg_id, error)))

    # -- metrics

    def metrics(self, queue: str) -> QueueMetrics:
        _queue("queue", queue)
        rows = self._rows("SELECT * FROM pgmq.metrics(queue_name => %s::text)", (queue,))
        return QueueMetrics.from_row(rows[0])

    # -- streams (README: Streams)

    def create_stream(self, stream: str, *, retention: timedelta | int = timedelta(days=7),
                      rotation_period: timedelta | int = timedelta(hours=1),
                      retention_bytes: int | None = None, drop_unacked: bool = False) -> None:
        """Create a stream (idempotent). ``retention`` and ``rotation_period`` are timedeltas or
        int seconds; ``retention_bytes`` caps its size; ``drop_unacked`` lets retention drop
        events a subscription has not acknowledged (it learns how many in ``lost``)."""
        _queue("stream", stream)
        retention = _interval("retention", retention, timedelta(0))
        rotation_period = _interval("rotation_period", rotation_period, timedelta(seconds=1))
        if retention_bytes is not None:
            validate.integer("retention_bytes", retention_bytes, 1, validate.INT64_MAX)
        _bool("drop_unacked", drop_unacked)
        self._rows("SELECT pgmq.create_stream(stream_name => %s::text, retention => %s::interval, "
                   "rotation_period => %s::interval, retention_bytes => %s::bigint, "
                   "drop_unacked => %s::boolean)",
                   (stream, retention, rotation_period, retention_bytes, drop_unacked))

    def drop_stream(self, stream: str) -> bool:
        """Drop a stream with its events and subscriptions; False when there was none."""
        _queue("stream", stream)
        return bool(self._value("SELECT pgmq.drop_stream(stream_name => %s::text)", (stream,)))

    def list_streams(self) -> list[StreamRecord]:
        """Every stream with its settings, segments and size."""
        return [StreamRecord.from_row(r) for r in self._rows("SELECT * FROM pgmq.list_streams()", ())]

    def stream_send(self, stream: str, message: Any, *,
                    headers: dict[str, Any] | None = None) -> int:
        """Append one event; returns its ev_id. Every subscription gets it once it commits."""
        _queue("stream", stream)
        msg, hdrs = _message("message", message), _headers("headers", headers)
        return int(self._value("SELECT pgmq.stream_send(stream_name => %s::text, msg => %s::jsonb, "
                               "headers => %s::jsonb)", (stream, msg, hdrs)))

    def stream_send_batch(self, stream: str, messages: Sequence[Any], *,
                          headers: Sequence[dict[str, Any] | None] | None = None) -> list[int]:
        """Append many events in one statement; ``headers``, when given, has one entry (a dict
        or None) per message. Returns the ev_ids in the order of ``messages``."""
        _queue("stream", stream)
        _check_batch_shape(messages, headers)
        msgs, hdrs = _batch(messages, headers)
        rows = self._rows("SELECT * FROM pgmq.stream_send_batch(stream_name => %s::text, "
                          "msgs => %s::jsonb[], headers => %s::jsonb[])", (stream, msgs, hdrs))
        return [int(next(iter(r.values()))) for r in rows]

    def subscribe(self, stream: str, subscription: str, *,
                  start: Literal["latest", "earliest"] | int = "latest") -> int:
        """Subscribe (idempotent: an existing subscription keeps its position) from ``"latest"``
        (events committed from now on), ``"earliest"`` (every event still kept) or a position
        (an int tick id from :meth:`stream_info`). Returns the subscription's position."""
        _queue("stream", stream)
        _subscription(subscription)
        if isinstance(start, int) and not isinstance(start, bool):
            start_text = str(_position("start", start))
        elif start in ("latest", "earliest"):
            start_text = str(start)
        else:
            raise ValueError(f"start must be 'latest', 'earliest' or a position (int), got {start!r:.60}")
        return int(self._value("SELECT pgmq.subscribe(stream_name => %s::text, "
                               "subscription_name => %s::text, start => %s::text)",
                               (stream, subscription, start_text)))

    def unsubscribe(self, stream: str, subscription: str) -> bool:
        """Remove a subscription with its open batches; False when there was none."""
        _queue("stream", stream)
        _subscription(subscription)
        return bool(self._value("SELECT pgmq.unsubscribe(stream_name => %s::text, "
                                "subscription_name => %s::text)", (stream, subscription)))

    def stream_read(self, stream: str, subscription: str, *,
                    lease_seconds: int = 30) -> StreamBatch | None:
        """Lease the subscription's next batch for ``lease_seconds`` (None when nothing is new).
        Acknowledge it with :meth:`stream_ack` within the lease, or it goes to the next reader
        under a new batch_id. This call and the ack are each their own transaction (at-least-
        once); to make a batch's database work exactly-once, use :meth:`consume_stream`."""
        _queue("stream", stream)
        _subscription(subscription)
        _check_int("lease_seconds", lease_seconds, 1)
        with self._connection() as conn:
            return streams.read_batch(conn, stream, subscription, lease_seconds)

    def stream_ack(self, stream: str, subscription: str, batch_id: int) -> None:
        """Acknowledge a batch: the subscription's position moves past it once no earlier
        batch is out. Raises psycopg.Error 55000 when the batch is not out (acknowledged, or
        its lease ran out and it went to another consumer)."""
        _queue("stream", stream)
        _subscription(subscription)
        validate.integer("batch_id", batch_id, -validate.INT64_MAX - 1, validate.INT64_MAX)
        self._rows("SELECT pgmq.stream_ack(stream_name => %s::text, subscription_name => %s::text, "
                   "batch_id => %s::bigint)", (stream, subscription, batch_id))

    def stream_rewind(self, stream: str, subscription: str, to: int | datetime) -> int:
        """Move a subscription to a position (an int tick id) or to the last position at or
        before a timezone-aware datetime; its open batches are dropped and what follows is
        delivered again. Returns the new position."""
        _queue("stream", stream)
        _subscription(subscription)
        if isinstance(to, datetime):
            to = _check_time("to", to)
            cast = "timestamptz"
        else:
            if not isinstance(to, int) or isinstance(to, bool):
                raise TypeError(f"to must be a position (int) or a timezone-aware datetime, got "
                                f"{type(to).__name__} {to!r:.60}")
            to = _position("to", to)
            cast = "bigint"
        query = sql.SQL("SELECT pgmq.stream_rewind(stream_name => %s::text, "
                        "subscription_name => %s::text, {} => %s::{})").format(
            sql.Identifier("to_time" if cast == "timestamptz" else "to_position"), sql.SQL(cast))
        return int(self._value(query, (stream, subscription, to)))

    def stream_info(self, stream: str | None = None) -> list[SubscriptionInfo]:
        """Every subscription (of ``stream``, or of every stream the caller may read)."""
        if stream is not None:
            _queue("stream", stream)
        return [SubscriptionInfo.from_row(r) for r in self._rows(
            "SELECT * FROM pgmq.stream_info(stream_name => %s::text)", (stream,))]

    def stream_tick(self, stream: str | None = None) -> int:
        """Tick ``stream`` (or every stream) when events came since its last tick, rotate its
        segments and apply its retention; returns how many ticks were made."""
        if stream is not None:
            _queue("stream", stream)
        return int(self._value("SELECT pgmq.stream_tick(stream_name => %s::text)", (stream,)))

    def grant_stream_access(self, stream: str, role: str, access: str = "all") -> None:
        """Let ``role`` (or "public") read ("read"), write ("write") or both ("all") the stream,
        its future segments too (stream owner only)."""
        self._stream_access("grant", stream, role, access)

    def revoke_stream_access(self, stream: str, role: str, access: str = "all") -> None:
        """Take ``access`` to the stream from ``role`` (stream owner only)."""
        self._stream_access("revoke", stream, role, access)

    def _stream_access(self, verb: str, stream: str, role: str, access: str) -> None:
        _queue("stream", stream)
        validate.text("role", role, empty=False)
        validate.text("access", access, empty=False)
        self._rows(sql.SQL("SELECT pgmq.{}(stream_name => %s::text, role_name => %s::name, "
                           "access => %s::text)").format(sql.Identifier(f"{verb}_stream_access")),
                   (stream, role, access))

    # -- consuming

    def _ensure_notify_insert(self, queue: str) -> None:
        """Enable insert notifications unless the queue already has them (whatever throttle
        someone chose is kept)."""
        check = ("SELECT EXISTS (SELECT 1 FROM pgmq.list_notify_insert_throttles() t "
                 "WHERE t.queue_name = %s::text)")
        if self._value(check, (queue,)):
            return
        try:
            self._rows("SELECT pgmq.enable_notify_insert(queue_name => %s::text)", (queue,))
        except psycopg.Error:
            # Another consumer may have enabled them at the same moment.
            if not self._value(check, (queue,)):
                raise

    def _listen(self, queue: str) -> psycopg.Connection[Any]:
        listener = psycopg.connect(self._dsn, autocommit=True)
        try:
            listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(f"pgmq.q_{queue}.INSERT")))
        except BaseException:
            listener.close()
            raise
        return listener

    @staticmethod
    def _wait(listener: psycopg.Connection[Any], poll_interval: float,
              stop: threading.Event | None) -> None:
        """Return on the first notification, after poll_interval, or soon after stop is set."""
        deadline = monotonic() + poll_interval
        while stop is None or not stop.is_set():
            remaining = deadline - monotonic()
            if remaining <= 0:
                return
            slice_ = remaining if stop is None else min(remaining, _STOP_CHECK_SECONDS)
            for _ in listener.notifies(timeout=slice_, stop_after=1):
                return

    def consume(self, queue: str, handler: Callable[[Message], object], *, vt: int = 30,
                batch: int = 10, poll_interval: float = 1.0, stop: threading.Event | None = None,
                on_error: Literal["nack", "leave", "raise"] = "nack",
                ack: Literal["archive", "delete"] = "archive", retry: bool = True) -> int:
        """Process messages until ``stop`` is set; returns how many messages were passed to
        ``handler`` (successfully or not).

        Reads up to ``batch`` messages with a ``vt``-second lease and calls ``handler(message)``
        for each, one at a time. On success the message is archived (``ack="delete"``: deleted).
        When the handler raises an ``Exception``:

        - ``on_error="nack"``: ``pgmq.nack`` with the exception text (``"ValueError: ..."``), so
          the queue's retry policy decides between a retry and a dead letter (without a policy
          the message comes back after 1 s, doubling per attempt up to 5 minutes);
        - ``"leave"``: nothing; the message comes back when its lease expires;
        - ``"raise"``: the exception propagates (the rest of the batch keeps its leases).

        Failures are logged as WARNINGs at most every 10 s per queue (the first with its
        traceback, then how many were not logged since).

        While a read finds nothing, the loop waits on ``LISTEN "pgmq.q_<queue>.INSERT"`` on a
        dedicated connection (enabling ``pgmq.enable_notify_insert`` once if the queue has no
        insert notifications), and reads again on the first notification or after
        ``poll_interval`` seconds at the latest: delayed messages, expired leases and nacked
        retries do not notify. Notifications are throttled per queue (250 ms by default), so a
        message sent shortly after another can wait for the next poll.

        ``stop`` is checked before every read and about every 0.1 s while waiting; a batch that
        was read is always finished first, so no lease is abandoned.

        Transient errors (a broken connection or a server restart, too many connections, disk
        full, a statement_timeout or lock_timeout, a serialization failure or deadlock) are
        logged and retried after a wait that doubles from 0.1 to 5 s while they repeat; the
        LISTEN connection is made again when it broke. A lost connection (a restart, a
        failover: docs/guides/high-availability.md) retires the whole pool, and the loop tries
        the server again every 0.05 s for up to a minute, so it is back within about 0.1 s
        of a new primary accepting writes. An acknowledgement (or nack) that failed
        so leaves the message leased: it comes back when the lease ends, and is delivered
        again. Other psycopg errors (an unknown queue, a missing privilege) propagate, as
        every error does with ``retry=False``.
        """
        _queue("queue", queue)
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {type(handler).__name__}")
        _check_int("vt", vt, 1)
        _check_int("batch", batch, 1)
        validate.seconds("poll_interval", poll_interval, 0, inclusive=False)
        if stop is not None and not callable(getattr(stop, "is_set", None)):
            raise TypeError(f"stop must be a threading.Event or None, got {type(stop).__name__}")
        if on_error not in ("nack", "leave", "raise"):
            raise ValueError(f"on_error must be 'nack', 'leave' or 'raise', got {on_error!r}")
        if ack not in ("archive", "delete"):
            raise ValueError(f"ack must be 'archive' or 'delete', got {ack!r}")

        self._ensure_notify_insert(queue)
        handled = 0
        listener: psycopg.Connection[Any] | None = None
        retrier = _Retrier(f"consume on {queue}", retry, stop)
        failures = _FailureLog(queue)

        def recover(exc: psycopg.Error, what: str) -> None:
            """Retry a transient error after the backoff (soon, while reconnecting), or raise
            it."""
            nonlocal listener
            if listener is not None and (listener.broken or listener.closed):
                listener.close()
                listener = None
                self._connection_lost()
            retrier.check(exc, what, fast=self.reconnecting)
            retrier.wait(fast=self.reconnecting)

        try:
            while stop is None or not stop.is_set():
                try:
                    if listener is None:
                        listener = self._listen(queue)
                    messages = self.read(queue, vt=vt, qty=batch)
                    if not messages:
                        self._wait(listener, poll_interval, stop)
                        retrier.reset()
                        continue
                except psycopg.Error as exc:
                    recover(exc, "read")
                    continue
                retrier.reset()
                for msg in messages:
                    handled += 1
                    try:
                        handler(msg)
                    except Exception as exc:
                        if on_error == "raise":
                            raise
                        failures.failed(msg.msg_id, exc)
                        if on_error == "nack":
                            try:
                                if not self.nack(queue, msg.msg_id, _error_text(exc)):
                                    log.warning("pgmq %s message %s was gone when nacked",
                                                queue, msg.msg_id)
                            except psycopg.Error as nack_exc:
                                recover(nack_exc, f"nack of message {msg.msg_id}")
                        continue
                    try:
                        done = (self.archive(queue, msg.msg_id) if ack == "archive"
                                else self.delete(queue, msg.msg_id))
                    except psycopg.Error as ack_exc:
                        recover(ack_exc, f"{ack} of message {msg.msg_id}")
                        continue
                    if not done:
                        log.warning("pgmq %s message %s was gone when acknowledged "
                                    "(lease expired and someone else finished it?)", queue,
                                    msg.msg_id)
        finally:
            if listener is not None:
                listener.close()
        return handled

    def consume_stream(self, stream: str, subscription: str,
                       handler: Callable[[StreamBatch, psycopg.Connection[Any]], object], *,
                       lease_seconds: int = 30, poll_interval: float = 1.0,
                       stop: threading.Event | None = None,
                       on_error: Literal["leave", "raise"] = "leave", retry: bool = True) -> int:
        """Process a subscription's batches until ``stop`` is set; returns how many events were
        passed to ``handler`` (in batches, successfully or not).

        Each batch is leased by ``pgmq.stream_read`` (its own statement, so that other consumers
        of the subscription cut the next batches meanwhile), then ``handler(batch, conn)`` runs
        and the batch is acknowledged in **one transaction on ``conn``** (a pool connection):
        what the handler writes through ``conn`` commits with the ack, exactly once. When the
        handler raises an ``Exception`` that transaction rolls back and the batch comes back
        after its lease, under a new batch_id (``on_error="raise"``: the exception then
        propagates). A handler slower than ``lease_seconds`` loses its batch: the ack fails, its
        work rolls back and the consumer that took the batch over does it again. Work done
        outside ``conn`` is at-least-once. See pgmq_build.streams.

        Streams do not notify: while nothing is new the loop reads again every
        ``poll_interval`` seconds, and at once after a batch. ``stop`` is checked before every
        read and while waiting; a batch that was read is always finished first. Transient
        errors are logged and retried as in :meth:`consume`; others (an unknown stream or
        subscription, a missing privilege) propagate, as every error does with ``retry=False``.
        """
        _queue("stream", stream)
        _subscription(subscription)
        if not callable(handler):
            raise TypeError(f"handler must be callable, got {type(handler).__name__}")
        _check_int("lease_seconds", lease_seconds, 1)
        validate.seconds("poll_interval", poll_interval, 0, inclusive=False)
        if stop is not None and not callable(getattr(stop, "is_set", None)):
            raise TypeError(f"stop must be a threading.Event or None, got {type(stop).__name__}")
        if on_error not in ("leave", "raise"):
            raise ValueError(f"on_error must be 'leave' or 'raise', got {on_error!r}")

        retrier = _Retrier(f"consume_stream on {stream}/{subscription}", retry, stop)
        handled = 0
        while stop is None or not stop.is_set():
            batch: StreamBatch | None = None
            try:
                with self._connection() as conn:
                    batch = streams.read_batch(conn, stream, subscription, lease_seconds)
                    if batch is not None:
                        handled += len(batch)
                        outcome, exc = streams.handle_batch(conn, batch, handler)
            except psycopg.Error as err:
                retrier.check(err, "read" if batch is None else f"batch {batch.batch_id}",
                              fast=self.reconnecting)
                retrier.wait(fast=self.reconnecting)
                continue
            retrier.reset()
            if batch is None:
                if stop is None:
                    time.sleep(poll_interval)
                else:
                    stop.wait(poll_interval)
                continue
            if outcome == streams.FAILED:
                if on_error == "raise":
                    assert exc is not None
                    raise exc
                log.warning("pgmq stream handler failed on %s/%s batch %s (%d events); it comes "
                            "back after its %d s lease", stream, subscription, batch.batch_id,
                            len(batch), lease_seconds, exc_info=exc)
            elif outcome == streams.EXPIRED:
                log.warning("pgmq stream %s/%s batch %s: its lease ran out before the ack; the "
                            "work was rolled back and another consumer has it", stream,
                            subscription, batch.batch_id)
        return handled
