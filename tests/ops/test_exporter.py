"""The Prometheus exporter (`pgmq-build metrics`) against a real server: the text format parsed
with prometheus_client's parser, values following sends and reads, the HTTP server, and a
database that goes away (pgmq_up 0, no crash)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import psycopg
import pytest

from pgmq_build.cluster import _free_port
from pgmq_build.manifest import VERSION
from pgmq_build.ops import metrics
from tests.helpers import send_n, wait_for
from tests.ops.support import q, samples, scrape, spawn, stop


def exported(ops) -> dict:
    result = ops("metrics")
    assert result.exit_code == 0, result.output
    return samples(result.stdout)


def test_printed_once_and_following_sends_and_reads(ops, conn, queue):
    before = exported(ops)
    assert before[("pgmq_up", ())] == 1
    assert before[("pgmq_build_info", (("extension_version", VERSION), ("version", VERSION)))] == 1
    assert before[("pgmq_queue_depth_messages", q("jobs"))] == 0
    assert before[("pgmq_queue_sent_messages_total", q("jobs"))] == 0
    assert before[("pgmq_queue_oldest_message_age_seconds", q("jobs"))] == 0
    assert before[("pgmq_queue_paused", q("jobs"))] == 0
    assert before[("pgmq_queue_table_bytes", q("jobs"))] > 0

    send_n(conn, queue, 5)
    conn.execute("SELECT * FROM pgmq.read('jobs', 60, 2)")
    conn.execute("SELECT pgmq.send('jobs', '{}', 300)")
    conn.execute("SELECT pgmq.pause('jobs')")
    after = exported(ops)
    assert after[("pgmq_queue_sent_messages_total", q("jobs"))] == 6
    assert after[("pgmq_queue_depth_messages", q("jobs"))] == 6
    assert after[("pgmq_queue_messages", q("jobs", state="visible"))] == 3
    assert after[("pgmq_queue_messages", q("jobs", state="in_flight"))] == 2
    assert after[("pgmq_queue_messages", q("jobs", state="delayed"))] == 1
    assert after[("pgmq_queue_oldest_message_age_seconds", q("jobs"))] >= 0
    assert after[("pgmq_queue_paused", q("jobs"))] == 1

    conn.execute("SELECT pgmq.archive('jobs', msg_id) FROM pgmq.q_jobs")
    archived = exported(ops)
    assert archived[("pgmq_queue_depth_messages", q("jobs"))] == 0
    assert archived[("pgmq_queue_archive_messages", q("jobs"))] == 6
    assert archived[("pgmq_queue_sent_messages_total", q("jobs"))] == 6  # a counter


def test_dead_letter_and_callback_series(ops, conn, queue):
    conn.execute("SELECT pgmq.create('jobs_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'jobs_dlq')")
    (msg_id,) = send_n(conn, queue, 1)
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (msg_id,))
    got = exported(ops)
    assert got[("pgmq_queue_dead_letter_messages", q("jobs", dead_letter_queue="jobs_dlq"))] == 1
    assert not any(name == "pgmq_queue_dead_letter_messages" and dict(labels)["queue"] == "jobs_dlq"
                   for name, labels in got)  # the DLQ itself has none
    assert not any(name == "pgmq_queue_callbacks_total" for name, _ in got)  # no callbacks here


def test_json(ops):
    result = ops("metrics", "--json")
    assert result.exit_code == 0
    assert json.loads(result.stdout) == {"queues": [], "counters": [], "failures": [], "consumers": [], "subscriptions": [], "streams": [],
                                         "build": {"version": VERSION, "extension_version": VERSION}}


def test_unreachable_database_gives_up_0():
    source = metrics.QueueMetricsSource(f"host=127.0.0.1 port={_free_port()} connect_timeout=2")
    text = metrics.generate_latest(metrics.registry_for(metrics.QueueCollector(source.read)))
    got = samples(text.decode())
    assert got[("pgmq_up", ())] == 0
    assert not any(name.startswith("pgmq_queue_") for name, _ in got)
    # the exporter's own version still said; the extension's unknown
    assert got[("pgmq_build_info", (("extension_version", ""), ("version", VERSION)))] == 1


@pytest.fixture
def scratch_dsn(conn, dsn):
    """A database of its own with pgmq (the test may drop it); dropped at the end."""
    name = f"ops_scrape_{int(time.time() * 1000) % 10**8}"
    conn.execute(f"CREATE DATABASE {name}")
    target = dsn.replace(f"dbname={conn.info.dbname}", f"dbname={name}")
    with psycopg.connect(target, autocommit=True) as c:
        c.execute("CREATE EXTENSION pgmq")
        c.execute("SELECT pgmq.create('jobs')")
    yield target
    conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_served_scrapes_query_each_time_and_survive_the_database_going_away(conn, scratch_dsn):
    port = _free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    proc = spawn("metrics", "--dsn", scratch_dsn, "--serve", f"127.0.0.1:{port}")
    try:
        first = {}

        def answers() -> bool:
            try:
                first.update(scrape(url))
            except (urllib.error.URLError, ConnectionError):
                return proc.poll() is not None  # stop waiting if it died
            return True

        wait_for(answers, timeout=20, what="the exporter to answer")
        assert proc.poll() is None
        assert first[("pgmq_up", ())] == 1 and first[("pgmq_queue_depth_messages", q("jobs"))] == 0
        assert first[("pgmq_scrape_duration_seconds", ())] > 0
        with psycopg.connect(scratch_dsn, autocommit=True) as c:
            send_n(c, "jobs", 3)
            # its kept connection is killed: the next scrape reconnects at once
            c.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                      "WHERE application_name = 'pgmq-build' AND pid <> pg_backend_pid()")
        second = scrape(url)
        assert second[("pgmq_up", ())] == 1
        assert second[("pgmq_queue_depth_messages", q("jobs"))] == 3
        assert second[("pgmq_queue_sent_messages_total", q("jobs"))] == 3

        conn.execute(f"DROP DATABASE {scratch_dsn.rsplit('dbname=', 1)[1]} WITH (FORCE)")
        down = scrape(url)
        assert down[("pgmq_up", ())] == 0
        assert ("pgmq_queue_depth_messages", q("jobs")) not in down
        assert proc.poll() is None  # still serving
    finally:
        code, err = stop(proc)
    assert code == 0, err
    assert "serving http://127.0.0.1" in err


def test_serve_refuses_a_bad_address(ops):
    result = ops("metrics", "--serve", "nowhere")
    assert result.exit_code == 2 and "HOST:PORT" in result.stderr
