"""The dashboard's pages and actions, and its safety rules: read-only unless started with
allow_actions, a Host check on every request (no DNS rebinding), and for every POST a
same-origin check plus a per-process CSRF token. Actions answer with a redirect."""

from __future__ import annotations

import contextlib
import hmac
import json
import logging
import secrets
import threading
from collections.abc import Iterator
from dataclasses import asdict
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote, unquote

import psycopg
from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape
from psycopg.rows import dict_row
from psycopg_pool import ConnectionPool

from ..hosts import allowed_hosts, host_allowed
from ..install import NOT_INSTALLED, has_pgmq
from ..printable import printable
from . import charts, queries
from .sampler import HISTORY_MAX_AGE, KEEP, Sample, Sampler, rates, window_rates
from .web import DashboardServer, HTTPError, Request, Response, Router, redirect, status_phrase

log = logging.getLogger("pgmq_build.dashboard")

PAGE_SIZE = 20  # messages per page of the browser
DLQ_PREVIEW = 20  # dead letters shown per dead-letter queue
READ_ONLY = "25006"  # read_only_sql_transaction: a write on a hot standby
STANDBY = "read-only: this server is a standby"
# SQLSTATEs that mean "no such queue": it does not exist (42P01), or the name could not be one
# (42602 invalid_name, 42622 name_too_long, 22004 NULL).
NO_QUEUE = {"42P01", "42602", "42622", "22004"}
NOTICES = {
    "paused": "Paused: consumers get nothing from this queue until it is resumed.",
    "resumed": "Resumed: consumers get messages again.",
    "still_paused": "It was already paused.",
    "still_running": "It was not paused.",
    "purged": "Purged {n} message(s).",
    "redriven": "Redrive moved {n} message(s).",
}
# The queue page's time ranges (?range=): label -> seconds of history shown (None: all kept:
# the last 24 hours in pgmq.metrics_history, the last KEEP samples in memory).
RANGES = {"5m": 300, "15m": 900, "1h": 3600, "6h": 21600, "24h": 86400, "all": None}
DEFAULT_RANGE = "1h"
RECENT = 3600.0  # seconds of history behind the queue list's sparklines
RATE_WINDOW = 60.0  # seconds of samples behind the queue list's rates
QUEUES_PAGE = 100  # queues a page of the list (a 10,000-queue database renders in well under 1 s)
LIVE_QUEUES = 500  # the queue list measures up to this many queues per request, more from the last sample
RATE_SORTS = ("sent", "consumed")  # sorting by these needs every row's rates, not the page's
GAP_SAMPLES = 3  # samples further apart than this many intervals: the charts draw a gap
OUTAGE_RETRY = 5  # seconds: the 503 page (database unavailable) reloads itself this often
# The queue list's sort keys (?sort=...): a row -> a comparable value (None last).
SORTS = {
    "name": lambda r: r["queue_name"],
    "depth": lambda r: r["depth"],
    "oldest": lambda r: r["oldest_msg_age_sec"],
    "dead": lambda r: r["dead_letter_depth"],
    "sent": lambda r: r["rates"][0] if r["rates"] else None,
    "consumed": lambda r: r["rates"][1] if r["rates"] else None,
}


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    s = int(seconds)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            return f"{s // size}{unit} {s % size // subsize}{sub}"
    return f"{seconds:.1f}s" if seconds < 10 else f"{s}s"


def _num(value: Any) -> str:
    return "—" if value is None else f"{value:,}"


