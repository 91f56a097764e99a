"""Where the Spark connector's consumption spends its time, statement by statement (no Spark):

    python3 -m pgmq_build.spark.profiling [--dsn DSN] [--rows 200000]

Each step runs the statement (or client-side conversion) that a Spark path runs, on ``rows``
messages of ~100 bytes, and prints its wall time and the server backend's CPU time (utime +
stime of the backend from /proc, so the server must run on this machine; 10 ms resolution),
both per row in microseconds. docs/performance/spark-consumption.md has the numbers. Without
--dsn a throwaway server is started (fsync=off).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import psycopg
import pyarrow as pa
from psycopg import sql

from . import claims, offsets, ranges, snapshot, stream_events
from .connections import connect, resolve_queue

QUEUE = "spark_profile"
STREAM = "spark_profile_stream"
_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class Step:
    name: str
    wall: float
    cpu: float  # the backend's CPU seconds (0 for client-only steps)


def backend_cpu(pid: int) -> float:
    """utime + stime of a local backend, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def _fill(conn: psycopg.Connection, rows: int) -> None:
    conn.execute("SELECT pgmq.purge_queue(%s)", (QUEUE,))
    conn.execute(f"TRUNCATE pgmq.a_{QUEUE}")
    conn.execute("SELECT pgmq.send_batch(%s, ARRAY(SELECT jsonb_build_object('order_id', g, "
                 "'customer', 'c-42', 'items', jsonb_build_array(1, 2, 3), 'note', repeat('x', 48)) "
                 "FROM generate_series(1, %s) g))", (QUEUE, rows))
    conn.execute(f"VACUUM ANALYZE pgmq.q_{QUEUE}")
    conn.execute("CHECKPOINT")


