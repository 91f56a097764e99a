"""The admin commands' database side: connecting, the catalog questions they ask, and turning
psycopg errors into exit codes. Every call is its own transaction (autocommit)."""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.rows import dict_row

from ..install import NOT_INSTALLED, has_pgmq, pgmq_missing
from .exits import NOT_FOUND_SQLSTATES, Exit, OpsError, not_found

APP_NAME = "pgmq-build"
CONNECT_TIMEOUT = 5  # seconds: an unreachable server fails a command (or a scrape) quickly

# pgmq.queue_metrics()'s columns, in its order: the --json documents use these keys.
QUEUE_METRICS_COLUMNS = (
    "queue_name", "paused", "depth", "visible", "in_flight", "delayed", "oldest_msg_age_sec",
    "newest_msg_age_sec", "dead_letter_queue", "dead_letter_depth", "archive_rows", "total_sent",
    "table_bytes", "index_bytes", "archive_bytes", "dead_tuples", "default_partition_rows",
    "callback_succeeded", "callback_failed", "estimated", "measured_at",
)

Conn = psycopg.Connection[dict[str, Any]]


def open_connection(dsn: str) -> Conn:
    """An autocommit connection with dict rows; psycopg's errors propagate."""
    return psycopg.connect(dsn, autocommit=True, row_factory=dict_row,
                           connect_timeout=CONNECT_TIMEOUT, fallback_application_name=APP_NAME)


def connect(dsn: str) -> Conn:
    """open_connection() for a command: a failure becomes exit 1 with psycopg's reason, and so
    does a database without pgmq (with the hint to install it: `top` would retry forever)."""
    try:
        conn = open_connection(dsn)
    except psycopg.Error as exc:
        raise database_error(exc, prefix="cannot connect: ") from exc
    try:
        installed = has_pgmq(conn)
    except psycopg.Error as exc:
        conn.close()
        raise database_error(exc) from exc
    if not installed:
        conn.close()
        raise OpsError(NOT_INSTALLED, Exit.DATABASE, "3F000")
    return conn


READ_ONLY = "25006"  # read_only_sql_transaction: what a write meets on a hot standby
STANDBY = "read-only: this server is a standby (run this against the primary): "


def in_recovery(dsn: str | None) -> bool:
    """Whether the server of dsn is a hot standby (False when that cannot be learnt)."""
    if not dsn:
        return False
    try:
        with open_connection(dsn) as conn:
            return bool(value(conn, "SELECT pg_is_in_recovery()"))
    except psycopg.Error:
        return False


def database_error(exc: psycopg.Error, prefix: str = "", standby: bool = False) -> OpsError:
    """The OpsError a psycopg error becomes: exit 3 for an unknown queue or exchange, else 1.
    standby: the server is a hot standby, said first when the error is its read-only one."""
    sqlstate = exc.sqlstate
    if pgmq_missing(exc):
        return OpsError(prefix + NOT_INSTALLED, Exit.DATABASE, sqlstate)
    text = exc.diag.message_primary
    if not text:  # no server message (e.g. a failed connection): psycopg's first line
        lines = str(exc).strip().splitlines()
        text = lines[0] if lines else type(exc).__name__
    if standby and sqlstate == READ_ONLY:
        prefix = STANDBY + prefix
    code = Exit.NOT_FOUND if sqlstate in NOT_FOUND_SQLSTATES else Exit.DATABASE
    return OpsError(prefix + text, code, sqlstate)


def rows(conn: Conn, query: str, params: Any = None) -> list[dict[str, Any]]:
    return conn.execute(query, params).fetchall()


def value(conn: Conn, query: str, params: Any = None) -> Any:
    row = conn.execute(query, params).fetchone()
    return None if row is None else next(iter(row.values()))


# Queues measured per statement when every queue is asked for: measuring one locks its tables
# and their indexes (about 8 locks) until the statement's transaction ends, and the server's
# lock table holds max_locks_per_transaction (default 64) x max_connections (100) locks in all.
METRICS_PAGE = 200


def queue_metrics(conn: Conn, queue: str | None = None) -> list[dict[str, Any]]:
    """pgmq.queue_metrics(): every queue the caller may read (by name), or one queue. Every
    queue is read a page at a time (pgmq.queue_metrics_page, 2.12.0), each page a transaction
    of its own when `conn` is in autocommit, so that thousands of queues need no more lock
    slots than a page; a server without it answers in one statement."""
    if queue is not None or not conn.autocommit or not value(
            conn, "SELECT to_regprocedure('pgmq.queue_metrics_page(text, integer)') IS NOT NULL"):
        return rows(conn, "SELECT * FROM pgmq.queue_metrics(queue_name => %s::text)", (queue,))
    found: list[dict[str, Any]] = []
    after = None
    while True:
        page = rows(conn, "SELECT * FROM pgmq.queue_metrics_page(%s::text, %s)", (after, METRICS_PAGE))
        if not page:  # (a short page is no end: queues dropped since they were listed leave it)
            return found
        found += page
        after = page[-1]["queue_name"]


def queue_names(conn: Conn) -> list[str]:
    return [r["queue_name"] for r in rows(conn, "SELECT queue_name FROM pgmq.list_queues() ORDER BY 1")]


def require_queue(conn: Conn, name: str) -> None:
    if not value(conn, "SELECT EXISTS (SELECT 1 FROM pgmq.list_queues() WHERE queue_name = %s)",
                 (name,)):
        raise not_found(f'queue "{name}"')


def dead_letter_sources(conn: Conn) -> dict[str, list[str]]:
    """Each dead-letter queue -> the queues that dead-letter into it."""
    found: dict[str, list[str]] = {}
    for r in rows(conn, "SELECT queue_name, dead_letter_queue FROM pgmq.list_queue_settings() "
                        "WHERE dead_letter_queue IS NOT NULL ORDER BY dead_letter_queue, queue_name"):
        found.setdefault(r["dead_letter_queue"], []).append(r["queue_name"])
    return found


def require_dlq(conn: Conn, name: str) -> list[str]:
    """The queues dead-lettering into `name`; exit 3 when it is not a dead-letter queue."""
    sources = dead_letter_sources(conn).get(name)
    if not sources:
        raise not_found(f'dead-letter queue "{name}" (no queue dead-letters into it)')
    return sources


def stream_info(conn: Conn, stream: str | None = None) -> list[dict[str, Any]]:
    """pgmq.stream_info(): every subscription (of one stream) the caller may read."""
    return rows(conn, "SELECT * FROM pgmq.stream_info(stream_name => %s::text)", (stream,))


def streams(conn: Conn) -> list[dict[str, Any]]:
    """pgmq.list_streams(): every stream with its settings, segments and size."""
    return rows(conn, "SELECT * FROM pgmq.list_streams()")


def require_stream(conn: Conn, name: str) -> dict[str, Any]:
    """The stream's row of list_streams(); exit 3 when there is none."""
    row = next((s for s in streams(conn) if s["stream_name"] == name), None)
    if row is None:
        raise not_found(f'stream "{name}"')
    return row


def require_subscription(conn: Conn, stream: str, subscription: str) -> dict[str, Any]:
    """The subscription's row of stream_info(); exit 3 when there is none."""
    require_stream(conn, stream)
    row = next((s for s in stream_info(conn, stream) if s["subscription_name"] == subscription), None)
    if row is None:
        raise not_found(f'subscription "{subscription}" of stream "{stream}"')
    return row
