"""The load of a chaos scenario: paced producers, transactional consumers, the worker and a
Client.consume loop, all retrying through faults and writing what they saw into a ledger.Book;
with Settings.spark also a Spark structured streaming query (spark_query.py, restarted by its
supervisor when a fault kills it).

Every client connects with ``application_name`` ``chaos-<role>-<n>`` (the worker:
``pgmq-worker``), so that faults can pick their victims. A client whose connection breaks
reconnects with a short backoff; an error the server raised rolls its transaction back and the
client goes on. Throughput is counted per second in a Meter: messages whose send committed,
and messages whose consumption committed (consumers, worker callbacks, Client acks); the Spark
query's are apart ('spark_produced', 'spark'), because it consumes in micro-batches.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pgmq_build.client import Client
from pgmq_build.worker import Worker

from .ledger import DELIVERED_NOTICE, QUEUES, SLOW_SECONDS, SPARK_QUEUE, Book

VT = 30  # the consumers' lease: never reached, read and delete share a transaction
CLIENT_VT = 3  # Client.consume acknowledges in another transaction: a lost ack returns soon
CONNECT_TIMEOUT = 3
WARM_TIMEOUT = 180.0  # Spark's start on 2 shared cores: measured 10-45 s
WARM_BACKLOG_SECONDS = 2.0  # the Spark query keeps up: at most this many seconds of its messages


@dataclass
class Settings:
    rate: float = 150.0  # messages a second, all producers together
    producers: int = 2  # producer 0 sends one message per pgmq.send, the others send_batch
    batch: int = 5  # send_batch size, and the consumers' read qty
    consumers: int = 2
    poison: float = 0.01  # share of messages that always fail
    worker_min: int = 2
    worker_max: int = 3
    spark: bool = False  # a Spark streaming query on its own queue (spark_query.py)


class Meter:
    """Per-second counts since t0, by kind ('produced', 'consumed')."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self._counts: Counter[tuple[str, int]] = Counter()
        self._lock = threading.Lock()

    def add(self, kind: str, n: int = 1) -> None:
        if n:
            with self._lock:
                self._counts[(kind, int(time.monotonic() - self.t0))] += n

    def now(self) -> float:
        return time.monotonic() - self.t0

    def total(self, kind: str) -> int:
        with self._lock:
            return sum(n for (k, _), n in self._counts.items() if k == kind)

    def series(self, kind: str, upto: float) -> list[int]:
        """Counts of whole seconds 0 .. upto-1."""
        with self._lock:
            return [self._counts[(kind, s)] for s in range(int(upto))]


