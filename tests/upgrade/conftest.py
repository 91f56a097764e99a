"""Fixtures of the upgrade tests: databases made on the test server (dropped before the roles of
make_role, tests/conftest.py, which hold grants in them) and whether pg_partman is there."""

from __future__ import annotations

import pytest

from tests.helpers import partman_available as has_partman
from tests.upgrade.scenario import Databases, connected


@pytest.fixture(scope="session")
def partman_available(pg_cluster) -> bool:
    with connected(pg_cluster.dsn()) as c:
        return has_partman(c)


@pytest.fixture
def dbs(make_role, conn, dsn):
    """Databases for one test; dropped before the roles (which hold grants in them)."""
    databases = Databases(conn, dsn)
    yield databases
    databases.drop_all()


@pytest.fixture
def role(make_role) -> str:
    return make_role("up_role")
