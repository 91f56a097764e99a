"""The Prometheus exporter: pgmq.queue_metrics(), the consumer-side counters (ops/counters.py),
pgmq.stream_info() and pgmq.list_streams() as a custom Collector (every scrape queries the database; a failed query gives pgmq_up 0, not an
error), the worker's own counters, and the `pgmq-build metrics` command (serve /metrics, or
print once as text or JSON).

Metric names follow Prometheus' conventions: base units (seconds, bytes), ``_total`` only on
counters, the queue as label ``queue``. README: Metrics.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import click
import psycopg
from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer, make_wsgi_app
from prometheus_client.registry import CollectorRegistry

from ..hosts import allowed_hosts, host_allowed
from ..manifest import VERSION
from ..printable import printable
from . import counters, db
from .exits import Exit, OpsError
from .options import dsn_option, handled, json_option
from .render import Output

if TYPE_CHECKING:
    from ..worker import Worker

log = logging.getLogger(__name__)

STATEMENT_TIMEOUT_MS = 10_000  # a scrape must answer even when the server is struggling

# One gauge per queue: (name, pgmq.queue_metrics() column, help, value when the column is NULL;
# None: no sample for that queue).
_QUEUE_GAUGES: tuple[tuple[str, str, str, float | None], ...] = (
    ("pgmq_queue_depth_messages", "depth",
     "Messages in the queue table (visible + in flight + delayed).", None),
    ("pgmq_queue_oldest_message_age_seconds", "oldest_msg_age_sec",
     "Age of the oldest message in the queue table; 0 when it is empty.", 0.0),
    ("pgmq_queue_newest_message_age_seconds", "newest_msg_age_sec",
     "Age of the newest message in the queue table; 0 when it is empty.", 0.0),
    ("pgmq_queue_archive_messages", "archive_rows", "Rows in the queue's archive table.", None),
    ("pgmq_queue_table_bytes", "table_bytes",
     "Size of the queue table (heap and TOAST, all partitions).", None),
    ("pgmq_queue_index_bytes", "index_bytes", "Size of the queue table's indexes.", None),
    ("pgmq_queue_archive_bytes", "archive_bytes", "Size of the archive table.", None),
    ("pgmq_queue_dead_tuples", "dead_tuples",
     "Dead tuples in the queue table (statistics collector).", None),
    ("pgmq_queue_default_partition_rows", "default_partition_rows",
     "Rows in the default partition (partitioned queues only): above 0, partition upkeep is behind.",
     None),
    ("pgmq_queue_paused", "paused", "1 while the queue is paused (pgmq.pause).", None),
    ("pgmq_queue_estimated", "estimated",
     "1 when this queue's counts are estimates (statistics and sampling of a large queue).", None),
)
_STATES = (("visible", "visible"), ("in_flight", "in_flight"), ("delayed", "delayed"))


def queue_families(rows: Iterable[dict[str, Any]]) -> list[Metric]:
    """The metric families of a set of pgmq.queue_metrics() rows."""
    rows = list(rows)
    messages = GaugeMetricFamily("pgmq_queue_messages", "Messages in the queue table by state: "
                                 "visible (readable now), in_flight (leased), delayed (sent with "
                                 "a delay, not read yet).", labels=["queue", "state"])
    sent = CounterMetricFamily("pgmq_queue_sent_messages", "Messages ever sent to the queue "
                               "(its msg_id sequence).", labels=["queue"])
    dlq = GaugeMetricFamily("pgmq_queue_dead_letter_messages", "Messages in the queue's "
                            "dead-letter queue (queues with one only).",
                            labels=["queue", "dead_letter_queue"])
    callbacks = CounterMetricFamily("pgmq_queue_callbacks", "Callback runs by outcome (queues "
                                    "with a callback only).", labels=["queue", "outcome"])
    gauges = [(GaugeMetricFamily(name, text, labels=["queue"]), column, null)
              for name, column, text, null in _QUEUE_GAUGES]
    for r in rows:
        q = r["queue_name"]
        for label, column in _STATES:
            messages.add_metric([q, label], r[column] or 0)
        sent.add_metric([q], r["total_sent"] or 0)
        if r["dead_letter_queue"] is not None:
            dlq.add_metric([q, r["dead_letter_queue"]], r["dead_letter_depth"] or 0)
        if r["callback_succeeded"] is not None or r["callback_failed"] is not None:
            callbacks.add_metric([q, "succeeded"], r["callback_succeeded"] or 0)
            callbacks.add_metric([q, "failed"], r["callback_failed"] or 0)
        for family, column, null in gauges:
            v = r[column]
            if v is None and null is None:
                continue
            family.add_metric([q], float(null if v is None else v))
    return [messages, sent, dlq, callbacks, *(g for g, _, _ in gauges)]


@dataclass
class Scrape:
    """What one scrape read: pgmq.queue_metrics() rows, pgmq.stream_info() /
    pgmq.list_streams() rows, and the version of the extension installed."""

    queues: list[dict[str, Any]]
    subscriptions: list[dict[str, Any]] = field(default_factory=list)
    streams: list[dict[str, Any]] = field(default_factory=list)
    extension_version: str | None = None
    counters: list[dict[str, Any]] = field(default_factory=list)  # counters.read()
    failures: list[dict[str, Any]] = field(default_factory=list)  # counters.read_failures()
    consumers: list[dict[str, Any]] = field(default_factory=list)  # counters.read_consumers()


def read_scrape(conn: db.Conn) -> Scrape:
    return Scrape(db.queue_metrics(conn), db.stream_info(conn), db.streams(conn),
                  db.value(conn, "SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'pgmq'"),
                  counters.read(conn), counters.read_failures(conn), counters.read_consumers(conn))


def build_info(extension_version: str | None) -> Metric:
    """pgmq_build_info: always 1; the exporter's version, and the extension's installed in the
    database ("" when the scrape could not read it): a fleet's versions in one query."""
    info = InfoMetricFamily("pgmq_build", "Versions: of pgmq-build (this exporter) and of the "
                            "pgmq extension installed in the database.")
    info.add_metric([], {"version": VERSION, "extension_version": extension_version or ""})
    return info


