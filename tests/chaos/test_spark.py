"""The chaos load's Spark streaming query (chaos/spark_query.py): the restart
scenario with the query in the load (on a throwaway server; skipped without pyspark or java),
the supervisor's reading of a dead query, and the --spark option."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos import cli, spark_query
from chaos.runner import BY_NAME, RECOVERY_LIMIT, run_scenario
from chaos.spark_query import pending_batch, short_error

WHY_NOT = spark_query.unavailable()

WORKER_FAILURE = """[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback
  File "/x/pgmq_build/spark/snapshot.py", line 80, in read_range
psycopg.errors.AdminShutdown: terminating connection due to administrator command
SQLSTATE: 57P01

JVM stacktrace:
org.apache.spark.SparkException: Job aborted due to stage failure
\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:1)
Caused by: org.apache.spark.api.python.PythonException: see above"""


def test_a_deaths_reason_is_the_python_exception_behind_it():
    assert short_error(WORKER_FAILURE) == (
        "[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback <- "
        "psycopg.errors.AdminShutdown: terminating connection due to administrator command")
    assert short_error("Writing job failed.\n\nJVM stacktrace:\norg.apache.X: y") == \
        "Writing job failed."
    assert short_error(None) == "stopped without an error"


def test_the_batch_a_restart_runs_again(tmp_path: Path):
    assert pending_batch(tmp_path) is None  # a query that never planned a batch
    for sub, ids in (("offsets", (0, 1, 2)), ("commits", (0, 1))):
        (tmp_path / sub).mkdir()
        for i in ids:
            (tmp_path / sub / str(i)).write_text("v1\n")
        (tmp_path / sub / ".0.crc").write_text("")
    assert pending_batch(tmp_path) == 2  # planned, not committed: Spark runs it again
    (tmp_path / "commits" / "2").write_text("v1\n")
    assert pending_batch(tmp_path) is None


def test_the_spark_option():
    assert cli.parse_args([]).spark is False
    assert cli.parse_args(["--no-spark", "--long"]).spark is False
    if WHY_NOT is None:
        assert cli.parse_args(["--long"]).spark is True  # on with --long
        assert cli.parse_args(["--spark"]).spark is True
    else:
        with pytest.raises(SystemExit):
            cli.parse_args(["--spark"])


@pytest.mark.chaos
@pytest.mark.skipif(WHY_NOT is not None, reason=f"no Spark here: {WHY_NOT}")
def test_restart_with_the_spark_query(capsys):
    with capsys.disabled():
        r = run_scenario(BY_NAME["restart"], spark=True)
    v, sp = r["ledger"], r["spark"]
    assert v["lost"] == 0 and v["beyond_rules"] == 0, v
    # every message sent to the query went through it exactly once and was acked at the source
    counted = v["spark"]
    assert counted["sent"] > 100 and counted["through"] == counted["archived"] == counted["sent"]
    assert counted["staging_left"] == 0
    assert sp["rows"] == counted["through"]  # Spark's own progress reports agree
    assert sp["running_at_end"], sp  # it kept going, or its supervisor brought it back
    assert len(sp["recovery_seconds"]) == 2
    assert all(s is not None and s <= RECOVERY_LIMIT for s in r["recovery_seconds"]), r
    assert r["left_after_drain"] == 0
    assert r["ok"]
