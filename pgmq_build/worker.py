"""The callback worker: a pool of threads that deliver messages to the procedures registered with
``pgmq.register_callback``, like pgpro_queue's callback background workers but as a process.

Usage::

    from pgmq_build.worker import Worker

    w = Worker("postgresql://app@db/app", min_workers=2).start()
    ...                      # messages are dispatched as they arrive
    totals = w.stop()        # lets in-flight callbacks finish; totals.done, totals.failed

    Worker(dsn).run_until_idle()   # dispatch until nothing is eligible, then return (cron)

Design:

* Each dispatcher thread has its own autocommit connection and dispatches with
  ``pgmq._dispatch_one(queue)``: the message is claimed, the callback runs (in a subtransaction)
  and the message is deleted (or the failure recorded through the queue's retry policy), and
  the call says what happened ('done', 'failed', NULL when nothing is eligible), which gives us
  the totals and tells us when a queue is drained without another query. Several calls share
  one statement, hence one transaction and one commit: a recursive query that calls
  ``_dispatch_one`` up to k times and stops at the first NULL (``_DISPATCH_MANY``; k = 1 is the
  plain ``SELECT pgmq._dispatch_one(queue)``). A callback that raises is undone alone (its
  subtransaction); an error outside it (statement_timeout, a deadlock in the claim, a broken
  connection) rolls back the whole statement, whose messages come back and, on a queue with a
  retry policy, each count one failed delivery. k is at most ``tx_batch`` and is sized per
  dispatcher and queue so that a statement lasts about ``_TX_TARGET`` seconds: slow callbacks
  get a transaction each, as with ``tx_batch=1``, so that a stop request, a row lock or a
  crash never involves more than that much work; fast ones share a commit. After a dispatch
  error a queue is served one message per transaction for ``_ISOLATE_SECONDS``, so that a
  message whose dispatch keeps failing fails alone, and rests for a moment that doubles
  while the errors repeat (``_error_cooldown``: 50 ms up to 5 s). We never hold a transaction
  open across statements, so a broken connection, a killed process or a server restart rolls
  back at most the statement in flight. Totals are counted once the statement (its commit) succeeded.
  ``batch`` bounds how many messages a dispatcher takes from one queue before moving round
  robin to the next queue with work (a statement never spans two turns).
* Callbacks run as their registrant (``pgmq.list_callbacks()``'s ``registrant``), and only in a
  session acting as that role (docs/guides/callbacks-and-worker.md). A queue whose callback is the
  worker's own login role's is dispatched as above. For another role's, the dispatcher makes its
  session act as that role for one statement and scrubs it before anything else runs there:
  ``SET ROLE <registrant>``, the dispatch statement, then ``_SCRUB`` (what ``DISCARD ALL``
  does, but keeping plans: held cursors closed, role and settings reset, prepared statements
  deallocated, LISTEN, session advisory locks and temporary objects dropped), so nothing a
  callback left in the session (a plain SET, a replaced prepared statement, a temporary function
  or table shadowing ours) ever runs with the worker's rights. A scrub that fails closes the
  connection. The worker's role must be a member of every registrant it serves (a superuser is).
* A listener thread holds one connection that LISTENs on ``pgmq.q_<queue>.INSERT`` (enabling
  ``pgmq.enable_notify_insert(queue, 0)`` for queues without notifications) and wakes the
  dispatchers. Dispatchers also poll every ``naptime_ms``, since delayed and retried messages
  never notify.
* A supervisor thread re-reads ``pgmq.list_callbacks()`` every ``refresh_interval`` seconds
  (when no queues were given) and grows the pool: when every dispatcher has been working
  continuously for ``start_delay`` seconds, it adds one, up to ``max_workers``. A dispatcher
  that has found no message for ``idle_timeout`` seconds retires while more than
  ``min_workers`` remain.
* Stream subscriptions (``streams``, with a Python ``handler``): ``stream_consumers`` threads
  per subscription, each with its own connection, lease a batch with ``pgmq.stream_read`` and
  run ``handler(batch, conn)`` and ``pgmq.stream_ack`` in one transaction
  (``pgmq_build.streams.handle_batch``): the handler's writes on ``conn`` commit exactly once
  with the ack; a handler that raises rolls back and its batch comes back after the lease.
  Streams do not notify: an idle consumer reads again every ``naptime_ms``. Given streams and
  no queues, the worker serves the streams only.
* Logs go to the ``pgmq_build.worker`` logger: the record's message is the event name and
  ``record.fields`` holds the rest (queue, worker, counts). ``JsonFormatter`` renders one JSON
  object per line.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from typing import Any, NamedTuple

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict

from . import streams as stream_batches
from . import validate
from .extras import missing_extra
from .install import NOT_INSTALLED, has_pgmq, pgmq_missing
from .printable import printable
from .streams import BatchHandler

__all__ = ["JsonFormatter", "SettingError", "TextFormatter", "Totals", "Worker", "check_settings",
           "load_handler", "run_cli"]

log = logging.getLogger(__name__)

# Defaults of pgpro_queue's callback_min_workers, callback_max_workers,
# callback_worker_start_delay (s), callback_worker_idle_timeout (s), callback_naptime (ms).
MIN_WORKERS = 3
MAX_WORKERS = 10
START_DELAY = 5.0
IDLE_TIMEOUT = 60.0
NAPTIME_MS = 150
BATCH = 100
REFRESH_INTERVAL = 10.0
STREAM_LEASE = 30  # seconds a stream batch is leased to its consumer (handler + ack must fit)
STREAM_CONSUMERS = 1  # consumer threads per subscription
# Messages dispatched in one statement (one transaction) at most. Past ~10 the commit work saved
# per message is small, and on a shared queue each claim skips the rows that the other
# dispatchers' open batches hold (measured on 2 cores, 3 dispatchers, no-op callback: 10 to 50
# cost the same server CPU per callback within the machine's noise, a client loop of 200 per
# statement clearly more). 20 also keeps what a failed batch rolls back small. Above 64,
# callbacks that write would overflow PostgreSQL's per-backend cache of subtransaction ids
# (every callback runs in a subtransaction).
TX_BATCH = 20
TX_BATCH_MAX = 1000
# Delayed and retried messages are found only by polling: more than an hour is a mistake.
NAPTIME_MS_MAX = 3_600_000

# One statement: up to %(k)s calls, stopping at the first NULL (nothing eligible). Each call is
# a VOLATILE function call, so it sees what the previous calls of the statement did. The
# queue name rides along in d so that each call is LATERAL to the row before it: made only
# while that row says go on. _dispatch_one_detail is _dispatch_one that also returns the
# msg_id and the error text of a failed callback (logged, see _note_failures).
_DISPATCH_ONE = "SELECT outcome, dispatched_msg_id, error_text FROM pgmq._dispatch_one_detail(%s)"
_DISPATCH_MANY = """\
WITH RECURSIVE d(n, q, outcome, msg_id, error) AS (
    SELECT 1, a.q, r.* FROM (SELECT %(q)s::text) a(q), LATERAL pgmq._dispatch_one_detail(a.q) r
  UNION ALL
    SELECT d.n + 1, d.q, r.* FROM d, LATERAL pgmq._dispatch_one_detail(d.q) r
    WHERE d.outcome IS NOT NULL AND d.n < %(k)s
)
SELECT count(*) FILTER (WHERE outcome = 'done'), count(*) FILTER (WHERE outcome <> 'done'),
       count(*) FILTER (WHERE outcome IS NULL) > 0,
       coalesce(array_agg(msg_id ORDER BY n) FILTER (WHERE outcome = 'failed'), '{}'),
       coalesce(array_agg(error ORDER BY n) FILTER (WHERE outcome = 'failed'), '{}')