# One gauge per subscription: (name, pgmq.stream_info() column, help).
_SUBSCRIPTION_GAUGES = (
    ("pgmq_stream_subscription_lag_events", "lag_events",
     "Events the subscription has not acknowledged (ids handed out since its position)."),
    ("pgmq_stream_subscription_lag_seconds", "lag_seconds",
     "Age of the subscription's position while it lags (the oldest event it has not acknowledged "
     "is at most this old); 0 when it has acknowledged everything."),
    ("pgmq_stream_subscription_batches_out", "batches_out", "Batches leased and not acknowledged."),
    ("pgmq_stream_subscription_position", "position", "The subscription's position (a tick id)."),
)


def stream_families(scrape: Scrape) -> list[Metric]:
    """The stream and subscription metric families of a scrape."""
    labels = ["stream", "subscription"]
    gauges = [(GaugeMetricFamily(name, text, labels=labels), column)
              for name, column, text in _SUBSCRIPTION_GAUGES]
    lost = CounterMetricFamily("pgmq_stream_subscription_lost_events", "Events retention dropped "
                               "before the subscription acknowledged them (drop_unacked).",
                               labels=labels)
    for r in scrape.subscriptions:
        key = [r["stream_name"], r["subscription_name"]]
        for family, column in gauges:
            family.add_metric(key, float(r[column] or 0))
        lost.add_metric(key, r["lost"] or 0)
    size = GaugeMetricFamily("pgmq_stream_bytes", "Size of the stream's segment tables.",
                             labels=["stream"])
    segments = GaugeMetricFamily("pgmq_stream_segments", "Segment tables of the stream.",
                                 labels=["stream"])
    for r in scrape.streams:
        size.add_metric([r["stream_name"]], r["total_bytes"] or 0)
        segments.add_metric([r["stream_name"]], r["segments"] or 0)
    return [*(g for g, _ in gauges), lost, size, segments]