@dataclass
class Load:
    dsn: str
    book: Book
    settings: Settings = field(default_factory=Settings)
    meter: Meter = field(default_factory=Meter)
    dsn_options: dict[str, str] = field(default_factory=dict)  # per role: extra conninfo
    stop_producing: threading.Event = field(default_factory=threading.Event)
    stop: threading.Event = field(default_factory=threading.Event)
    consumer_setting: dict[str, str] = field(default_factory=dict)  # SET at the next loop
    slow: float = 0.0  # share of messages for the worker whose callback sleeps (timeouts)
    send_delay: int = 0  # seconds: producers send messages that turn visible later
    worker: Worker | None = None
    spark: Any = None  # spark_query.SparkQuery, with Settings.spark
    client_crashes: int = 0
    _threads: list[threading.Thread] = field(default_factory=list)
    _rng: random.Random = field(default_factory=lambda: random.Random(7))

    # -- lifecycle

    def start(self) -> Load:
        s = self.settings
        if s.spark:  # first: the query is running when the first messages for it come
            from .spark_query import SparkQuery

            self.spark = SparkQuery(self.dsn, self.meter).start()
        for i in range(s.producers):
            self._spawn(self._produce, f"chaos-producer-{i}", i)
        for i in range(s.consumers):
            self._spawn(self._consume, f"chaos-consumer-{i}", i)
        self._spawn(self._client_consume, "chaos-client-0")
        self.worker = _CountingWorker(self._dsn("worker"), ["jobs"], book=self.book,
                                      min_workers=s.worker_min, max_workers=s.worker_max,
                                      logger=_quiet_logger())
        self.worker.start()
        self._spawn(self._meter_worker, "chaos-meter")
        return self

    def spark_backlog(self) -> int:
        """Messages sent to the Spark query (commit returned) and not through it yet."""
        return self.meter.total("spark_produced") - self.meter.total("spark")

    def wait_warm(self, timeout: float = WARM_TIMEOUT) -> None:
        """Until every consumer keeps up: the Spark query (its start and first batch take 10-40
        s on 2 busy cores, while the producers run) has worked off what came meanwhile, so
        that the pre-fault figures are of a running query, not of one catching up."""
        if self.spark is None:
            return
        caught_up = WARM_BACKLOG_SECONDS * self.settings.rate / len(self.queues())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.spark.batches and self.spark_backlog() <= caught_up:
                return
            time.sleep(0.1)
        raise RuntimeError(f"the Spark query did not catch up within {timeout:g} s (backlog "
                           f"{self.spark_backlog()}): {self.spark.summary()}")

    def queues(self) -> tuple[str, ...]:
        return QUEUES + ((SPARK_QUEUE,) if self.settings.spark else ())

    def queue_tables(self) -> tuple[str, ...]:
        return tuple(f"pgmq.q_{q}" for q in self.queues())

    def finish_producing(self) -> None:
        self.stop_producing.set()

    def finish(self, timeout: float = 30.0) -> None:
        self.stop_producing.set()
        self.stop.set()
        if self.worker is not None:
            self.worker.stop(timeout)
        if self.spark is not None:
            self.spark.stop(timeout)
        for t in self._threads:
            t.join(timeout)

    def _spawn(self, target: Callable, name: str, *args: Any) -> None:
        t = threading.Thread(target=target, args=(name, *args), name=name, daemon=True)
        self._threads.append(t)
        t.start()

    def _dsn(self, role: str) -> str:
        extra = self.dsn_options.get(role, "")
        return f"{self.dsn} {extra}".strip()

    def _connect(self, name: str, role: str) -> psycopg.Connection | None:
        """Connect, retrying with backoff until it works or we stop."""
        delay = 0.05
        while not self.stop.is_set():
            try:
                return psycopg.connect(self._dsn(role), autocommit=True,
                                       connect_timeout=CONNECT_TIMEOUT, application_name=name)
            except psycopg.Error as exc:
                self.book.error(exc)
                self.stop.wait(delay * (0.5 + self._rng.random()))
                delay = min(delay * 2, 1.0)
        return None

    # -- producers

    def _produce(self, name: str, i: int) -> None:
        s = self.settings
        per_call = 1 if i == 0 else s.batch
        share = 1 / s.producers
        interval = per_call / (s.rate * share)
        rng = random.Random(i)
        seq = 0
        queues = self.queues()
        due = time.monotonic()
        conn = None
        while not self.stop_producing.is_set():
            wait = due - time.monotonic()
            if wait > 0 and self.stop_producing.wait(wait):
                break
            # an outage does not pile up: missed slots are skipped, not caught up
            due = max(due + interval, time.monotonic() - interval)
            if conn is None or conn.closed:
                conn = self._connect(name, "producer")
                if conn is None:
                    break
            queue = queues[seq % len(queues)]
            uids, payloads = [], []
            for _ in range(per_call):
                seq += 1
                uid = f"p{i}-{seq}"
                msg: dict[str, Any] = {"id": uid}
                if queue != SPARK_QUEUE and rng.random() < s.poison:
                    msg["poison"] = True
                elif queue == "jobs" and self.slow and rng.random() < self.slow:
                    msg["slow"] = SLOW_SECONDS  # fails every time: the worker times out
                if len(msg) > 1:
                    with self.book.lock:
                        self.book.poison.add(uid)
                uids.append(uid)
                payloads.append(Jsonb(msg))
            outcome = self._send(conn, queue, uids, payloads, self.send_delay)
            if outcome == "acked":
                self.meter.add("produced", len(uids))
                if queue == SPARK_QUEUE:
                    self.meter.add("spark_produced", len(uids))
            self.book.sent(uids, queue, outcome)
            if conn.broken or stuck(conn):
                conn.close()
        if conn is not None:
            conn.close()

    def _send(self, conn: psycopg.Connection, queue: str, uids: list[str],
              payloads: list[Jsonb], delay: int) -> str:
        """One transaction: the send and the ids' rows in chaos.produced. 'acked' when the
        commit returned, 'failed' when the server refused (nothing committed), 'unknown' when
        the connection broke (the commit may or may not have happened)."""
        try:
            with conn.transaction():
                if len(payloads) == 1:
                    conn.execute("SELECT pgmq.send(%s, %s, %s::integer)",
                                 (queue, payloads[0], delay))
                else:
                    conn.execute("SELECT pgmq.send_batch(%s, %s::jsonb[], %s::integer)",
                                 (queue, payloads, delay))
                conn.execute("INSERT INTO chaos.produced (uid, queue) SELECT u, %s FROM "
                             "unnest(%s::text[]) u", (queue, uids))
            return "acked"
        except psycopg.Error as exc:
            self.book.error(exc)
            return "unknown" if conn.broken or conn.closed else "failed"

    # -- consumers: read, record and delete in one transaction

    def _consume(self, name: str, i: int) -> None:
        s = self.settings
        conn = None
        applied: dict[str, str] = {}
        while not self.stop.is_set():
            if conn is None or conn.closed:
                conn = self._connect(name, "consumer")
                applied = {}
                if conn is None:
                    break
            try:
                wanted = dict(self.consumer_setting)
                if wanted != applied:
                    for key in set(applied) - set(wanted):
                        conn.execute(f"RESET {key}")
                    for key, value in wanted.items():
                        conn.execute(f"SET {key} = '{value}'")
                    applied = wanted
                got = self._consume_once(conn, name, s.batch)
            except psycopg.Error as exc:
                self.book.error(exc)
                if conn.broken or conn.closed or stuck(conn):
                    conn.close()
                    conn = None
                self.stop.wait(0.05)  # not a hot loop while the server refuses (disk full)
                continue
            if got < s.batch:
                self.stop.wait(0.05)
        if conn is not None:
            conn.close()

    def _consume_once(self, conn: psycopg.Connection, name: str, qty: int) -> int:
        with conn.transaction():
            rows = conn.execute("SELECT msg_id, read_ct, message FROM pgmq.read('work', %s, %s)",
                                (VT, qty)).fetchall()
            if not rows:
                return 0
            self.book.delivered([m["id"] for _, _, m in rows])
            good = [r for r in rows if not r[2].get("poison")]
            for msg_id in (r[0] for r in rows if r[2].get("poison")):
                # the handler failed: the retry policy decides (a retry or a dead letter)
                conn.execute("SELECT pgmq.nack('work', %s::bigint, 'poison')", (msg_id,))
            if good:
                conn.execute(
                    "INSERT INTO chaos.consumed (uid, msg_id, read_ct, consumer) "
                    "SELECT * FROM unnest(%s::text[], %s::bigint[], %s::int[], %s::text[])",
                    ([r[2]["id"] for r in good], [r[0] for r in good], [r[1] for r in good],
                     [name] * len(good)))
                conn.execute("SELECT pgmq.delete('work', %s::bigint[])", ([r[0] for r in good],))
        self.meter.add("consumed", len(good))  # committed: a failed commit raises
        return len(rows)

    # -- Client.consume: handler, then archive (at-least-once)

    def _client_consume(self, name: str) -> None:
        dsn = f"{self._dsn('client')} application_name={name}"
        own: list[psycopg.Connection] = []  # the handler's connection, made again when broken

        def handler(msg: Any) -> None:
            uid = msg.message["id"]
            self.book.delivered([uid])
            if msg.message.get("poison"):
                raise ValueError(f"poison message {uid}")
            if not own or own[0].closed:
                own[:] = [psycopg.connect(dsn, autocommit=True, connect_timeout=CONNECT_TIMEOUT)]
            try:
                own[0].execute("INSERT INTO chaos.client_seen (uid) VALUES (%s)", (uid,))
            except psycopg.Error:
                if own[0].broken:
                    own[0].close()
                raise  # Client.consume nacks: the message comes back
            self.meter.add("consumed")

        while not self.stop.is_set():
            try:
                with Client(dsn, min_size=1, max_size=2) as client:
                    client.consume("client", handler, vt=CLIENT_VT, batch=self.settings.batch,
                                   poll_interval=0.2, stop=self.stop)
            except psycopg.Error as exc:
                self.book.error(exc)
                self.client_crashes += 1
                self.stop.wait(0.2)

    # -- the worker's throughput

    def _meter_worker(self, name: str) -> None:
        last = 0
        while not self.stop.wait(0.1):
            done = self.worker.totals.done
            self.meter.add("consumed", done - last)
            last = done


