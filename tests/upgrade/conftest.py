"""Fixtures of the upgrade tests: roles (dropped after the databases that hold their grants) and
databases made on the test server."""

from __future__ import annotations

import uuid

import pytest

from tests.upgrade.scenario import Databases


@pytest.fixture
def make_role(conn):
    """make_role(prefix, login=False) -> a new role's name; all are dropped at the end."""
    made: list[str] = []

    def _make(prefix: str, login: bool = False) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        conn.execute(f"CREATE ROLE {name}{' LOGIN' if login else ''}")
        made.append(name)
        return name

    yield _make
    for name in reversed(made):
        conn.execute(f"DROP ROLE IF EXISTS {name}")


@pytest.fixture
def dbs(make_role, conn, dsn):
    """Databases for one test; dropped before the roles (which hold grants in them)."""
    databases = Databases(conn, dsn)
    yield databases
    databases.drop_all()


@pytest.fixture
def role(make_role) -> str:
    return make_role("up_role")
