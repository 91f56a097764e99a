"""Shared fixtures: one throwaway PostgreSQL server per test session (started as an unprivileged
user when we are root), a template database with `CREATE EXTENSION pgmq` made once by
pytest-postgresql, and a fresh clone of it for every test."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from pytest_postgresql import factories
from pytest_postgresql.executors.noop import NoopExecutor

from pgmq_build import install
from pgmq_build.cluster import TempCluster
from pgmq_build.manifest import MANIFEST
from pgmq_build.paths import history_dir
from pgmq_build.replication import ReplicaPair
from tests.helpers import NO_PARTMAN, install_partman, partman_available


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under pytest-xdist (`make test` runs two workers), the Spark tests stay in one worker:
    each worker that met one would start a Spark session of its own (a JVM, ~15 s)."""
    spark_dir = Path(__file__).parent / "spark"
    for item in items:
        if spark_dir in Path(item.fspath).parents:
            item.add_marker(pytest.mark.xdist_group("spark"))



class _ServerExecutor(NoopExecutor):
    """Connection details of our TempCluster, for pytest-postgresql's noproc fixture.
    No base template: the noproc fixture builds its own from scratch."""

    @property
    def template_dbname(self) -> None:  # type: ignore[override]
        return None


def _ensure_extension_files() -> None:
    """The server must see the current extension files, and the released scripts of
    history/extension/ (tests create old versions and upgrade from them); refresh them when we can."""
    dest = install.sharedir() / "extension"
    try:
        install.install_files(also=[history_dir()])
    except install.InstallError:
        pass
    else:
        # A script of ours that neither extension/ nor history/ holds (an unreleased step an
        # earlier tree generated, say pgmq--1.13.0--2.12.0.sql before the 1.13.x bridge) could
        # offer ALTER EXTENSION a shorter path than the current scripts: the tests would run it.
        # Upstream's own scripts (versions 1.x: tests put pgmq--1.13.0.sql there for a while,
        # test_migrate_upstream.py's upstream_extension) are not ours to remove: this runs again
        # whenever a test starts a replica pair, while the other worker may be using them.
        ours = {f.name for f in [*install.extension_files(), *history_dir().glob("pgmq--*.sql")]}
        for stale in dest.glob("pgmq--*.sql"):
            if stale.name not in ours and not stale.stem.split("--")[-1].startswith("1."):
                stale.unlink(missing_ok=True)
        return
    for f in [*install.extension_files(), *sorted(history_dir().glob("pgmq--*.sql"))]:
        installed = dest / f.name
        if not installed.exists() or installed.read_bytes() != f.read_bytes():
            pytest.exit(
                f"{installed} is missing or stale and {dest} is not writable: run `sudo make install`",
                returncode=2,
            )


@pytest.fixture(scope="session", autouse=True)
def _current_extension_files() -> None:
    """Every test runs the current SQL, those that start their own TempCluster too: run alone
    after a template change, a stress test otherwise ran whatever an earlier run had installed."""
    _ensure_extension_files()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[TempCluster]:
    _ensure_extension_files()
    with TempCluster() as cluster:
        yield cluster


@contextlib.contextmanager
def _replica_pair() -> Iterator[ReplicaPair]:
    _ensure_extension_files()
    with ReplicaPair() as pair:
        with psycopg.connect(pair.dsn(), autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
        yield pair


@pytest.fixture
def replica_pair() -> Iterator[ReplicaPair]:
    """A primary and its synchronous hot standby of our own (tests that fail over destroy
    them), with `CREATE EXTENSION pgmq` in database postgres; pair.dsn() is multi-host."""
    with _replica_pair() as pair:
        yield pair


@pytest.fixture(scope="module")
def standby_pair() -> Iterator[ReplicaPair]:
    """replica_pair shared by a module's tests (which must not fail it over)."""
    with _replica_pair() as pair:
        yield pair


@pytest.fixture(scope="session")
def pg_server(pg_cluster: TempCluster) -> NoopExecutor:
    return _ServerExecutor(host="127.0.0.1", port=pg_cluster.port, user=pg_cluster.superuser,
                           options="", dbname="pgmq_base")


def load_pgmq(**kw: object) -> None:
    kw.pop("autocommit", None)
    with psycopg.connect(**kw, autocommit=True) as conn:  # type: ignore[arg-type]
        conn.execute("CREATE EXTENSION pgmq")


pgmq_proc = factories.postgresql_noproc(dbname="pgmq_test", load=[load_pgmq], depends_on="pg_server")
db = factories.postgresql("pgmq_proc")


@pytest.fixture
def dsn(db: psycopg.Connection) -> str:
    info = db.info
    return f"host={info.host} port={info.port} user={info.user} dbname={info.dbname}"


@pytest.fixture
def connect(dsn: str) -> Iterator[Callable[..., psycopg.Connection]]:
    """Open extra connections to the test database; all are closed at teardown."""
    opened: list[psycopg.Connection] = []

    def _connect(autocommit: bool = True, **kw: object) -> psycopg.Connection:
        conn = psycopg.connect(dsn, autocommit=autocommit, **kw)  # type: ignore[arg-type]
        opened.append(conn)
        return conn

    yield _connect
    for conn in opened:
        with contextlib.suppress(Exception):
            conn.close()


@pytest.fixture
def conn(connect: Callable[..., psycopg.Connection]) -> psycopg.Connection:
    """An autocommit connection to the test database."""
    return connect()


@pytest.fixture
def queue(conn: psycopg.Connection) -> str:
    conn.execute("SELECT pgmq.create('jobs')")
    return "jobs"


@pytest.fixture
def make_role(conn: psycopg.Connection) -> Iterator[Callable[..., str]]:
    """make_role(prefix, login=False) -> the name of a new role "<prefix>_<8 hex>". At the end
    each is dropped, with what it owns (CASCADE) and its grants in the test database; fixtures
    that make other databases where the roles hold grants drop those first (tests/upgrade)."""
    made: list[str] = []

    def _make(prefix: str, login: bool = False) -> str:
        name = f"{prefix}_{uuid.uuid4().hex[:8]}"
        conn.execute(f"CREATE ROLE {name}{' LOGIN' if login else ''}")
        made.append(name)
        return name

    yield _make
    for name in reversed(made):
        if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (name,)).fetchone():
            conn.execute(f"DROP OWNED BY {name} CASCADE")
            conn.execute(f"DROP ROLE {name}")


@pytest.fixture
def partman(conn: psycopg.Connection) -> str:
    """pg_partman in schema `partman` of the test database (skips when the server lacks it)."""
    if not partman_available(conn):
        pytest.skip(NO_PARTMAN)
    install_partman(conn)
    return "partman"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def manifest():
    return MANIFEST
