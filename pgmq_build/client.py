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
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from time import monotonic
from typing import Any, Literal, overload

import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from . import validate

__all__ = ["Client", "Message", "QueueMetrics"]

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


def _transient(exc: psycopg.Error) -> bool:
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state[:2] in _TRANSIENT_CLASSES or state in _TRANSIENT_STATES


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


def _error_text(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(type(exc), exc)).strip()


# ----------------------------------------------------------------------------- client

class Client:
    """A thread-safe pgmq client over a psycopg_pool.ConnectionPool of autocommit connections.

    Pass ``dsn`` to let the client own its pool (closed by :meth:`close`), or ``pool`` to share
    one you manage (its connections should be autocommit; the client never closes it). The DSN
    of a shared pool is taken from ``pool.conninfo`` when ``dsn`` is omitted; :meth:`consume`
    needs it for its dedicated LISTEN connection.
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
            self._pool = ConnectionPool(dsn, min_size=min_size, max_size=max_size,
                                        kwargs={"autocommit": True}, name="pgmq-client",
                                        open=True)
            self._owns_pool = True
        else:
            self._pool = pool
            self._owns_pool = False
        self._dsn = dsn if dsn is not None else self._pool.conninfo
        self._closed = False

    # -- lifecycle

    def close(self) -> None:
        """Close the pool if this client made it. Idempotent."""
        if not self._closed:
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
    def _cursor(self) -> Iterator[psycopg.Cursor[dict[str, Any]]]:
        if self._closed:
            raise RuntimeError("Client is closed")
        with self._pool.connection() as conn, conn.cursor(row_factory=dict_row) as cur:
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
        if not isinstance(unlogged, bool):
            raise TypeError(f"unlogged must be a bool, got {type(unlogged).__name__} {unlogged!r:.60}")
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
        delay = _check_time("delay", delay)
        # every element is checked before anything is sent: a bad one sends none
        msgs = [_message(f"messages[{i}]", m) for i, m in enumerate(messages)]
        hdrs = None if headers is None else [_headers(f"headers[{i}]", h) for i, h in enumerate(headers)]
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
        """Publish through an exchange: one copy per queue it routes to, atomically. Returns
        (queue, msg_id) per copy; an unroutable message returns [] (or raises, as the exchange
        is set up with pgmq.set_unroutable)."""
        validate.text("exchange", exchange, empty=False)
        if routing_key is not None:
            validate.text("routing_key", routing_key)
        msg, hdrs = _message("message", message), _headers("headers", headers)
        delay = _check_time("delay", delay)
        query = sql.SQL("SELECT queue_name, msg_id FROM pgmq.publish(exchange_name => %s::text, "
                        "routing_key => %s::text, msg => %s::jsonb, headers => %s::jsonb, "
                        "delay => %s::{})").format(_time_cast(delay))
        rows = self._rows(query, (exchange, routing_key, msg, hdrs, delay))
        return [(r["queue_name"], int(r["msg_id"])) for r in rows]

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
          the queue's retry policy decides between a retry and a dead letter;
        - ``"leave"``: nothing; the message comes back when its lease expires;
        - ``"raise"``: the exception propagates (the rest of the batch keeps its leases).

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
        LISTEN connection is made again when it broke. An acknowledgement (or nack) that failed
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
        backoff = _RETRY_FIRST

        def recover(exc: psycopg.Error, what: str) -> None:
            """Retry a transient error after the backoff, or raise it."""
            nonlocal listener, backoff
            if not retry or not _transient(exc):
                raise exc
            log.warning("pgmq consume on %s: %s failed, retrying in %.1f s: %s", queue, what,
                        backoff, str(exc).strip().splitlines()[0] if str(exc).strip() else exc)
            if listener is not None and (listener.broken or listener.closed):
                listener.close()
                listener = None
            if stop is None:
                time.sleep(backoff)
            else:
                stop.wait(backoff)
            backoff = min(backoff * 2, _RETRY_MAX)

        try:
            while stop is None or not stop.is_set():
                try:
                    if listener is None:
                        listener = self._listen(queue)
                    messages = self.read(queue, vt=vt, qty=batch)
                    if not messages:
                        self._wait(listener, poll_interval, stop)
                        backoff = _RETRY_FIRST
                        continue
                except psycopg.Error as exc:
                    recover(exc, "read")
                    continue
                backoff = _RETRY_FIRST
                for msg in messages:
                    handled += 1
                    try:
                        handler(msg)
                    except Exception as exc:
                        if on_error == "raise":
                            raise
                        log.warning("pgmq handler failed on %s message %s", queue, msg.msg_id,
                                    exc_info=True)
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
