"""What the server spent on a measured segment: CPU of the backends serving the clients, and WAL.

CPU: utime + stime of each backend process serving a benchmark connection (its pid is the
connection's ``pg_backend_pid()``, which libpq reports as ``conn.info.backend_pid``), read from
``/proc/<pid>/stat`` before and after the segment, in clock ticks (``SC_CLK_TCK``, usually 100 a
second: 10 ms resolution per process per sample). That needs the server on this machine, in this
PID namespace; otherwise (a remote --dsn, a container) it is unknown (None), never a guess. The
server's other processes (WAL writer, checkpointer, autovacuum) are not counted.

WAL: ``pg_wal_lsn_diff`` of ``pg_current_wal_lsn()`` before and after, cluster-wide: meaningful
because one system runs at a time (and includes the full-page images the segment's first
changes to each page write after the CHECKPOINT that precedes every segment).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psycopg

CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def parse_proc_stat(text: str) -> tuple[str, int]:
    """(comm, utime + stime in clock ticks) from the text of /proc/<pid>/stat.

    The second field, comm, is in parentheses and may itself hold spaces and parentheses, so
    the fields are counted from the last ')': then state is field 3, utime 14 and stime 15."""
    open_, close = text.find("("), text.rfind(")")
    if open_ < 0 or close < open_:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    rest = text[close + 1:].split()
    if len(rest) < 13:
        raise ValueError(f"not a /proc/<pid>/stat line: {text[:80]!r}")
    return text[open_ + 1:close], int(rest[11]) + int(rest[12])


def ticks_to_us(ticks: int, clk_tck: int = CLK_TCK) -> float:
    return ticks * 1_000_000 / clk_tck


def backend_ticks(pids: list[int], proc: str = "/proc") -> int | None:
    """Total utime + stime of these server processes, or None if any is not a local postgres
    process (gone, another machine's pid, or some other program that happens to hold it)."""
    total = 0
    for pid in pids:
        try:
            with open(f"{proc}/{pid}/stat") as fh:
                comm, ticks = parse_proc_stat(fh.read())
        except (OSError, ValueError):
            return None
        if comm != "postgres":
            return None
        total += ticks
    return total


def partitions_and_mb(conn: psycopg.Connection, table: str) -> tuple[int, float]:
    """(child tables, MB of the table and its children with their indexes) of a table, as the
    big-queue and archive benches report its size on disk."""
    n, size = conn.execute(
        "SELECT count(*) FILTER (WHERE c.oid <> %s::regclass), coalesce(sum(pg_total_relation_size(c.oid)), 0) "
        "FROM pg_class c WHERE c.oid = %s::regclass "
        "OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %s::regclass)",
        (table, table, table)).fetchone()
    return int(n), round(float(size) / 1048576, 1)


def is_local(conn: psycopg.Connection) -> bool:
    """Whether the server is reached on this machine (a Unix socket or a loopback address)."""
    host = conn.info.host or ""
    return host.startswith("/") or host in LOCAL_HOSTS


@dataclass(frozen=True)
class Probe:
    ticks: int | None  # the clients' backends' CPU so far
    lsn: str


@dataclass(frozen=True)
class Usage:
    """What a segment cost the server."""

    cpu_us: float | None
    wal_bytes: int


class Meter:
    """Samples the server before and after a segment on an admin connection of its own (any
    database of the cluster: the WAL position is cluster-wide). Thread-safe enough for the
    runner: it is called by one thread at a time (the barrier's action, then the main thread)."""

    def __init__(self, admin: psycopg.Connection) -> None:
        self.admin = admin
        self.cpu = is_local(admin) and backend_ticks([admin.info.backend_pid]) is not None

    def sample(self, pids: list[int]) -> Probe:
        ticks = backend_ticks(pids) if self.cpu else None
        lsn = self.admin.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
        return Probe(ticks, lsn)

    def usage(self, before: Probe, after: Probe) -> Usage:
        wal = self.admin.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint",
                                 (after.lsn, before.lsn)).fetchone()[0]
        cpu = (ticks_to_us(after.ticks - before.ticks)
               if before.ticks is not None and after.ticks is not None else None)
        return Usage(cpu, int(wal))
