"""Spark tests: one local[2] SparkSession for the whole session (small memory, 2 shuffle
partitions), on top of the throwaway PostgreSQL and the per-test database of tests/conftest.py.
Each test module skips itself when pyspark (the spark extra) is missing; the spark fixture skips
when java is missing."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parents[2]

def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: needs pyspark and java (tests/spark)")


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("no java for Spark")
    # Python workers must run this interpreter and import this checkout (not another install).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))])
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("pgmq-spark-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.default.parallelism", "2")
               .config("spark.driver.memory", "1g")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.sql.streaming.stopTimeout", "30s")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def sql(conn: psycopg.Connection) -> Callable[..., list[tuple]]:
    def run(query: str, *params: object) -> list[tuple]:
        cur = conn.execute(query, params or None)
        return cur.fetchall() if cur.description else []
    return run


@pytest.fixture
def make_queue(conn: psycopg.Connection) -> Callable[[str], str]:
    def make(name: str) -> str:
        conn.execute("SELECT pgmq.create(%s)", (name,))
        return name
    return make