def stuck(conn: psycopg.Connection) -> bool:
    """The session is still inside a transaction after an error: the ROLLBACK itself failed.
    A statement_timeout that fires as a statement ends leaves a cancel pending that hits the
    next statement, the ROLLBACK ('canceling statement due to user request'); psycopg only
    logs that, and every later statement (SET, SAVEPOINT) fails with 25P02. A fresh connection
    is the way out."""
    return (not conn.closed
            and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE)


class _CountingWorker(Worker):
    """The real Worker; its connections also count the deliveries its callbacks announce (a
    NOTICE, sent before the callback can fail or its batch roll back)."""

    def __init__(self, *args: Any, book: Book, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._book = book

    def _connect(self) -> psycopg.Connection[Any]:
        conn = super()._connect()

        def on_notice(d: psycopg.errors.Diagnostic) -> None:
            text = d.message_primary or ""
            if text.startswith(DELIVERED_NOTICE):
                self._book.delivered([text[len(DELIVERED_NOTICE):]])
        conn.add_notice_handler(on_notice)
        return conn


def _quiet_logger() -> logging.Logger:
    """The worker's logger here: only its internal errors (bugs) get through; disconnections
    and dispatch errors are what the faults cause, and the report counts them."""
    lg = logging.getLogger("pgmq_build.chaos.worker")
    if not lg.filters:
        lg.addFilter(lambda r: r.getMessage() == "internal_error")
    return lg
