"""Plain helper functions shared by the tests (fixtures are in tests/conftest.py): assertions,
queries, sending N messages, pg_partman, waiting, threads and the command line."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator

import psycopg
import pytest


@contextlib.contextmanager
def raises_sql(sqlstate: str, message: str | None = None) -> Iterator[None]:
    """The block fails with this SQLSTATE (and this exact primary message, when given)."""
    with pytest.raises(psycopg.Error) as info:
        yield
    err = info.value
    assert err.sqlstate == sqlstate, f"expected {sqlstate}, got {err.sqlstate}: {err}"
    if message is not None:
        assert err.diag.message_primary == message


def scalar(conn: psycopg.Connection, sql: str, params: object = None) -> object:
    row = conn.execute(sql, params).fetchone()
    assert row is not None
    return row[0]


def column(conn: psycopg.Connection, sql: str, params: object = None) -> list:
    return [r[0] for r in conn.execute(sql, params).fetchall()]


def notices(conn: psycopg.Connection) -> list[tuple[str, str]]:
    """Start collecting (severity, message) of notices on conn; returns the live list."""
    seen: list[tuple[str, str]] = []
    conn.add_notice_handler(lambda d: seen.append((d.severity_nonlocalized, d.message_primary)))
    return seen


@contextlib.contextmanager
def restored_copy(conn: psycopg.Connection, dsn: str, tmp_path) -> Iterator[psycopg.Connection]:
    """pg_dump -Fc the test database, pg_restore it into a new database and yield an autocommit
    connection to that copy; the copy is dropped afterwards."""
    import subprocess
    import uuid

    from pgmq_build.cluster import pg_bindir

    dump, bindir, name = tmp_path / "db.dump", pg_bindir(), f"restored_{uuid.uuid4().hex[:8]}"
    subprocess.run([str(bindir / "pg_dump"), "-Fc", "-f", str(dump), "-d", dsn], check=True)
    conn.execute(f"CREATE DATABASE {name}")
    target = dsn.replace(f"dbname={conn.info.dbname}", f"dbname={name}")
    try:
        subprocess.run([str(bindir / "pg_restore"), "--exit-on-error", "-d", target, str(dump)], check=True)
        with psycopg.connect(target, autocommit=True) as copy:
            yield copy
    finally:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def send_n(conn: psycopg.Connection, queue: str, n: int, start: int = 1, **extra: object) -> list[int]:
    """Send n messages {"n": start}, ..., {"n": start + n - 1} (plus the ``extra`` keys in each)
    to queue with one pgmq.send_batch; returns their msg_ids in that order."""
    return column(conn, "SELECT * FROM pgmq.send_batch(%s, (SELECT array_agg(jsonb_build_object('n', g) "
                        "|| %s::jsonb ORDER BY g) FROM generate_series(%s::int, %s::int) g))",
                  (queue, json.dumps(extra), start, start + n - 1))


# pg_partman in schema `partman`, as its 4.x documentation installs it.
PARTMAN_SQL = ("CREATE SCHEMA partman", "CREATE EXTENSION pg_partman SCHEMA partman")
NO_PARTMAN = "pg_partman is not installed on the server: run tools/ensure-deps.sh"


def partman_available(conn: psycopg.Connection) -> bool:
    """The server has pg_partman's files (the tests create the extension per database)."""
    return bool(scalar(conn, "SELECT count(*) FROM pg_available_extensions WHERE name = 'pg_partman'"))


def install_partman(conn: psycopg.Connection) -> None:
    for stmt in PARTMAN_SQL:
        conn.execute(stmt)


def wait_for(pred: Callable[[], object], timeout: float = 15.0, what: str = "condition") -> None:
    """Poll pred every 20 ms until it is true; fail the test after timeout seconds."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def run_threads(threads: Iterable[threading.Thread]) -> None:
    """Start every thread, then wait for all of them; then raise the first exception one of them
    did not catch (pytest would only warn of it, and a test whose other threads did the work
    would pass)."""
    threads = list(threads)
    raised: list[BaseException] = []
    previous = threading.excepthook
    threading.excepthook = lambda args: raised.append(args.exc_value)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        threading.excepthook = previous
    if raised:
        raise raised[0]


def run_cli(*args: str, input: str | None = None):
    """`pgmq-build ARGS...` in-process (click's CliRunner; `input` is its stdin); returns the
    click Result."""
    from click.testing import CliRunner

    from pgmq_build import cli

    return CliRunner().invoke(cli.main, list(args), input=input)


# -- fault tests (test_crash, test_delivery_stress) ---------------------------------------------

def terminate_clients(dsn: str) -> int:
    """pg_terminate_backend every other client backend of the database; how many there were."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        return admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_type = 'client backend'").fetchone()[0]


def wait_until_empty(conn: psycopg.Connection, queue: str, seconds: float) -> None:
    """Poll until the queue table is empty or the time is up (the caller checks which)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if scalar(conn, f"SELECT count(*) FROM pgmq.q_{queue}") == 0:
            return
        time.sleep(0.2)


def message_places(conn: psycopg.Connection, queue: str, dead: str) -> tuple[Counter, dict[str, list[int]]]:
    """Where each message {"n": ...} is: the consumers' `consumed` table (a Counter of n), and
    the queue, its archive and the dead-letter queue."""
    consumed = Counter(n for (n,) in conn.execute("SELECT n FROM consumed"))
    places = {name: [int(m["n"]) for (m,) in conn.execute(f"SELECT message FROM pgmq.{table}")]
              for name, table in (("queue", f"q_{queue}"), ("archive", f"a_{queue}"),
                                  ("dead letters", f"q_{dead}"))}
    return consumed, places


def lost_and_twice(n: int, consumed: Counter, places: dict[str, list[int]]) -> tuple[list[int], list[int]]:
    """Messages 1..n found nowhere, and those found in more than one place (or consumed twice)."""
    where = Counter(consumed)
    for ns in places.values():
        where.update(ns)
    return [i for i in range(1, n + 1) if where[i] == 0], sorted(i for i, k in where.items() if k > 1)
