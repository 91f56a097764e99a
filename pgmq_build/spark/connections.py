"""Connections to PostgreSQL for the Spark connector (psycopg, no pyspark import): sessions set
up for COPY's text output (UTC, ISO dates), quoted table names, and a queue's table names."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql

from .errors import PgmqSparkError

APPLICATION_NAME = "pgmq-spark"


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
