"""The exactly-once publishing paths (psycopg + pyarrow, no pyspark import): tasks stage their
encoded rows in a staging table, and one transaction in the driver moves a whole job (or a
stream's batch) into its target and forgets the staging rows; the stream sink and
``idempotencyKey`` also record committed batch ids in a progress table, so that a replayed batch
publishes nothing. Also the connector's tables' creation and their owners' check."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

import numpy as np
import psycopg
import pyarrow as pa
from psycopg import sql

from .. import headers as pgmq_headers
from . import copybinary
from .connections import connect, qualified
from .errors import PgmqSparkError
from .publishing import Encoded, Target
from .stream_events import STREAM_COPY_COLUMNS, current_segment

# The connector's own objects (staging rows, sink progress) live here unless options say otherwise.
DEFAULT_SCHEMA = "pgmq_spark"
DEFAULT_STAGING_TABLE = f"{DEFAULT_SCHEMA}.staging"
DEFAULT_PROGRESS_TABLE = f"{DEFAULT_SCHEMA}.sink_batches"
# Sink progress rows kept per sink (older batch ids can never be replayed by Spark).
PROGRESS_KEEP = 100
# Staging rows older than this belong to dead jobs and are removed by any later commit.
STAGING_RETENTION = timedelta(days=7)

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


_STAGING_COPY = "(job_id, part_id, ord, vt, message, headers, routing_key, delay_s)"


def staging_copy_data(job_id: str, part_id: str, first_ord: int, enc: Encoded) -> pa.Buffer:
    """Binary COPY rows of one encoded batch for the staging table's columns."""
    n = enc.num_rows
    return copybinary.rows([
        (pa.repeat(pa.scalar(job_id, pa.string()), n), copybinary.TEXT),
        (pa.repeat(pa.scalar(part_id, pa.string()), n), copybinary.TEXT),
        (pa.array(np.arange(first_ord, first_ord + n, dtype=np.int64)), copybinary.INT8),
        (enc.vt, copybinary.TIMESTAMPTZ), (enc.message, copybinary.JSONB),
        (enc.headers, copybinary.JSONB),
        (enc.routing_key if enc.routing_key is not None else pa.nulls(n, pa.string()),
         copybinary.TEXT),
        (enc.delay_s if enc.delay_s is not None else pa.nulls(n, pa.int32()), copybinary.INT4),
    ])


def stage_task(cur: psycopg.Cursor, staging: str, job_id: str, part_id: str,
               batches: Iterable[Encoded]) -> int:
    """Every batch of a task into the staging table through one ``COPY ... (FORMAT binary)``,
    numbered (``ord``) in input order. Returns the rows staged."""
    n = 0
    stmt = sql.SQL("COPY {} " + _STAGING_COPY + " FROM STDIN (FORMAT binary)").format(
        qualified(staging))
    with cur.copy(stmt) as copy:
        copy.write(copybinary.SIGNATURE)
        for enc in batches:
            if enc.num_rows:
                copy.write(staging_copy_data(job_id, part_id, n, enc))
                n += enc.num_rows
        copy.write(copybinary.TRAILER)
    return n


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
    if target.stream is not None:
        cur.execute("SET LOCAL enable_sort = off")  # staging order from its index, as below
        cur.execute(sql.SQL("INSERT INTO {} " + STREAM_COPY_COLUMNS + " SELECT s.message, s.headers "
                            "{} ORDER BY s.part_id, s.ord").format(
                                current_segment(cur, target.stream), sel), params)
        n = cur.rowcount
        cur.execute("RESET enable_sort")
        return n
    assert target.queue is not None
    special = sql.SQL("coalesce(s.headers ?| {}::text[], false)").format(sql.Literal(list(pgmq_headers.INSERT_RULES)))
    # Read the staged rows in (part_id, ord) order from the staging index rather than sorting
    # them: left alone, the planner prefers a sequential scan and a sort, which spills to disk
    # with the default work_mem (measured: this INSERT took 12-26% longer).
    cur.execute(sql.SQL(
        "SELECT pgmq._note_priorities(%s::text) FROM (SELECT 1 {sel} "
        "AND coalesce((s.headers->>{prio})::integer, 0) <> 0 LIMIT 1) x").format(
            sel=sel, prio=sql.Literal(pgmq_headers.PRIORITY)), [target.queue.queue, *params])
    cur.execute("SET LOCAL enable_sort = off")
    cur.execute(sql.SQL(
        "INSERT INTO {q} (vt, message, headers, priority) "
        "SELECT s.vt, s.message, s.headers, coalesce((s.headers->>{prio})::integer, 0) "
        "{sel} AND NOT {special} ORDER BY s.part_id, s.ord").format(
            q=target.queue.q, sel=sel, special=special, prio=sql.Literal(pgmq_headers.PRIORITY)), params)
    n = cur.rowcount
    cur.execute("RESET enable_sort")
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
        part_ids = [p for p, _ in parts]
        if expected:
            moved = move_staged(cur, staging, job_id, part_ids, target)
        else:
            cur.execute(sql.SQL("SELECT count(*) FROM {} WHERE job_id = %s AND "
                                "part_id = ANY(%s::text[])").format(qualified(staging)),
                        (job_id, part_ids))
            moved = int(cur.fetchone()[0])
        # Every staged row of the parts was published, in this transaction: a count other than
        # the tasks' rolls the whole job back.
        if moved != expected:
            raise PgmqSparkError(f"staging table {staging} holds {moved} rows of job {job_id}, "
                                 f"expected {expected}: refusing to publish a partial job")
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