FROM d"""
# After a statement that ran another role's callbacks, before the session serves anyone else:
# DISCARD ALL's work in its order (held cursors first, while still acting as the registrant),
# less DISCARD PLANS (plans are not session state a callback can plant; replanning every cached
# statement after each batch would cost more than the batch). One round trip; a failure closes
# the connection instead.
_SCRUB = ("CLOSE ALL; RESET ROLE; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; "
          "UNLISTEN *; SELECT pg_catalog.pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES")
_REGISTRANTS = "SELECT queue_name, registrant FROM pgmq.list_callbacks() ORDER BY queue_name"
_TX_TARGET = 0.05  # seconds a batch statement should last: sizes k from the callbacks' speed
_ISOLATE_SECONDS = 60.0  # after a dispatch error: one message per transaction on that queue
_ERROR_COOLDOWN_MIN = 0.05  # a queue's rest after a dispatch error, doubling while they repeat

_FAILURE_LOG_SECONDS = 10.0  # per queue, at most _FAILURE_LOG_MAX failures logged in this window
_FAILURE_LOG_MAX = 10
_APP_NAME = "pgmq-worker"
_CONNECT_TIMEOUT = 5
_LISTEN_SLICE = 0.25  # how often the listener looks at its stop flag and the queue list
_MAX_WAIT = 1.0  # an idle dispatcher re-checks retirement at least this often

# Scheduler hints: may a queue have work?
_NONE, _POLL, _WORK = 0, 1, 2


@dataclass
class Totals:
    done: int = 0  # callbacks that succeeded (message deleted)
    failed: int = 0  # callbacks that raised (attempt recorded: retried later or dead-lettered)
    errors: int = 0  # dispatch statements (or stream reads/acks) that failed: SQL errors, broken connections
    reconnects: int = 0
    batches: int = 0  # stream batches whose handler and ack committed
    events: int = 0  # the events of those batches
    batches_failed: int = 0  # stream batches whose handler raised (rolled back; back after the lease)
    batches_expired: int = 0  # stream batches whose lease ran out before the ack (rolled back)


class _Scheduler:
    """Which queues may have work, and round robin among them.

    A queue's hint is _WORK after a notification or when a dispatcher found messages in it: any
    idle dispatcher may join until one finds it empty. A _POLL hint (set every naptime) is taken
    by a single dispatcher, so idle polling costs one query per queue per naptime, however many
    dispatchers there are. ``gen`` counts notifications, so that a dispatcher that finds a queue
    empty does not erase a notification that arrived while it was looking.
    """

    def __init__(self, naptime: float, once: bool,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.cond = threading.Condition()
        self._clock = clock  # monotonic seconds (tests pass a fake one)
        self.naptime = naptime
        self.once = once
        self.queues: list[str] = []
        self.stopping = False
        self._hint: dict[str, int] = {}
        self._gen: dict[str, int] = {}
        self._cooldown: dict[str, float] = {}
        self._rr = 0
        self._next_poll = 0.0

    def set_queues(self, queues: Sequence[str]) -> None:
        with self.cond:
            self.queues = list(queues)
            for q in queues:
                self._hint.setdefault(q, _WORK)
                self._gen.setdefault(q, 0)
            for gone in set(self._hint) - set(queues):
                self._hint.pop(gone, None)
                self._gen.pop(gone, None)
                self._cooldown.pop(gone, None)
            self.cond.notify_all()

    def wake(self, queue: str | None = None) -> None:
        """A notification (queue) or a reconnection (None: all queues)."""
        with self.cond:
            for q in ([queue] if queue is not None else self.queues):
                if q in self._hint:
                    self._hint[q] = _WORK
                    self._gen[q] += 1
            self.cond.notify_all()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    def take(self) -> tuple[str, int] | None:
        """The next queue (round robin) that may have work, with its notification count."""
        with self.cond:
            now = self._clock()
            if not self.once and now >= self._next_poll:
                for q in self.queues:
                    if self._hint[q] == _NONE:
                        self._hint[q] = _POLL
                self._next_poll = now + self.naptime
            n = len(self.queues)
            for i in range(n):
                q = self.queues[(self._rr + i) % n]
                if self._hint[q] == _NONE or self._cooldown.get(q, 0.0) > now:
                    continue
                if self._hint[q] == _POLL:
                    self._hint[q] = _NONE
                self._rr = (self._rr + i + 1) % n
                return q, self._gen[q]
            return None

    def wait(self) -> None:
        """Sleep until a notification, the next poll, or stop."""
        with self.cond:
            if self.stopping or self._ready(self._clock()):
                return
            timeout = max(0.0, min(self._next_poll - self._clock(), _MAX_WAIT))
            self.cond.wait(timeout)

    def _ready(self, now: float) -> bool:
        return any(h != _NONE and self._cooldown.get(q, 0.0) <= now for q, h in self._hint.items())

    def has_work(self) -> bool:
        with self.cond:
            return self._ready(self._clock())

    def found_work(self, queue: str) -> None:
        """Messages are there: invite idle dispatchers to help."""
        with self.cond:
            if queue in self._hint and self._hint[queue] != _WORK:
                self._hint[queue] = _WORK
                self.cond.notify_all()

    def empty(self, queue: str, gen: int) -> None:
        with self.cond:
            if queue in self._hint and self._gen[queue] == gen:
                self._hint[queue] = _NONE

    def cool_down(self, queue: str, seconds: float) -> None:
        with self.cond:
            if queue in self._hint:
                self._cooldown[queue] = self._clock() + seconds
                self._hint[queue] = _POLL if not self.once else _NONE


# -- the pool's decisions (pure: the Worker applies them under its lock) --------------------

def _should_grow(busy_since: Sequence[float | None], now: float, start_delay: float,
                 max_workers: int, stopping: bool) -> bool:
    """Add a dispatcher when every one of them has been working for start_delay seconds
    without a break (busy_since: when each one's current stretch of work began, None when idle),
    below max_workers and not stopping."""
    n = len(busy_since)
    if not n or n >= max_workers or stopping:
        return False
    return all(b is not None and now - b >= start_delay for b in busy_since)


def _retirement(*, stopping: bool, once: bool, has_work: bool, idle_for: float,
                idle_timeout: float, pool_size: int, min_workers: int) -> str | None:
    """Whether a dispatcher that found nothing to take leaves the pool: None (it stays),
    "stop" (a stop was requested), "drained" (once mode and no queue may have work) or "idle"
    (a daemon's dispatcher idle for idle_timeout while more than min_workers remain)."""
    if stopping:
        return "stop"
    if once:
        return None if has_work else "drained"
    if idle_for < idle_timeout or pool_size <= min_workers:
        return None
    return "idle"


def _next_backoff(delay: float, max_backoff: float) -> float:
    """The reconnect delay after another failed attempt: doubled, at most max_backoff."""
    return min(delay * 2, max_backoff)


def _jittered(delay: float, r: float) -> float:
    """delay spread over [0.5, 1.5) x delay by r in [0, 1) (random.random())."""
    return delay * (0.5 + r)


def _connect_failed_level(attempt: int) -> int:
    """A long outage stays visible at INFO: attempts 8, 16, 32, ... are warnings."""
    return logging.WARNING if attempt >= 8 and attempt & (attempt - 1) == 0 else logging.DEBUG


def _next_tx_size(used: int, messages: int, seconds: float, cap: int,
                  target: float = _TX_TARGET) -> int:
    """How many messages the next statement dispatches, after one that was given `used` and
    dispatched `messages` in `seconds`: as many as fit in `target` seconds at the time per
    message it took, at most twice `used` (one fast message proves little), within 1..cap."""
    if messages < 1:
        return max(1, min(used, cap))
    per_message = seconds / messages
    fit = int(target / per_message) if per_message > 0 else cap
    return max(1, min(cap, 2 * used, fit))


def _error_cooldown(streak: int, cap: float) -> float:
    """How long a queue rests after its `streak`-th dispatch error in a row: 50 ms, doubling, at
    most cap. A message whose dispatch fails (a statement_timeout in its callback, a lock_timeout
    in the claim) has its attempt counted each time, so prompt retries lead it to the dead-letter
    queue; an error that repeats whatever the message (a missing callback) soon waits the cap."""
    return min(cap, _ERROR_COOLDOWN_MIN * 2 ** max(0, streak - 1))


def _supervisor_tick(start_delay: float) -> float:
    """How often the supervisor looks at the pool: a quarter of start_delay, within 20-250 ms."""
    return min(0.25, max(0.02, start_delay / 4))


def scrub(conn: psycopg.Connection[Any]) -> None:
    """Undo everything a session acting as another role may have been left with (``_SCRUB``);
    on failure the connection is closed (a session that cannot be scrubbed serves nobody)."""
    try:
        conn.execute(_SCRUB)
    except BaseException:
        conn.close()
        raise


class Dispatched(NamedTuple):
    """What one dispatch statement did: callbacks done and failed, whether a call found nothing
    eligible, and (msg_id, error text) of each failure."""

    done: int
    failed: int
    empty: bool
    failures: list[tuple[int, str]]


def dispatch_statement(conn: psycopg.Connection[Any], queue: str, k: int) -> Dispatched:
    """One statement, one transaction: up to k calls of pgmq._dispatch_one_detail(queue),
    stopping at the first NULL."""
    if k == 1:
        outcome, msg_id, error = conn.execute(_DISPATCH_ONE, (queue,)).fetchone()
        return Dispatched(int(outcome == "done"), int(outcome == "failed"), outcome is None,
                          [(msg_id, error)] if outcome == "failed" else [])
    n_done, n_failed, empty, ids, errors = conn.execute(_DISPATCH_MANY, {"q": queue, "k": k}).fetchone()
    return Dispatched(n_done, n_failed, empty, list(zip(ids, errors, strict=True)))


def dispatch_as(conn: psycopg.Connection[Any], login: str, registrant: str, queue: str,
                k: int) -> Dispatched:
    """dispatch_statement in a session acting as the queue's registrant: as it is when the
    registrant is the session's login role, else after SET ROLE and scrubbed at once after
    (whatever the statement did, even when it failed)."""
    if registrant == login:
        return dispatch_statement(conn, queue, k)
    conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(registrant)))
    try:
        return dispatch_statement(conn, queue, k)
    finally:
        scrub(conn)