def profile(dsn: str, rows: int, log: Callable[[str], None] = print) -> list[Step]:
    steps: list[Step] = []
    conn = connect(dsn, autocommit=True)
    pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]

    def timed(name: str, fn: Callable[[], object], server: bool = True) -> object:
        c0, t0 = backend_cpu(pid), time.perf_counter()
        out = fn()
        wall, cpu = time.perf_counter() - t0, backend_cpu(pid) - c0
        steps.append(Step(name, wall, cpu if server else 0.0))
        log(f"{name:<58} {wall * 1e6 / rows:7.2f} us/row wall  "
            f"{(cpu if server else 0) * 1e6 / rows:7.2f} us/row server CPU")
        return out

    if conn.execute("SELECT 1 FROM pgmq.meta WHERE queue_name = %s", (QUEUE,)).fetchone():
        conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))
    conn.execute("SELECT pgmq.create(%s)", (QUEUE,))
    info = resolve_queue(conn, QUEUE)
    select, columns = snapshot.table_select(info, "queue")
    half = rows // 2

    def copy_raw(query: sql.Composable, params: tuple = (), fmt: str = "csv") -> int:
        n = 0
        with conn.cursor() as cur, cur.copy(sql.SQL("COPY ({}) TO STDOUT (FORMAT {})").format(
                query, sql.SQL(fmt)), params) as cp:
            for chunk in cp:
                n += len(chunk)
        return n

    def copy_arrow(query: sql.Composable, params: tuple, cols: tuple[str, ...]) -> pa.Table:
        with conn.cursor() as cur:
            return pa.Table.from_batches(list(snapshot.copy_out_batches(cur, query, params, cols)),
                                         schema=snapshot.arrow_schema(cols))

    try:
        # -- the snapshot read / the stream source's batch read (COPY csv of a msg_id range)
        _fill(conn, rows)
        everything = sql.SQL("{} WHERE msg_id > %s AND msg_id <= %s ORDER BY msg_id").format(select)
        timed("COPY csv of the rows (server, bytes discarded)", lambda: copy_raw(everything, (0, 1 << 62)))
        timed("COPY binary of the rows (server, bytes discarded)",
              lambda: copy_raw(everything, (0, 1 << 62), "binary"))
        table = timed("COPY csv -> Arrow (read_range: server + pyarrow.csv)",
                      lambda: copy_arrow(everything, (0, 1 << 62), columns))
        # -- the streaming source's ack: archive or delete of the delivered range
        everyone = (offsets.Offset(0), offsets.Offset(1 << 62))
        timed("archive a range, every id (pgmq.archive, 2.9.0)", lambda: offsets.ack_by_ids(
            conn, info, *everyone, "archive"))
        _fill(conn, rows)
        timed("archive a range (pgmq.ack_ranges)", lambda: offsets.ack_range(conn, info, *everyone, "archive"))
        _fill(conn, rows)
        timed("delete a range, every id (pgmq.delete, 2.9.0)", lambda: offsets.ack_by_ids(
            conn, info, *everyone, "delete"))
        _fill(conn, rows)
        timed("delete a range (pgmq.ack_ranges)", lambda: offsets.ack_range(conn, info, *everyone, "delete"))
        _fill(conn, rows)
        timed("plain DELETE of a range (no pgmq routine, the floor)", lambda: conn.execute(
            sql.SQL("DELETE FROM {} WHERE msg_id > 0").format(info.q)))

        # -- consume(): the lease (pgmq.read in 2 calls), then ack(delete) fenced by (msg_id, vt)
        _fill(conn, rows)
        timed("pgmq.read lease UPDATE only (2 x rows/2, count(*))", lambda: [conn.execute(
            "SELECT count(*) FROM pgmq.read(%s, 600, %s)", (QUEUE, half)).fetchone()
            for _ in range(2)])
        _fill(conn, rows)
        claimed = timed("claim: COPY csv of pgmq.read -> Arrow (2 x rows/2)", lambda: pa.Table.from_batches(
            [b for _ in range(2) for b in claims.claim(dsn, info, 600, half, None)]), server=False)
        ids = timed("ack client, 2.9.0: msg_id/vt to Python lists", lambda: (
            claimed.column("msg_id").to_pylist(), claimed.column("vt").to_pylist()), server=False)
        timed("ack, 2.9.0: fenced pgmq.delete (unnest join FOR UPDATE)", lambda: claims.fenced_finish(
            conn, info, ids[0], ids[1], "delete"))
        _fill(conn, rows)
        claimed = pa.Table.from_batches(
            [b for _ in range(2) for b in claims.claim(dsn, info, 600, half, None)]).combine_chunks()
        runs = timed("ack client: lease runs (ranges.lease_runs)", lambda: ranges.lease_runs(
            claimed.column("msg_id").chunk(0), claimed.column("vt").chunk(0)), server=False)
        timed(f"ack: pgmq.ack_ranges, fenced ({len(runs[0])} runs)", lambda: ranges.ack(
            conn, info, *runs, archive=False))

        # -- a stream subscription: its events between two positions, the position moved
        if conn.execute("SELECT 1 FROM pgmq.streams WHERE stream_name = %s", (STREAM,)).fetchone():
            conn.execute("SELECT pgmq.drop_stream(%s)", (STREAM,))
        conn.execute("SELECT pgmq.create_stream(%s)", (STREAM,))
        ref = stream_events.resolve_stream(conn, STREAM)
        conn.execute("SELECT pgmq.subscribe(%s, 'profile', 'earliest')", (STREAM,))
        start = stream_events.latest(conn, ref)
        conn.execute("SELECT count(*) FROM pgmq.stream_send_batch(%s, ARRAY(SELECT jsonb_build_object("
                     "'order_id', g, 'customer', 'c-42', 'items', jsonb_build_array(1, 2, 3), 'note', "
                     "repeat('x', 48)) FROM generate_series(1, %s) g))", (STREAM, rows))
        conn.execute(f"VACUUM ANALYZE pgmq.s_{STREAM}")
        end = timed("stream_tick (a position after the events)", lambda: stream_events.latest(conn, ref))
        a, b = stream_events.tick(conn, ref, start), stream_events.tick(conn, ref, end)
        ev_query = sql.SQL(stream_events._EVENTS).format(ref.t, sql.SQL("AND ev_id <= %(hi)s"))
        ev_params = {"after": a.snapshot, "upto": b.snapshot, "hi": b.last_ev_id}
        timed("COPY csv of the events (server, bytes discarded)", lambda: copy_raw(ev_query, ev_params))
        timed("COPY csv of the events -> Arrow (read_events)", lambda: copy_arrow(
            ev_query, ev_params, stream_events.EVENT_COLUMNS))
        timed("subscription moved (stream_rewind)", lambda: stream_events.move_to(
            conn, ref, "profile", end))
        del table
    finally:
        if conn.execute("SELECT 1 FROM pgmq.streams WHERE stream_name = %s", (STREAM,)).fetchone():
            conn.execute("SELECT pgmq.drop_stream(%s)", (STREAM,))
        conn.execute("SELECT pgmq.drop_queue(%s)", (QUEUE,))
        conn.close()
    return steps


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dsn")
    ap.add_argument("--rows", type=int, default=200_000)
    args = ap.parse_args(argv)
    if args.rows < 2:
        ap.error(f"--rows must be at least 2, got {args.rows}")
    if args.dsn:
        profile(args.dsn, args.rows)
        return 0
    from ..cluster import TempCluster
    from ..install import ensure_pgmq, install_files

    install_files()
    with TempCluster(settings={"max_wal_size": "8GB", "checkpoint_timeout": "1h"}) as cluster:
        with psycopg.connect(cluster.dsn(), autocommit=True) as c:
            ensure_pgmq(c)
        profile(cluster.dsn(), args.rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