def _size(n: int | None) -> str:
    if n is None:
        return "—"
    for unit in ("B", "kB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return ""  # pragma: no cover


def _pretty(value: Any) -> Markup:
    """Indented JSON for a <pre>: its line breaks kept, every other control character escaped."""
    return escape(printable(json.dumps(value, indent=2, ensure_ascii=False, default=str), lines=True))


def _shown(value: Any) -> Any:
    """What every {{ ... }} prints (Jinja's finalize, before autoescaping): text with control
    characters escaped (printable), so a queue's name shows as `\x1b[2J` or `a\nb`, never as
    something the browser hides or folds into a space. Markup is what this package made
    (charts, _pretty) and is kept. Attributes that carry a name back to the server hold it
    percent-encoded (qurl), which has nothing to escape."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return printable(value)
    return value


def _ts(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _isots(value: Any) -> str:
    """An ISO timestamp from a header (x-pgmq-dead-letter's time), shown like the others."""
    try:
        return _ts(datetime.fromisoformat(str(value)))
    except ValueError:
        return "—" if value is None else str(value)


def _rate(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}/s" if value < 100 else f"{value:,.0f}/s"


def environment() -> Environment:
    env = Environment(loader=PackageLoader("pgmq_build.dashboard", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True,
                      finalize=_shown)
    env.filters.update(qurl=lambda s: quote(s, safe=""), age=_age, num=_num, size=_size,
                       pretty=_pretty, ts=_ts, isots=_isots, rate=_rate)
    return env


def _jsonable(value: Any) -> Any:
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def json_response(doc: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """The JSON API's answer: what the matching page shows, as data."""
    return Response(json.dumps(doc, default=_jsonable), status, "application/json",
                    headers=headers or {})


def sorted_rows(rows: list[dict[str, Any]], sort: str, descending: bool) -> list[dict[str, Any]]:
    """Rows by SORTS[sort]; rows without a value (no DLQ, no rate yet) last either way."""
    key = SORTS[sort]
    known = [r for r in rows if key(r) is not None]
    return sorted(known, key=key, reverse=descending) + [r for r in rows if key(r) is None]


def _dead_letter_record(headers: Any) -> dict[str, Any]:
    """headers->'x-pgmq-dead-letter' with every field (None when missing: a message can be sent
    to a dead-letter queue by hand, without one)."""
    record = headers.get("x-pgmq-dead-letter") if isinstance(headers, dict) else None
    record = record if isinstance(record, dict) else {}
    return {k: record.get(k) for k in ("reason", "source_queue", "source_msg_id", "attempts",
                                       "last_error", "time")}


class Dashboard:
    """The web app: a connection pool, the sampler and the routes. `serve()` binds a server;
    `close()` stops the sampler and the pool."""

    def __init__(self, dsn: str, *, allow_actions: bool = False, sample_interval: float = 5.0,
                 refresh: float | None = None, pool_timeout: float = 5.0, keep: int = KEEP,
                 history_max_age: float = HISTORY_MAX_AGE) -> None:
        self.allow_actions = allow_actions
        # Pages reload themselves (unless a form field has focus) to follow the samples.
        self.refresh = max(5.0, sample_interval) if refresh is None else refresh
        self.csrf_token = secrets.token_urlsafe(32)  # per process: a restart invalidates old forms
        self.allowed_hosts: set[str] | None = None  # set by serve(); None: any Host
        self.pool = ConnectionPool(
            dsn, min_size=1, max_size=4, timeout=pool_timeout, open=False, name="dashboard",
            check=ConnectionPool.check_connection,  # a terminated backend is replaced, not used
            kwargs={"autocommit": True, "row_factory": dict_row,
                    "application_name": "pgmq-dashboard"})
        self.sampler = Sampler(self.pool.connection, sample_interval, keep, history_max_age)
        self.env = environment()
        self.router = Router()
        for method, path, handler in (
                ("GET", "/", self.queue_list),
                ("GET", "/queues/{}", self.queue_detail),
                ("GET", "/dead-letters", self.dead_letters),
                ("GET", "/api/queues", self.api_queues),
                ("GET", "/api/queues/{}", self.api_queue),
                ("GET", "/api/dead-letters", self.api_dead_letters),
                ("GET", "/streams", self.streams),
                ("GET", "/api/streams", self.api_streams),
                ("GET", "/exchanges", self.exchanges),
                ("GET", "/api/exchanges", self.api_exchanges),
                ("POST", "/queues/{}/pause", self.pause),
                ("POST", "/queues/{}/resume", self.resume),
                ("POST", "/queues/{}/purge", self.purge),
                ("POST", "/dead-letters/{}/redrive", self.redrive)):
            self.router.add(method, path, handler)

    # -- lifecycle ---------------------------------------------------------------------------

    def open(self) -> Dashboard:
        self.pool.open(wait=False)  # the server starts even when the database is down
        self.sampler.start()
        return self

    def close(self) -> None:
        self.sampler.stop()
        self.pool.close()

    def serve(self, host: str, port: int) -> DashboardServer:
        """Bind (port 0: any free port) and return the server; call serve_forever() on it."""
        server = DashboardServer((host, port), self)
        self.allowed_hosts = allowed_hosts(host, server.server_address[1])
        return server

    def serve_in_thread(self, host: str = "127.0.0.1", port: int = 0) -> tuple[DashboardServer, str]:
        """For tests and scripts: open, bind, serve in a daemon thread; (server, base URL)."""
        self.open()
        server = self.serve(host, port)
        threading.Thread(target=server.serve_forever, daemon=True, name="dashboard-http").start()
        return server, f"http://{host}:{server.server_address[1]}"

    # -- request handling --------------------------------------------------------------------

    def handle(self, req: Request) -> Response:
        host = req.headers.get("host", "")
        if not host_allowed(host, self.allowed_hosts):
            raise HTTPError(400, f"unexpected Host header {host!r}: use the address the "
                                 f"dashboard listens on")
        handler, args = self.router.match(req.method, req.path)
        if req.method == "POST":
            self._check_post(req, host)
        try:
            return handler(req, *args)
        except psycopg.OperationalError as exc:  # includes the pool's timeout
            log.warning("database unavailable: %s", printable(str(exc)))
            raise HTTPError(503, f"The database is unavailable: {exc}") from None
        except psycopg.Error as exc:
            log.warning("database error on %s %s: %s", req.method, printable(req.path), printable(str(exc)))
            if exc.sqlstate == READ_ONLY and self._standby():
                raise HTTPError(409, f"{STANDBY} (in recovery): actions need the primary. "
                                     f"{exc.diag.message_primary}") from None
            state = f" (SQLSTATE {exc.sqlstate})" if exc.sqlstate else ""
            raise HTTPError(500, f"Database error{state}: {exc}") from None

    def _check_post(self, req: Request, host: str) -> None:
        if not self.allow_actions:
            raise HTTPError(403, "Actions are disabled: start the dashboard with --allow-actions.")
        # Browsers send Origin with every form POST; a cross-site form cannot forge it.
        origin = req.headers.get("origin")
        referer = req.headers.get("referer")
        if origin is not None and origin != f"http://{host}":
            raise HTTPError(403, "Cross-origin request refused (Origin does not match Host).")
        if origin is None and referer is not None and not referer.startswith(f"http://{host}/"):
            raise HTTPError(403, "Cross-origin request refused (Referer does not match Host).")
        if not hmac.compare_digest(req.form.get("csrf", "").encode(), self.csrf_token.encode()):
            raise HTTPError(403, "Missing or stale form token: reload the page and try again.")

    @staticmethod
    def security_headers() -> dict[str, str]:
        return {"X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY",
                "Referrer-Policy": "same-origin",
                "Content-Security-Policy": "default-src 'none'; frame-ancestors 'none'"}

    def render(self, template: str, status: int = 200, **context: Any) -> Response:
        nonce = secrets.token_urlsafe(16)  # the page's own <style> and <script> only
        context.setdefault("notice", None)
        standby = context.pop("standby", False)
        body = self.env.get_template(template).render(
            nonce=nonce, csrf=self.csrf_token, standby=standby,
            allow_actions=self.allow_actions and not standby,
            sampler_error=self.sampler.last_error, sample_interval=self.sampler.interval,
            history_in_db=self.sampler.persistent,
            refresh=context.pop("refresh", self.refresh), **context)
        csp = (f"default-src 'none'; style-src 'nonce-{nonce}'; script-src 'nonce-{nonce}'; "
               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
        return Response(body, status, headers={"Content-Security-Policy": csp})

    def error_page(self, status: int, message: str, headers: dict[str, str], path: str = "") -> Response:
        """The error's page; under /api/ a JSON document. An outage (503) says when to retry
        (Retry-After) and its page reloads itself until the database answers again."""
        outage = status == 503
        extra = {"Retry-After": str(OUTAGE_RETRY)} if outage else {}
        if path.startswith("/api/"):
            return json_response({"error": {"status": status, "message": printable(message)}},
                                 status, {**headers, **extra})
        response = self.render("error.html", status=status, refresh=OUTAGE_RETRY if outage else 0,
                               status_code=status, phrase=status_phrase(status), message=message,
                               retrying=outage)
        response.headers.update({**headers, **extra})
        return response

    def _standby(self, conn: psycopg.Connection | None = None) -> bool:
        """Whether the server is a hot standby: the pages say it is read-only and offer no
        actions (asked on every page: a failover turns a standby into the primary)."""
        if conn is None:
            with self._db() as conn:
                return self._standby(conn)
        return bool(conn.execute(queries.IN_RECOVERY).fetchone()["standby"])

    @contextlib.contextmanager
    def _db(self) -> Iterator[psycopg.Connection]:
        with self.pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def _queue_errors(self, queue: str) -> Iterator[None]:
        """Errors that mean the queue (or a name in the form) does not exist become a 404."""
        try:
            yield
        except psycopg.Error as exc:
            if exc.sqlstate in NO_QUEUE:
                raise HTTPError(404, exc.diag.message_primary or f"queue {queue!r} does not exist") from None
            raise

    def _notice(self, req: Request) -> str | None:
        text = NOTICES.get(req.query.get("notice", ""))
        n = req.query.get("n", "")
        return text.format(n=int(n) if n.isdigit() else "?") if text else None

    # -- pages -------------------------------------------------------------------------------

    def _queue_rows(self, req: Request) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The queue list's rows, filtered (?q=, a part of the name, any case), sorted (?sort= a
        SORTS key, ?order=asc|desc) and paged (?page=, QUEUES_PAGE rows a page), each row of the
        page with its depth history and rates; and the view's settings."""
        sort = req.query.get("sort", "name")
        if sort not in SORTS:
            raise HTTPError(400, f"sort must be one of {', '.join(SORTS)}")
        order = req.query.get("order", "asc")
        if order not in ("asc", "desc"):
            raise HTTPError(400, "order must be asc or desc")
        page = req.int_param("page", 1, 1, 2**31 - 1)
        needle = req.query.get("q", "")
        # Measured now while there are few queues; beyond LIVE_QUEUES, as the last sample
        # measured them (queue_metrics() of 10,000 queues takes many seconds).
        sampled_at, rows = None, self.sampler.latest()
        with self._db() as conn:
            if rows is None or len(rows) <= LIVE_QUEUES:
                rows = conn.execute(queries.METRICS_ALL).fetchall()
            else:
                sampled_at = max((r["measured_at"] for r in rows), default=None)
            standby = self._standby(conn)
        total = len(rows)
        rows = [r for r in rows if needle.casefold() in r["queue_name"].casefold()]
        if sort in RATE_SORTS:  # the rates of every row, from its last minute of samples
            recent = self.sampler.histories([r["queue_name"] for r in rows], RATE_WINDOW)
            for r in rows:
                r["rates"] = window_rates(recent.get(r["queue_name"], []))
        matching = len(rows)
        pages = max(1, -(-matching // QUEUES_PAGE))
        page = min(page, pages)
        rows = sorted_rows(rows, sort, order == "desc")[(page - 1) * QUEUES_PAGE:page * QUEUES_PAGE]
        histories = self.sampler.histories([r["queue_name"] for r in rows], RECENT)
        for r in rows:
            r["history"] = histories.get(r["queue_name"], [])
            r["rates"] = window_rates(r["history"], RATE_WINDOW)
        return rows, {"sort": sort, "order": order, "q": needle, "total": total, "matching": matching,
                      "page": page, "pages": pages, "sampled_at": sampled_at, "standby": standby}

    def queue_list(self, req: Request) -> Response:
        rows, view = self._queue_rows(req)
        # one scale for every sparkline, logarithmic: a queue of 2 and one of 26,886 compare
        top = max((s.depth for r in rows for s in r["history"]), default=0)
        for r in rows:
            r["spark"] = charts.sparkline([(s.at, s.depth) for s in r["history"]], top=top)
        return self.render("queues.html", queues=rows, view=view, spark_top=top, sorts=list(SORTS),
                           queues_page=QUEUES_PAGE,
                           notice=self._notice(req), standby=view["standby"])

    # -- the JSON API (GET only: the Host rule applies, as to the pages) -------------------------

    def api_queues(self, req: Request) -> Response:
        """/api/queues: the queue list (same ?q, ?sort, ?order), each queue's metrics, rates
        over the last minute and sampled depth history."""
        rows, view = self._queue_rows(req)
        return json_response({**view, "queues": [self._queue_doc(r) for r in rows]})

    @staticmethod
    def _queue_doc(r: dict[str, Any]) -> dict[str, Any]:
        doc = {k: v for k, v in r.items() if k not in ("history", "rates", "spark")}
        doc["rates"] = None if r["rates"] is None else {"sent_per_s": r["rates"][0],
                                                        "consumed_per_s": r["rates"][1]}
        doc["history"] = [asdict(s) for s in r["history"]]
        return doc

    def api_queue(self, req: Request, queue: str) -> Response:
        """/api/queues/NAME: its metrics, settings and history (messages: see pgmq-build)."""
        with self._db() as conn, self._queue_errors(queue):
            metrics = conn.execute(queries.METRICS_ONE, (queue,)).fetchone()
            settings = conn.execute(queries.SETTINGS, (queue,)).fetchone()
        history = self.sampler.history(queue, RECENT)
        return json_response({"queue": queue, "metrics": metrics, "settings": settings,
                              "history": [asdict(s) for s in history],
                              "rates": [{"at": t, "sent_per_s": a, "consumed_per_s": b}
                                        for t, a, b in rates(history)]})

    def api_dead_letters(self, req: Request) -> Response:
        """/api/dead-letters: what /dead-letters shows."""
        with self._db() as conn:
            dlqs, _ = self._dead_letter_queues(conn)
        return json_response({"dead_letter_queues": dlqs})

    def queue_detail(self, req: Request, queue: str) -> Response:
        after = req.int_param("after", 0, 0, 2**63 - 1)
        archived = req.query.get("archived") == "1"
        with self._db() as conn, self._queue_errors(queue):
            metrics = conn.execute(queries.METRICS_ONE, (queue,)).fetchone()
            settings = conn.execute(queries.SETTINGS, (queue,)).fetchone()
            page = conn.execute(queries.BROWSE, (queue, after, PAGE_SIZE + 1, archived)).fetchall()
            standby = self._standby(conn)
        span = req.query.get("range", DEFAULT_RANGE)
        if span not in RANGES:
            raise HTTPError(400, f"range must be one of {', '.join(RANGES)}")
        return self.render("queue.html", queue=queue, m=metrics, settings=settings,
                           messages=page[:PAGE_SIZE], more=len(page) > PAGE_SIZE, after=after,
                           archived=archived, charts=self._charts(queue, RANGES[span]),
                           ranges=list(RANGES), span=span, notice=self._notice(req), standby=standby)

    def _charts(self, queue: str, seconds: float | None = None) -> list:
        """The queue page's charts over the last `seconds` of samples (None: all kept)."""
        history: list[Sample] = self.sampler.history(queue, seconds)
        flow = rates(history)
        c = charts.COLOURS
        longest = GAP_SAMPLES * self.sampler.interval  # samples further apart: a gap is drawn

        def line(label: str, colour: str, points: list[charts.Point]) -> charts.Series:
            return charts.Series(label, colour, charts.gapped(points, longest))

        return [
            charts.line_chart([line("depth", c["depth"], [(s.at, s.depth) for s in history]),
                               line("in flight", c["in_flight"], [(s.at, s.in_flight) for s in history])],
                              title="Depth", y_label="messages"),
            charts.line_chart([line("oldest message age", c["oldest_age"],
                                    [(s.at, s.oldest_age) for s in history])],
                              title="Oldest message age", y_label="seconds"),
            charts.line_chart([line("sent", c["sent"], [(t, x) for t, x, _ in flow]),
                               line("consumed", c["consumed"], [(t, x) for t, _, x in flow])],
                              title="Throughput", y_label="messages / s"),
        ]

    def _dead_letter_queues(self, conn: psycopg.Connection) -> tuple[list[dict[str, Any]], list[str]]:
        """Each dead-letter queue with its sources and first letters; every queue's name."""
        rows = conn.execute(queries.METRICS_ALL).fetchall()
        by_name = {r["queue_name"]: r for r in rows}
        sources: dict[str, list[str]] = {}
        for r in rows:
            if r["dead_letter_queue"] is not None:
                sources.setdefault(r["dead_letter_queue"], []).append(r["queue_name"])
        dlqs = []
        for name in sorted(sources):
            letters = []
            if name in by_name:
                for msg in conn.execute(queries.BROWSE, (name, 0, DLQ_PREVIEW, False)).fetchall():
                    letters.append({**msg, "dead": _dead_letter_record(msg["headers"])})
            dlqs.append({"name": name, "m": by_name.get(name), "sources": sources[name],
                         "letters": letters})
        return dlqs, sorted(by_name)

    def dead_letters(self, req: Request) -> Response:
        with self._db() as conn:
            dlqs, names = self._dead_letter_queues(conn)
            standby = self._standby(conn)
        return self.render("dead_letters.html", dlqs=dlqs, queue_names=names,
                           notice=self._notice(req), refresh=0, standby=standby)  # forms: no reloading under them

    def _streams(self) -> list[dict[str, Any]]:
        """Every stream (list_streams) with its subscriptions (stream_info)."""
        with self._db() as conn:
            streams = conn.execute(queries.STREAMS).fetchall()
            subs = conn.execute(queries.SUBSCRIPTIONS).fetchall()
        for st in streams:
            st["subscriptions"] = [u for u in subs if u["stream_name"] == st["stream_name"]]
        return streams

    def streams(self, req: Request) -> Response:
        return self.render("streams.html", streams=self._streams(), standby=self._standby())

    def api_streams(self, req: Request) -> Response:
        """/api/streams: what /streams shows (retention and rotation in seconds)."""
        streams = self._streams()
        for st in streams:
            for k in ("retention", "rotation_period"):
                st[k] = st[k].total_seconds() if st[k] is not None else None
        return json_response({"streams": streams})

    def _exchanges(self) -> list[dict[str, Any]]:
        """Every exchange with its bindings (a queue's, or a stream's: `stream`)."""
        with self._db() as conn:
            exchanges = conn.execute(queries.EXCHANGES).fetchall()
            bindings = conn.execute(queries.BINDINGS).fetchall()
        for e in exchanges:
            e["bindings"] = [{"queue": b["queue_name"], "stream": b["stream_name"], "key": b["binding_key"]}
                             for b in bindings if b["exchange_name"] == e["exchange_name"]]
        return exchanges

    def exchanges(self, req: Request) -> Response:
        return self.render("exchanges.html", exchanges=self._exchanges(), standby=self._standby())

    def api_exchanges(self, req: Request) -> Response:
        """/api/exchanges: what /exchanges shows."""
        return json_response({"exchanges": self._exchanges()})

    # -- actions (POST; checked by _check_post) ------------------------------------------------

    def _back(self, queue: str, notice: str, n: int | None = None) -> Response:
        extra = "" if n is None else f"&n={n}"
        return redirect(f"/queues/{quote(queue, safe='')}?notice={notice}{extra}")

    def pause(self, req: Request, queue: str) -> Response:
        with self._db() as conn, self._queue_errors(queue):
            was_running = conn.execute(queries.PAUSE, (queue,)).fetchone()["result"]
        return self._back(queue, "paused" if was_running else "still_paused")

    def resume(self, req: Request, queue: str) -> Response:
        with self._db() as conn, self._queue_errors(queue):
            was_paused = conn.execute(queries.RESUME, (queue,)).fetchone()["result"]
        return self._back(queue, "resumed" if was_paused else "still_running")

    def purge(self, req: Request, queue: str) -> Response:
        if req.form.get("confirm") != "yes":
            raise HTTPError(400, "Tick the confirmation box to purge the queue.")
        with self._db() as conn, self._queue_errors(queue):
            n = conn.execute(queries.PURGE, (queue,)).fetchone()["result"]
        return self._back(queue, "purged", n)

    def redrive(self, req: Request, dlq: str) -> Response:
        # None: each message back to its source; the form's options hold names percent-encoded
        try:
            target = unquote(req.form.get("target", ""), errors="strict") or None
        except UnicodeDecodeError:
            raise HTTPError(400, "the target is not UTF-8") from None
        raw_max = req.form.get("max_messages", "").strip()
        if raw_max and not (raw_max.isdigit() and 0 < int(raw_max) < 2**31):
            raise HTTPError(400, "max messages must be a positive whole number (or empty: all)")
        with self._db() as conn, self._queue_errors(dlq):
            n = conn.execute(queries.REDRIVE, (dlq, target, int(raw_max) if raw_max else None)
                             ).fetchone()["result"]
        return redirect(f"/dead-letters?notice=redriven&n={n}")


def run(dsn: str, bind: str, allow_actions: bool, sample_interval: float, echo=print) -> int:
    """`pgmq-build dashboard`: serve until Ctrl-C; the exit code."""
    host, sep, port = bind.rpartition(":")
    if not sep or not port.isdigit() or not host:
        echo(f"error: --bind must be HOST:PORT, got {bind!r}")
        return 2
    host = host.strip("[]")
    try:  # a database without pgmq is a mistake to say now; a server down may come back later
        with psycopg.connect(dsn, connect_timeout=5) as conn:
            if not has_pgmq(conn):
                echo(f"error: {NOT_INSTALLED}")
                return 1
    except psycopg.OperationalError:
        pass
    dashboard = Dashboard(dsn, allow_actions=allow_actions, sample_interval=sample_interval)
    try:
        server = dashboard.serve(host, int(port))
    except OSError as exc:
        echo(f"error: cannot listen on {bind}: {exc}")
        return 1
    dashboard.open()
    where = f"http://{'[' + host + ']' if ':' in host else host}:{server.server_address[1]}/"
    mode = "actions enabled (pause, resume, purge, redrive)" if allow_actions else "read-only"
    echo(f"pgmq dashboard on {where} ({mode}); Ctrl-C stops it")
    if dashboard.allowed_hosts is None:
        echo("warning: listening on every address: anyone who can reach this port sees the queues")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        dashboard.close()
    return 0