class _Dispatcher:
    def __init__(self, name: str) -> None:
        self.name = name
        self.thread: threading.Thread | None = None
        self.busy_since: float | None = None  # start of the current stretch of work
        self.last_work = time.monotonic()  # last time a call dispatched a message
        self.tx_size: dict[str, int] = {}  # queue -> messages its next statement may dispatch
        self.login = ""  # the role its connection logged in as


class _Disconnected(Exception):
    pass


class SettingError(ValueError):
    """A Worker setting that cannot work; ``setting`` is the constructor argument's name."""

    def __init__(self, setting: str, message: str) -> None:
        super().__init__(message)
        self.setting = setting


def parse_subscriptions(streams: object) -> list[tuple[str, str]] | None:
    """Stream subscriptions as "STREAM:SUBSCRIPTION" (split at the first colon) or (stream,
    subscription) pairs -> pairs, deduplicated; None for none. SettingError("streams")."""
    if streams is None:
        return None
    if isinstance(streams, (str, bytes)) or not isinstance(streams, Iterable):
        raise SettingError("streams", f"streams must be a list of STREAM:SUBSCRIPTION (or "
                                      f"(stream, subscription) pairs), got {type(streams).__name__} "
                                      f"{streams!r:.60}")
    pairs: list[tuple[str, str]] = []
    for i, item in enumerate(streams):
        if isinstance(item, str):
            stream, sep, subscription = item.partition(":")
            if not sep:
                raise SettingError("streams", f"streams[{i}] must be STREAM:SUBSCRIPTION, got {item!r:.60}")
        elif isinstance(item, tuple) and len(item) == 2:
            stream, subscription = item
        else:
            raise SettingError("streams", f"streams[{i}] must be STREAM:SUBSCRIPTION or a (stream, "
                                          f"subscription) pair, got {type(item).__name__} {item!r:.60}")
        try:
            validate.queue_name(f"streams[{i}] (stream)", stream)
            validate.text(f"streams[{i}] (subscription)", subscription, empty=False)
        except (TypeError, ValueError) as exc:
            raise SettingError("streams", str(exc)) from None
        pairs.append((stream, subscription))
    return list(dict.fromkeys(pairs)) or None


def load_handler(spec: object) -> BatchHandler:
    """"package.module:function" (the function may be a dotted attribute path) -> the callable;
    SettingError("handler") when it cannot be imported or is not callable."""
    text = spec if isinstance(spec, str) and "\x00" not in spec else ""
    module_name, sep, attr = text.partition(":")
    if not sep or not module_name or not attr:
        raise SettingError("handler", f"handler must be MODULE:FUNCTION (e.g. myapp.billing:handle), "
                                      f"got {spec!r:.60}")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # not found, or its code failed at import: say which
        raise SettingError("handler", f"handler {text!r}: cannot import {module_name!r}: "
                                      f"{type(exc).__name__}: {exc}") from None
    try:
        for part in attr.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise SettingError("handler", f"handler {text!r}: {module_name!r} has no {attr!r}") from None
    if not callable(target):
        raise SettingError("handler", f"handler {text!r} is not callable ({type(target).__name__})")
    return target


