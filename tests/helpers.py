"""Small assertion helpers shared by the integration tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

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