class QueueMetricsSource:
    """Reads pgmq.queue_metrics() over one connection kept between scrapes (thread-safe: the
    HTTP server answers scrapes in threads). A broken connection is replaced at once, so a
    server restart between two scrapes costs no pgmq_up 0."""

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self._lock = threading.Lock()
        self._conn: db.Conn | None = None

    def _open(self) -> db.Conn:
        conn = db.open_connection(self.dsn)
        conn.execute(f"SET statement_timeout = {STATEMENT_TIMEOUT_MS}")
        return conn

    def read(self) -> Scrape:
        with self._lock:
            fresh = self._conn is None
            if self._conn is None:
                self._conn = self._open()
            try:
                return read_scrape(self._conn)
            except psycopg.Error:
                if not (self._conn.broken or self._conn.closed):
                    raise
                self.close_unlocked()
                if fresh:
                    raise
            self._conn = self._open()  # the kept connection had died: one more try
            return read_scrape(self._conn)

    def close_unlocked(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except psycopg.Error:  # already broken: nothing to release
                pass
            self._conn = None

    def close(self) -> None:
        with self._lock:
            self.close_unlocked()


class QueueCollector:
    """prometheus_client Collector: the queue series, pgmq_up and the scrape's duration."""

    def __init__(self, read: Callable[[], Scrape | list[dict[str, Any]]]) -> None:
        self._read = read  # a Scrape, or only queue_metrics() rows

    def collect(self) -> Iterator[Metric]:
        began = time.perf_counter()
        try:
            got, up = self._read(), 1
        except psycopg.Error as exc:
            log.warning("pgmq metrics query failed: %s", db.database_error(exc).message)
            got, up = [], 0
        scrape = got if isinstance(got, Scrape) else Scrape(got)
        yield from queue_families(scrape.queues)
        yield from counters.families(scrape.counters, scrape.failures, scrape.consumers)
        yield from stream_families(scrape)
        yield build_info(scrape.extension_version)
        yield GaugeMetricFamily("pgmq_up", "1 when pgmq.queue_metrics() and pgmq.stream_info() "
                                "answered this scrape.", value=up)
        yield GaugeMetricFamily("pgmq_scrape_duration_seconds",
                                "Time this scrape spent querying the database.",
                                value=time.perf_counter() - began)


class WorkerCollector:
    """The callback worker's own series (pgmq-build worker --metrics-bind)."""

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    def collect(self) -> Iterator[Metric]:
        w = self._worker
        totals, per_queue = w.totals, w.queue_totals()
        yield GaugeMetricFamily("pgmq_worker_pool_size", "Dispatcher threads running now.",
                                value=w.workers)
        dispatched = CounterMetricFamily("pgmq_worker_dispatched", "Messages dispatched to "
                                         "their callback (committed; failed ones included).",
                                         labels=["queue"])
        failed = CounterMetricFamily("pgmq_worker_failed", "Dispatched messages whose callback "
                                     "raised.", labels=["queue"])
        for q, (n_done, n_failed) in sorted(per_queue.items()):
            dispatched.add_metric([q], n_done + n_failed)
            failed.add_metric([q], n_failed)
        yield dispatched
        yield failed
        batches = CounterMetricFamily("pgmq_worker_stream_batches", "Stream batches handled, by "
                                      "outcome: done (handler and ack committed), failed (the "
                                      "handler raised), expired (the lease ran out first).",
                                      labels=["stream", "subscription", "outcome"])
        events = CounterMetricFamily("pgmq_worker_stream_events", "Events of the stream batches "
                                     "whose handler and ack committed.",
                                     labels=["stream", "subscription"])
        for (stream, sub), (n_batches, n_events, n_failed, n_expired) in sorted(w.stream_totals().items()):
            for outcome, n in (("done", n_batches), ("failed", n_failed), ("expired", n_expired)):
                batches.add_metric([stream, sub, outcome], n)
            events.add_metric([stream, sub], n_events)
        yield batches
        yield events
        yield CounterMetricFamily("pgmq_worker_dispatch_errors", "Dispatch statements (and "
                                  "stream reads or batches) that failed (rolled back: their "
                                  "messages come back).", value=totals.errors)
        yield CounterMetricFamily("pgmq_worker_reconnects", "Connections replaced after one was "
                                  "lost (or dropped after an error), the first attempt's "
                                  "success included.", value=totals.reconnects)


def parse_bind(text: str) -> tuple[str, int]:
    """HOST:PORT (or [IPv6]:PORT) -> (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536 or not host:
        raise OpsError(f"--serve/--metrics-bind wants HOST:PORT, got {text!r}", Exit.USAGE)
    return host.strip("[]"), int(port)


class _Server6(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass


def host_checked(app: Callable, allowed: set[str] | None) -> Callable:
    """`app` behind the dashboard's Host rule (pgmq_build/hosts.py): 400 for any other Host, so
    a DNS-rebinding page cannot read queue names and counts."""

    def checked(environ: dict[str, Any], start_response: Callable) -> Iterable[bytes]:
        host = environ.get("HTTP_HOST", "")
        if not host_allowed(host, allowed):
            start_response("400 Bad Request", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"unexpected Host header {host!r}: use the address the exporter listens on\n".encode()]
        return app(environ, start_response)

    return checked


def serve(registry: CollectorRegistry, bind: str) -> WSGIServer:
    """Serve /metrics of registry on HOST:PORT in a daemon thread; returns the server
    (.shutdown() stops it). prometheus_client's server, with the Host rule in front."""
    host, port = parse_bind(bind)
    app = make_wsgi_app(registry)
    try:
        server = make_server(host, port, app, _Server6 if ":" in host else ThreadingWSGIServer,
                             handler_class=_QuietHandler)
    except OSError as exc:
        raise OpsError(f"cannot listen on {bind}: {exc.strerror or exc}", Exit.USAGE) from exc
    server.set_app(host_checked(app, allowed_hosts(host, server.server_address[1])))  # port 0: the one bound
    threading.Thread(target=server.serve_forever, daemon=True, name="metrics-http").start()
    return server


def registry_for(*collectors: Any) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    for c in collectors:
        registry.register(c)
    return registry


def serve_worker(worker: Worker, dsn: str, bind: str) -> Callable[[], None]:
    """/metrics of a worker: the queue series and the worker's own. Returns the stop function."""
    source = QueueMetricsSource(dsn)
    server = serve(registry_for(QueueCollector(source.read), WorkerCollector(worker)), bind)

    def stop() -> None:
        server.shutdown()
        source.close()

    return stop


def _wait_for_signal() -> None:
    """Block until SIGTERM or SIGINT (Ctrl-C)."""
    done = threading.Event()
    previous = {s: signal.signal(s, lambda *_: done.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while not done.wait(0.5):
            pass
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@click.command("metrics")
@dsn_option
@click.option("--serve", "bind", metavar="HOST:PORT",
              help="Serve /metrics here until SIGTERM or Ctrl-C (every scrape queries the database).")
@json_option
@handled
def metrics_command(dsn: str, bind: str | None, as_json: bool) -> None:
    """pgmq.queue_metrics() in Prometheus' text format (or JSON), once or served over HTTP."""
    out = Output(as_json)
    if bind:
        source = QueueMetricsSource(dsn)
        server = serve(registry_for(QueueCollector(source.read)), bind)
        out.note(f"serving http://{bind}/metrics (Ctrl-C stops)")
        try:
            _wait_for_signal()
        finally:
            server.shutdown()
            source.close()
        return
    with db.connect(dsn) as conn:
        scrape = read_scrape(conn)
    if as_json:
        out.json({"queues": [{k: r[k] for k in db.QUEUE_METRICS_COLUMNS if k in r}
                             for r in scrape.queues],
                  "counters": scrape.counters, "failures": scrape.failures, "consumers": scrape.consumers,
                  "subscriptions": scrape.subscriptions, "streams": scrape.streams,
                  "build": {"version": VERSION, "extension_version": scrape.extension_version}})
        return
    # label values escape only \\, " and line feeds: control characters of names escaped for the terminal
    text = generate_latest(registry_for(QueueCollector(lambda: scrape))).decode()
    click.echo(printable(text, lines=True), nl=False)
