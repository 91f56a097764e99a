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