def check_settings(dsn: object, queues: object = None, *, min_workers: object = MIN_WORKERS,
                   max_workers: object = MAX_WORKERS, start_delay: object = START_DELAY,
                   idle_timeout: object = IDLE_TIMEOUT, naptime_ms: object = NAPTIME_MS,
                   batch: object = BATCH, tx_batch: object = TX_BATCH,
                   refresh_interval: object = REFRESH_INTERVAL, max_backoff: object = 5.0,
                   streams: object = None, handler: object = None,
                   stream_lease: object = STREAM_LEASE,
                   stream_consumers: object = STREAM_CONSUMERS) -> list[str] | None:
    """Raise SettingError for the first setting that cannot work (what `Worker(...)` and
    `pgmq-build worker` accept), without connecting; return the queues, deduplicated."""
    checks: list[tuple[str, Callable[[], object]]] = [
        ("stream_lease", lambda: validate.integer("stream_lease", stream_lease, 1)),
        ("stream_consumers", lambda: validate.integer("stream_consumers", stream_consumers, 1, 100)),
        ("min_workers", lambda: validate.integer("min_workers", min_workers, 1)),
        ("max_workers", lambda: validate.integer("max_workers", max_workers, 1)),
        ("start_delay", lambda: validate.seconds("start_delay", start_delay)),
        ("idle_timeout", lambda: validate.seconds("idle_timeout", idle_timeout)),
        ("naptime_ms", lambda: validate.integer("naptime_ms", naptime_ms, 1, NAPTIME_MS_MAX)),
        ("batch", lambda: validate.integer("batch", batch, 1)),
        ("tx_batch", lambda: validate.integer("tx_batch", tx_batch, 1, TX_BATCH_MAX)),
        ("refresh_interval", lambda: validate.seconds("refresh_interval", refresh_interval, 0,
                                                      inclusive=False)),
        ("max_backoff", lambda: validate.seconds("max_backoff", max_backoff, 0, inclusive=False)),
    ]
    for setting, check in checks:
        try:
            check()
        except (TypeError, ValueError) as exc:
            raise SettingError(setting, str(exc)) from None
    if max_workers < min_workers:  # type: ignore[operator]
        raise SettingError("max_workers", f"max_workers must be at least min_workers "
                                          f"({min_workers}), got {max_workers}")
    try:
        conninfo_to_dict(validate.text("dsn", dsn))
    except (TypeError, ValueError) as exc:
        raise SettingError("dsn", str(exc)) from None
    except psycopg.ProgrammingError as exc:
        raise SettingError("dsn", f"dsn is not a libpq connection string or URI: "
                                  f"{str(exc).strip()}") from None
    if parse_subscriptions(streams) is not None:
        if not callable(handler):
            raise SettingError("handler", "streams need a handler: a callable handler(batch, conn) "
                                          f"(--handler MODULE:FUNCTION), got {handler!r:.60}")
    elif handler is not None:
        raise SettingError("handler", "a handler runs stream batches: give the streams "
                                      "(--stream STREAM:SUBSCRIPTION) it serves")
    if queues is None:
        return None
    if isinstance(queues, (str, bytes)) or not isinstance(queues, Iterable):
        raise SettingError("queues", f"queues must be a list of queue names or None, got "
                                     f"{type(queues).__name__} {queues!r:.60}")
    names = list(queues)
    for i, q in enumerate(names):
        try:
            validate.queue_name(f"queues[{i}]", q)
        except (TypeError, ValueError) as exc:
            raise SettingError("queues", str(exc)) from None
    return list(dict.fromkeys(names)) or None


