"""Worker settings that only the database can judge: a queue given to the worker that does not
exist is refused (exit 2) after one look at the catalog, before any thread starts."""

from __future__ import annotations

import threading

import pytest
from click.testing import CliRunner

from pgmq_build.cli import main
from pgmq_build.worker import SettingError, Worker


def test_a_queue_that_does_not_exist_is_refused_before_any_thread_starts(dsn, conn):
    conn.execute("SELECT pgmq.create('Jobs')")
    threads = threading.active_count()
    for run in (lambda w: w.start(), lambda w: w.run_until_idle(timeout=5)):
        with pytest.raises(SettingError, match=r"no such queue: 'jobs', 'nope' \(queue names are case-sensitive\)"):
            run(Worker(dsn, ["Jobs", "jobs", "nope"]))
        assert threading.active_count() == threads
    # the option from the documented variable (PGMQ_BUILD_WORKER_QUEUE), split on whitespace
    result = CliRunner().invoke(main, ["worker", "--dsn", dsn, "--once", "--log-format", "text"],
                                env={"PGMQ_BUILD_WORKER_QUEUE": "Jobs nope"})
    assert result.exit_code == 2
    assert "bad_options setting=queues error=no such queue: 'nope'" in result.output