class Worker:
    """Dispatch messages of queues with callbacks to their procedures (see the module doc)."""

    def __init__(self, dsn: str, queues: Iterable[str] | None = None, *,
                 min_workers: int = MIN_WORKERS, max_workers: int = MAX_WORKERS,
                 start_delay: float = START_DELAY, idle_timeout: float = IDLE_TIMEOUT,
                 naptime_ms: int = NAPTIME_MS, batch: int = BATCH, tx_batch: int = TX_BATCH,
                 refresh_interval: float = REFRESH_INTERVAL, max_backoff: float = 5.0,
                 streams: Iterable[str | tuple[str, str]] | None = None,
                 handler: BatchHandler | None = None, stream_lease: int = STREAM_LEASE,
                 stream_consumers: int = STREAM_CONSUMERS,
                 logger: logging.Logger | None = None) -> None:
        # bad settings raise SettingError here: nothing connects, no thread starts
        self.fixed_queues = check_settings(
            dsn, queues, min_workers=min_workers, max_workers=max_workers, start_delay=start_delay,
            idle_timeout=idle_timeout, naptime_ms=naptime_ms, batch=batch, tx_batch=tx_batch,
            refresh_interval=refresh_interval, max_backoff=max_backoff, streams=streams,
            handler=handler, stream_lease=stream_lease, stream_consumers=stream_consumers)
        self.streams = parse_subscriptions(streams) or []
        self.handler = handler
        self.stream_lease = stream_lease
        self.stream_consumers = stream_consumers
        # given streams and no queues, serve the streams only (not every queue's callback)
        self.serve_queues = not self.streams or self.fixed_queues is not None
        self.dsn = dsn
        self.min_workers = min_workers
        self.max_workers = max_workers
        self.start_delay = start_delay
        self.idle_timeout = idle_timeout
        self.naptime = naptime_ms / 1000.0
        self.batch = batch
        self.tx_batch = tx_batch
        self.refresh_interval = refresh_interval
        self.max_backoff = max_backoff
        self.logger = logger or log

        self._stop = threading.Event()
        self._lock = threading.Lock()  # pool and totals
        self._totals = Totals()
        self._queue_totals: dict[str, list[int]] = {}  # queue -> [done, failed] (metrics)
        # (stream, subscription) -> [batches, events, failed, expired] (metrics)
        self._stream_totals: dict[tuple[str, str], list[int]] = {}
        self._consumers = 0  # stream consumer threads running
        self._pool: list[_Dispatcher] = []
        self._isolate_until: dict[str, float] = {}  # queue -> one message per statement until
        self._error_streak: dict[str, int] = {}  # queue -> dispatch errors in a row
        self._seq = 0
        self._threads: list[threading.Thread] = []
        self._sched = _Scheduler(self.naptime, once=False)
        self._queues_version = 0
        self._registrants: dict[str, str] = {}  # queue -> the role its callback runs as
        # queue -> [window start, failures logged in it, failures suppressed in it]
        self._failure_log: dict[str, list[float | int]] = {}
        self._started_at = 0.0
        self._mode: str | None = None
        self._summary_logged = False
        self.peak_workers = 0

    # -- public API ------------------------------------------------------------------------

    @property
    def totals(self) -> Totals:
        with self._lock:
            return Totals(**asdict(self._totals))

    def queue_totals(self) -> dict[str, tuple[int, int]]:
        """queue -> (done, failed) so far, as counted in totals."""
        with self._lock:
            return {q: (d, f) for q, (d, f) in self._queue_totals.items()}

    def stream_totals(self) -> dict[tuple[str, str], tuple[int, int, int, int]]:
        """(stream, subscription) -> (batches, events, batches failed, batches expired) so far,
        as counted in totals."""
        with self._lock:
            return {k: (b, e, f, x) for k, (b, e, f, x) in self._stream_totals.items()}

    @property
    def workers(self) -> int:
        """How many dispatcher threads are running now."""
        with self._lock:
            return len(self._pool)

    @property
    def consumers(self) -> int:
        """How many stream consumer threads are running now."""
        with self._lock:
            return self._consumers

    @property
    def queues(self) -> list[str]:
        with self._sched.cond:
            return list(self._sched.queues)

    def start(self) -> Worker:
        """Start the listener, the supervisor and min_workers dispatchers; return at once.
        Raises psycopg.Error when the database cannot be reached at all."""
        self._begin("daemon", once=False)
        if self.serve_queues:
            self._spawn_thread(self._run_listener, "pgmq-worker-listener")
            self._spawn_thread(self._run_supervisor, "pgmq-worker-supervisor")
            for _ in range(self.min_workers):
                self._add_dispatcher()
        self._start_consumers()
        return self

    def request_stop(self) -> None:
        """Stop taking new messages; in-flight callbacks go on. Safe from any thread."""
        if not self._stop.is_set():
            self._stop.set()
            self._sched.stop()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a stop is requested (True) or timeout passes (False)."""
        return self._stop.wait(timeout)

    def stop(self, timeout: float | None = None) -> Totals:
        """Stop taking messages, wait for in-flight callbacks (up to timeout), close the
        connections and log the summary. Returns the totals."""
        self.request_stop()
        self._join(timeout)
        self._log_summary()
        return self.totals

    def run_until_idle(self, timeout: float | None = None) -> Totals:
        """Dispatch with min_workers threads (more under load, as in start()) until no queue has
        an eligible message, then return the totals. No listener: nothing new is awaited."""
        self._begin("once", once=True)
        if self.serve_queues:
            self._spawn_thread(self._run_supervisor, "pgmq-worker-supervisor")
            for _ in range(self.min_workers):
                self._add_dispatcher()
        self._start_consumers()
        deadline = None if timeout is None else time.monotonic() + timeout
        while (self.workers or self.consumers) and not self._stop.is_set():
            if deadline is not None and time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        return self.stop()

    def __enter__(self) -> Worker:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- plumbing --------------------------------------------------------------------------

    def _emit(self, level: int, event: str, **fields: Any) -> None:
        self.logger.log(level, event, extra={"fields": fields})

    def _begin(self, mode: str, once: bool) -> None:
        if self._mode is not None:
            raise RuntimeError("a Worker runs once: create a new one")
        self._mode = mode
        self._sched = _Scheduler(self.naptime, once=once)
        self._started_at = time.monotonic()
        # both raise when the server is unreachable, SettingError for what does not exist
        queues = self._load_queues(first=True) if self.serve_queues else []
        self._check_streams()
        self._sched.set_queues(queues)
        self._emit(logging.INFO, "started", mode=mode, queues=queues,
                   streams=[f"{s}:{u}" for s, u in self.streams] or None,
                   min_workers=self.min_workers, max_workers=self.max_workers,
                   start_delay=self.start_delay, idle_timeout=self.idle_timeout,
                   naptime_ms=round(self.naptime * 1000), batch=self.batch,
                   tx_batch=self.tx_batch)

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.dsn, autocommit=True, connect_timeout=_CONNECT_TIMEOUT,
                               fallback_application_name=_APP_NAME)

    def _reconnect(self, who: str, replacing: bool = False) -> psycopg.Connection[Any] | None:
        """Connect, retrying with exponential backoff and jitter; None if stopped meanwhile.
        ``replacing``: a connection of this thread was lost (or dropped after an error), so the
        new one counts as a reconnect even when the first attempt works (after a failover or
        a pg_terminate_backend it usually does)."""
        delay, attempts, began = 0.1, 0, time.monotonic()
        while not self._stop.is_set():
            attempts += 1
            try:
                conn = self._connect()
            except psycopg.Error as exc:
                self._emit(_connect_failed_level(attempts), "connect_failed", worker=who,
                           attempt=attempts, error=_first_line(exc))
                self._stop.wait(_jittered(delay, random.random()))
                delay = _next_backoff(delay, self.max_backoff)
                continue
            if replacing or attempts > 1:
                with self._lock:
                    self._totals.reconnects += 1
                self._emit(logging.INFO, "reconnected", worker=who, attempts=attempts,
                           seconds=round(time.monotonic() - began, 3))
            return conn
        return None

    def _spawn_thread(self, target: Any, name: str, *args: Any) -> threading.Thread:
        # daemon threads: a second SIGTERM/SIGINT may end the process without waiting for them
        t = threading.Thread(target=target, args=args, name=name, daemon=True)
        self._threads.append(t)
        t.start()
        return t

    def _join(self, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                alive = [t for t in self._threads if t.is_alive()]
            if not alive:
                return
            for t in alive:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                t.join(left)
            if deadline is not None and time.monotonic() >= deadline:
                self._emit(logging.WARNING, "stop_timeout", threads=[t.name for t in alive if t.is_alive()])
                return

    def _log_summary(self) -> None:
        self._log_suppressed()
        with self._lock:
            if self._summary_logged:
                return
            self._summary_logged = True
            t = Totals(**asdict(self._totals))
        stream_fields = dict(batches=t.batches, events=t.events, batches_failed=t.batches_failed,
                             batches_expired=t.batches_expired) if self.streams else {}
        self._emit(logging.INFO, "summary", mode=self._mode, done=t.done, failed=t.failed,
                   errors=t.errors, reconnects=t.reconnects, peak_workers=self.peak_workers,
                   **stream_fields, seconds=round(time.monotonic() - self._started_at, 3))

    def _load_queues(self, first: bool = False) -> list[str]:
        """The queues to serve: the given ones, else every queue with a callback. At the first
        load (before any thread starts) a given queue that does not exist raises SettingError."""
        with self._connect() as conn:
            registrants = dict(conn.execute(_REGISTRANTS).fetchall())
            registered = list(registrants)
            existing = set() if self.fixed_queues is None or not first else {
                r[0] for r in conn.execute("SELECT queue_name FROM pgmq.list_queues()")}
        with self._lock:
            self._registrants = registrants
        if self.fixed_queues is None:
            return registered
        missing = [q for q in self.fixed_queues if q not in existing]
        if first and missing:
            raise SettingError("queues", f"no such queue: {', '.join(map(repr, missing))} "
                                         "(queue names are case-sensitive)")
        for q in self.fixed_queues:
            if q not in registered:
                self._emit(logging.WARNING, "no_callback", queue=q)
        return list(self.fixed_queues)

    def _check_streams(self) -> None:
        """Before any thread starts: every subscription to serve exists (SettingError)."""
        if not self.streams:
            return
        with self._connect() as conn:
            known = set(conn.execute("SELECT stream_name, subscription_name FROM pgmq.stream_info()")
                        .fetchall())
        missing = [f"{s}:{u}" for s, u in self.streams if (s, u) not in known]
        if missing:
            raise SettingError("streams", f"no such subscription: {', '.join(map(repr, missing))} "
                                          "(pgmq.subscribe(stream, subscription) first; names are "
                                          "case-sensitive)")

    # -- supervisor: queue list and pool growth -------------------------------------------

    def _run_supervisor(self) -> None:
        next_refresh = time.monotonic() + self.refresh_interval
        tick = _supervisor_tick(self.start_delay)
        while not self._stop.wait(tick):
            now = time.monotonic()
            if self.fixed_queues is None and now >= next_refresh and self._mode == "daemon":
                next_refresh = now + self.refresh_interval
                self._refresh_queues()
            self._maybe_grow(now)

    def _refresh_queues(self) -> None:
        try:
            queues = self._load_queues()
        except psycopg.Error as exc:
            self._emit(logging.WARNING, "refresh_failed", error=_first_line(exc))
            return
        if queues != self.queues:
            added = sorted(set(queues) - set(self.queues))
            removed = sorted(set(self.queues) - set(queues))
            self._sched.set_queues(queues)
            with self._lock:
                self._queues_version += 1
            self._emit(logging.INFO, "queues", queues=queues, added=added, removed=removed)

    def _maybe_grow(self, now: float) -> None:
        with self._lock:
            if not _should_grow([d.busy_since for d in self._pool], now, self.start_delay,
                                self.max_workers, self._stop.is_set()):
                return
        self._add_dispatcher(reason="busy")

    def _add_dispatcher(self, reason: str | None = None) -> None:
        with self._lock:
            self._seq += 1
            d = _Dispatcher(f"w{self._seq}")
            self._pool.append(d)
            n = len(self._pool)
            self.peak_workers = max(self.peak_workers, n)
        d.thread = self._spawn_thread(self._run_dispatcher, f"pgmq-worker-{d.name}", d)
        if reason:
            self._emit(logging.INFO, "scale_up", worker=d.name, workers=n)

    def _retire(self, d: _Dispatcher) -> bool:
        """Leave the pool when idle too long and above min_workers (or always, in once mode
        when nothing is left, or when stopping)."""
        with self._lock:
            once = self._mode == "once"
            verdict = _retirement(
                stopping=self._stop.is_set(), once=once,
                has_work=once and self._sched.has_work(),
                idle_for=time.monotonic() - d.last_work, idle_timeout=self.idle_timeout,
                pool_size=len(self._pool), min_workers=self.min_workers)
            if verdict is None:
                return False
            self._pool.remove(d)
            if verdict == "idle":
                self._emit(logging.INFO, "scale_down", worker=d.name, workers=len(self._pool))
            return True

    # -- dispatchers ----------------------------------------------------------------------

    def _run_dispatcher(self, d: _Dispatcher) -> None:
        conn: psycopg.Connection[Any] | None = None
        lost = False  # conn is None because a connection was dropped (not the first one)
        try:
            while not self._stop.is_set():
                if conn is None:
                    conn = self._reconnect(d.name, replacing=lost)
                    if conn is None:
                        break
                    lost = True
                    try:
                        d.login = conn.execute("SELECT session_user").fetchone()[0]
                    except psycopg.Error:
                        _close(conn)
                        conn = None
                        continue
                    lost = False
                pick = self._sched.take()
                if pick is None:
                    d.busy_since = None
                    if self._retire(d):
                        return
                    self._sched.wait()
                    continue
                if d.busy_since is None:
                    d.busy_since = time.monotonic()
                try:
                    self._turn(conn, d, *pick)
                except _Disconnected:
                    _close(conn)
                    conn, lost = None, True
                except Exception:  # a bug of ours: log it, start afresh, keep serving
                    self.logger.exception("internal_error", extra={"fields": {"worker": d.name}})
                    _close(conn)
                    conn, lost = None, True
                    self._stop.wait(1.0)
        finally:
            _close(conn)
            with self._lock:
                if d in self._pool:
                    self._pool.remove(d)

    def _turn(self, conn: psycopg.Connection[Any], d: _Dispatcher, queue: str, gen: int) -> None:
        """Up to `batch` messages of one queue, up to tx_batch of them per statement (one
        transaction), counted once each statement has committed."""
        done = failed = 0
        began = time.monotonic()
        confirm = self._sched.once  # in once mode, NULL twice in a row before calling it drained
        try:
            while done + failed < self.batch and not self._stop.is_set():
                k = self._tx_size(d, queue, self.batch - done - failed)
                started = time.monotonic()
                try:
                    n_done, n_failed, empty = self._dispatch(conn, d, queue, k)
                except psycopg.Error as exc:
                    with self._lock:
                        self._totals.errors += 1
                        if self.tx_batch > 1:
                            # the whole statement was rolled back: let the culprit fail alone
                            self._isolate_until[queue] = time.monotonic() + _ISOLATE_SECONDS
                    if conn.broken or conn.closed:
                        self._emit(logging.WARNING, "disconnected", worker=d.name, queue=queue,
                                   tx_batch=k, error=_first_line(exc))
                        self._sched.wake(queue)  # somebody must look again
                        raise _Disconnected from exc
                    with self._lock:
                        streak = self._error_streak[queue] = self._error_streak.get(queue, 0) + 1
                    self._emit(logging.ERROR, "dispatch_error", worker=d.name, queue=queue,
                               tx_batch=k, sqlstate=exc.sqlstate, error=_first_line(exc))
                    self._sched.cool_down(queue, _error_cooldown(
                        streak, min(self.refresh_interval, 5.0)))
                    return
                # committed (autocommit: the statement is the transaction)
                if self._error_streak.get(queue):
                    with self._lock:
                        self._error_streak.pop(queue, None)
                n = n_done + n_failed
                if n:
                    d.tx_size[queue] = _next_tx_size(k, n, time.monotonic() - started,
                                                     self.tx_batch)
                    with self._lock:
                        self._totals.done += n_done
                        self._totals.failed += n_failed
                        per_queue = self._queue_totals.setdefault(queue, [0, 0])
                        per_queue[0] += n_done
                        per_queue[1] += n_failed
                    first = done + failed == 0
                    done += n_done
                    failed += n_failed
                    d.last_work = time.monotonic()
                    confirm = self._sched.once
                    if first:
                        self._sched.found_work(queue)
                if not empty:
                    continue
                if n:
                    # NULL after messages of the same transaction: what that transaction failed
                    # or settled is only eligible for the next one. Look again.
                    continue
                # NULL may mean the call only recorded a rolled-back attempt or dead-lettered
                # something (both skip the message in that transaction): in once mode look
                # again before calling the queue drained; a daemon polls again anyway.
                if confirm:
                    confirm = False
                    continue
                self._sched.empty(queue, gen)
                return
            if done + failed >= self.batch:
                self._sched.found_work(queue)  # a full batch: more is likely waiting
        finally:
            if done or failed:
                self._emit(logging.INFO, "dispatched", worker=d.name, queue=queue, done=done,
                           failed=failed, ms=round((time.monotonic() - began) * 1000))

    def _tx_size(self, d: _Dispatcher, queue: str, left: int) -> int:
        """Messages the next statement on `queue` may dispatch (at most `left`, the rest of
        the turn): 1 while the queue is isolated after an error, else this dispatcher's size
        for it (starting at 1; see _next_tx_size)."""
        if self.tx_batch == 1:
            return 1
        with self._lock:
            until = self._isolate_until.get(queue)
            if until is not None:
                if time.monotonic() < until:
                    return 1
                del self._isolate_until[queue]
        return max(1, min(d.tx_size.get(queue, 1), left))

    def _dispatch(self, conn: psycopg.Connection[Any], d: _Dispatcher, queue: str,
                  k: int) -> tuple[int, int, bool]:
        """One dispatch statement on `queue` in a session acting as its registrant (dispatch_as);
        a queue whose registrant is not known yet is dispatched as the login role (and refused
        with 42501 by _dispatch_one_detail when that is not the registrant)."""
        with self._lock:
            registrant = self._registrants.get(queue, d.login)
        result = dispatch_as(conn, d.login, registrant, queue, k)
        if result.failures:
            self._note_failures(d, queue, result.failures)
        return result.done, result.failed, result.empty

    def _note_failures(self, d: _Dispatcher, queue: str, failures: list[tuple[int, str]]) -> None:
        """A WARNING `callback_failed` per failure with its msg_id and error, at most
        _FAILURE_LOG_MAX per queue every _FAILURE_LOG_SECONDS: a callback that keeps failing is
        visible, with its causes, without flooding the log. The failures past that are counted
        and said (`callback_failures_suppressed`) when the window ends, or at stop."""
        now = time.monotonic()
        with self._lock:
            window = self._failure_log.setdefault(queue, [now, 0, 0])
            ended = self._end_failure_window(window, now)
            logged = []
            for msg_id, error in failures:
                if window[1] < _FAILURE_LOG_MAX:
                    window[1] += 1
                    logged.append((msg_id, error))
                else:
                    window[2] += 1
        if ended:
            self._emit(logging.WARNING, "callback_failures_suppressed", queue=queue, suppressed=ended,
                       seconds=_FAILURE_LOG_SECONDS)
        for msg_id, error in logged:
            self._emit(logging.WARNING, "callback_failed", worker=d.name, queue=queue, msg_id=msg_id,
                       error=error)

    @staticmethod
    def _end_failure_window(window: list[float | int], now: float) -> int:
        """Start a new window when the last one is over; returns the failures it suppressed."""
        if now - window[0] < _FAILURE_LOG_SECONDS:
            return 0
        suppressed = int(window[2])
        window[:] = [now, 0, 0]
        return suppressed

    def _log_suppressed(self) -> None:
        """At stop: what the windows still open suppressed."""
        with self._lock:
            pending = {q: int(w[2]) for q, w in self._failure_log.items() if w[2]}
            self._failure_log.clear()
        for queue, n in sorted(pending.items()):
            self._emit(logging.WARNING, "callback_failures_suppressed", queue=queue, suppressed=n,
                       seconds=_FAILURE_LOG_SECONDS)

    # -- stream consumers -----------------------------------------------------------------

    def _start_consumers(self) -> None:
        for stream, subscription in self.streams:
            for i in range(self.stream_consumers):
                with self._lock:
                    self._consumers += 1
                self._spawn_thread(self._run_consumer, f"pgmq-worker-{stream}:{subscription}#{i + 1}",
                                   stream, subscription, f"{stream}:{subscription}#{i + 1}")

    def _run_consumer(self, stream: str, subscription: str, name: str) -> None:
        """Lease a batch, run the handler and the ack in one transaction; poll every naptime
        while nothing is new; in once mode stop at the first read that finds nothing (or
        error). Stops between batches: the batch in flight is always finished."""
        once = self._mode == "once"
        conn: psycopg.Connection[Any] | None = None
        lost = False  # conn is None because a connection was dropped (not the first one)
        streak = 0  # errors in a row: the rest after one doubles from 50 ms to 5 s
        try:
            while not self._stop.is_set():
                if conn is None:
                    conn = self._reconnect(name, replacing=lost)
                    if conn is None:
                        break
                    lost = False
                began = time.monotonic()
                batch = None
                try:
                    batch = stream_batches.read_batch(conn, stream, subscription, self.stream_lease)
                    if batch is None:
                        if once:
                            break
                        self._stop.wait(self.naptime)
                        continue
                    outcome, failure = stream_batches.handle_batch(conn, batch, self.handler)  # type: ignore[arg-type]
                except psycopg.Error as exc:
                    with self._lock:
                        self._totals.errors += 1
                    streak += 1
                    where = dict(worker=name, stream=stream, subscription=subscription,
                                 batch_id=None if batch is None else batch.batch_id,
                                 error=_first_line(exc))
                    if conn.broken or conn.closed:
                        self._emit(logging.WARNING, "disconnected", **where)
                        _close(conn)
                        conn, lost = None, True
                    else:
                        self._emit(logging.ERROR, "stream_error", sqlstate=exc.sqlstate, **where)
                    if once:
                        break
                    self._stop.wait(_error_cooldown(streak, min(self.refresh_interval, 5.0)))
                    continue
                except Exception:  # a bug of ours: log it, start afresh, keep serving
                    self.logger.exception("internal_error", extra={"fields": {"worker": name}})
                    _close(conn)
                    conn, lost = None, True
                    self._stop.wait(1.0)
                    continue
                streak = 0
                self._count_batch(stream, subscription, batch, outcome)
                fields = dict(worker=name, stream=stream, subscription=subscription,
                              batch_id=batch.batch_id, events=len(batch),
                              ms=round((time.monotonic() - began) * 1000))
                if outcome == stream_batches.DONE:
                    self._emit(logging.INFO, "stream_batch", **fields)
                else:
                    # failed: back after the lease; expired: another consumer has it
                    self.logger.log(logging.WARNING, f"stream_batch_{outcome}",
                                    extra={"fields": {**fields, "lease_seconds": self.stream_lease,
                                                      "error": _first_line(failure) if failure else None}},
                                    exc_info=failure if outcome == stream_batches.FAILED else None)
        finally:
            _close(conn)
            with self._lock:
                self._consumers -= 1

    def _count_batch(self, stream: str, subscription: str, batch: stream_batches.StreamBatch,
                     outcome: str) -> None:
        with self._lock:
            per = self._stream_totals.setdefault((stream, subscription), [0, 0, 0, 0])
            if outcome == stream_batches.DONE:
                self._totals.batches += 1
                self._totals.events += len(batch)
                per[0] += 1
                per[1] += len(batch)
            elif outcome == stream_batches.FAILED:
                self._totals.batches_failed += 1
                per[2] += 1
            else:
                self._totals.batches_expired += 1
                per[3] += 1

    # -- listener -------------------------------------------------------------------------

    def _run_listener(self) -> None:
        conn: psycopg.Connection[Any] | None = None
        channels: dict[str, str] = {}  # channel -> queue
        version = -1
        lost = False  # conn is None because a connection was dropped (not the first one)
        try:
            while not self._stop.is_set():
                if conn is None:
                    conn = self._reconnect("listener", replacing=lost)
                    if conn is None:
                        break
                    channels, version, lost = {}, -1, False
                try:
                    with self._lock:
                        current = self._queues_version
                    if version != current:
                        channels = self._sync_listen(conn, channels)
                        version = current
                        self._sched.wake()  # notifications may have been missed meanwhile
                    for n in conn.notifies(timeout=_LISTEN_SLICE):
                        queue = channels.get(n.channel)
                        if queue is not None:
                            self._sched.wake(queue)
                except psycopg.Error as exc:
                    if conn.broken or conn.closed:
                        self._emit(logging.WARNING, "disconnected", worker="listener",
                                   error=_first_line(exc))
                        _close(conn)
                        conn, lost = None, True
                    else:
                        self._emit(logging.ERROR, "listener_error", sqlstate=exc.sqlstate,
                                   error=_first_line(exc))
                        self._stop.wait(1.0)
        finally:
            _close(conn)

    def _sync_listen(self, conn: psycopg.Connection[Any], channels: dict[str, str]) -> dict[str, str]:
        queues = self.queues
        wanted = {f"pgmq.q_{q}.INSERT": q for q in queues}
        for ch in set(channels) - set(wanted):
            conn.execute(sql.SQL("UNLISTEN {}").format(sql.Identifier(ch)))
        enabled = {r[0] for r in conn.execute("SELECT queue_name FROM pgmq.list_notify_insert_throttles()")}
        for ch, q in wanted.items():
            if ch not in channels:
                conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(ch)))
            if q not in enabled:
                try:
                    conn.execute("SELECT pgmq.enable_notify_insert(%s, 0)", (q,))
                except psycopg.Error as exc:
                    if conn.broken or conn.closed:
                        raise
                    self._emit(logging.WARNING, "notify_enable_failed", queue=q,
                               sqlstate=exc.sqlstate, error=_first_line(exc))
                else:
                    self._emit(logging.INFO, "notify_enabled", queue=q, throttle_ms=0)
        return wanted


def _close(conn: psycopg.Connection[Any] | None) -> None:
    if conn is not None:
        try:
            conn.close()
        except Exception:  # closing a broken connection: nothing left to do
            pass


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- logging and the command line --------------------------------------------------------------

class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, event, then the record's fields."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
        }
        for key, value in getattr(record, "fields", {}).items():
            if value is not None:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class TextFormatter(logging.Formatter):
    """`ts level event key=value ...`; values (queue names, callbacks' errors) with control
    characters escaped, so a log read in a terminal shows one line per record."""

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds")
        parts = [ts, record.levelname.lower(), record.getMessage()]
        parts += [f"{k}={v}" for k, v in getattr(record, "fields", {}).items() if v is not None]
        text = printable(" ".join(parts))
        if record.exc_info:
            text += "\n" + printable(self.formatException(record.exc_info), lines=True)
        return text


def run_cli(dsn: str, queues: Sequence[str] = (), *, once: bool = False,
            log_format: str = "json", metrics_bind: str | None = None, **options: Any) -> int:
    """What `pgmq-build worker` does: log to stderr, run until SIGTERM/SIGINT (or, with once,
    until idle), return the exit code. A second signal exits at once (status 1): the server
    rolls the in-flight messages back, and the next dispatch counts the attempt. metrics_bind
    (HOST:PORT) serves /metrics: the queue series and the worker's counters."""
    log_handler = logging.StreamHandler(sys.stderr)
    log_handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    log.handlers[:] = [log_handler]
    log.setLevel(logging.INFO)
    log.propagate = False

    try:
        worker = Worker(dsn, list(queues) or None, **options)
    except SettingError as exc:
        log.error("bad_options", extra={"fields": {"setting": exc.setting, "error": str(exc)}})
        return 2
    try:  # a database without pgmq is a mistake to say now; a server down is reported below
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            if not has_pgmq(conn):
                log.error("not_installed", extra={"fields": {"error": NOT_INSTALLED}})
                return 1
    except psycopg.OperationalError:
        pass
    stop_metrics: Callable[[], None] | None = None
    if metrics_bind:
        from .ops.exits import OpsError

        try:
            from .ops.metrics import serve_worker
        except ImportError as exc:  # the [ops] extra is optional: the worker runs without /metrics
            missing = missing_extra(exc, "the worker's /metrics (--metrics-bind)")
            if missing is None:
                raise
            worker._emit(logging.WARNING, "metrics_off", error=str(missing))
        else:
            try:
                stop_metrics = serve_worker(worker, dsn, metrics_bind)
            except OpsError as exc:
                log.error("bad_options", extra={"fields": {"error": exc.message}})
                return 2
            worker._emit(logging.INFO, "metrics", url=f"http://{metrics_bind}/metrics")

    signals = 0

    def on_signal(signum: int, frame: object) -> None:
        nonlocal signals
        signals += 1
        if signals > 1:
            os.write(2, b'{"level": "error", "event": "forced_exit"}\n')
            os._exit(1)
        # Logging and locks are not safe inside a signal handler: hand over to a thread.
        threading.Thread(target=_stop_on_signal, args=(worker, signal.Signals(signum).name),
                         daemon=True).start()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if once:
            totals = worker.run_until_idle()
            return 1 if totals.errors else 0
        worker.start()
        while not worker.wait(0.5):
            pass
        worker.stop()
        return 0
    except SettingError as exc:  # a --queue or --stream that does not exist (before any thread starts)
        log.error("bad_options", extra={"fields": {"setting": exc.setting, "error": str(exc)}})
        return 2
    except psycopg.Error as exc:
        if pgmq_missing(exc):
            log.error("not_installed", extra={"fields": {"error": NOT_INSTALLED}})
        else:
            log.error("cannot_connect", extra={"fields": {"error": _first_line(exc)}})
        return 1
    finally:
        if stop_metrics is not None:
            stop_metrics()
        for s, h in previous.items():
            signal.signal(s, h)


def _stop_on_signal(worker: Worker, name: str) -> None:
    worker._emit(logging.INFO, "stopping", signal=name)
    worker.request_stop()
