"""The admin commands (`pgmq-build queues`, `queue ...`, `exchange ...`, `dlq ...`) against a
real server: what they print (tables and --json), what they change, and their exit codes."""

from __future__ import annotations

import threading
import time

import pytest

from pgmq_build.ops.db import QUEUE_METRICS_COLUMNS
from pgmq_build.ops.exits import Exit
from tests.helpers import column, scalar, send_n


@pytest.fixture
def busy(conn, queue):
    """jobs: 2 visible, 1 in flight (leased), 1 delayed; 'other' empty."""
    send_n(conn, queue, 3)
    conn.execute("SELECT * FROM pgmq.read('jobs', 60, 1)")
    conn.execute("SELECT * FROM pgmq.send('jobs', '{\"late\": true}', 300)")
    conn.execute("SELECT pgmq.create('other')")
    return queue


@pytest.fixture
def dlq(conn, queue):
    """jobs dead-letters into jobs_dlq after one failed delivery; one message is there."""
    conn.execute("SELECT pgmq.create('jobs_dlq')")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 0, dead_letter_queue => 'jobs_dlq')")
    (msg_id,) = send_n(conn, queue, 1)
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    conn.execute("SELECT pgmq.nack('jobs', %s, 'boom')", (msg_id,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs_dlq") == 1
    return "jobs_dlq"


def by_name(doc, key="queues", name_key="queue_name"):
    return {q[name_key]: q for q in doc[key]}


# -- queues -----------------------------------------------------------------------------------

def test_queues_table_and_json(ops, ops_json, busy):
    doc = by_name(ops_json("queues", "--no-rates"))
    assert set(doc) == {"jobs", "other"}
    jobs = doc["jobs"]
    assert (jobs["depth"], jobs["visible"], jobs["in_flight"], jobs["delayed"]) == (4, 2, 1, 1)
    assert jobs["paused"] is False and jobs["send_rate"] is None
    assert list(jobs)[: len(QUEUE_METRICS_COLUMNS)] == list(QUEUE_METRICS_COLUMNS)
    table = ops("queues", "--no-rates")
    assert table.exit_code == 0, table.output
    lines = {line.split()[0]: line.split() for line in table.stdout.splitlines() if line.strip()}
    assert lines["jobs"][1:5] == ["4", "2", "1", "1"]  # depth, visible, in flight, delayed


def test_queues_send_rate_from_two_samples(ops_json, conn, queue, connect):
    other = connect()
    stop = threading.Event()

    def producer():
        while not stop.is_set():
            other.execute("SELECT pgmq.send('jobs', '{}')")
            time.sleep(0.02)

    t = threading.Thread(target=producer)
    t.start()
    try:
        doc = by_name(ops_json("queues"))
    finally:
        stop.set()
        t.join()
    assert doc["jobs"]["send_rate"] > 5  # ~50/s sent meanwhile, minus the machine's slowness


# -- queue ... ----------------------------------------------------------------------------------

def test_create_is_idempotent_and_says_so(ops_json, conn):
    assert ops_json("queue", "create", "fresh") == {"queue": "fresh", "created": True}
    assert ops_json("queue", "create", "fresh") == {"queue": "fresh", "created": False}
    assert ops_json("queue", "create", "fast", "--unlogged")["created"] is True
    assert scalar(conn, "SELECT is_unlogged FROM pgmq.list_queues() WHERE queue_name = 'fast'")


def test_pause_and_resume(ops, ops_json, conn, queue):
    send_n(conn, queue, 1)
    assert ops_json("queue", "pause", "jobs") == {"queue": "jobs", "paused": True, "changed": True}
    assert conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)").fetchall() == []
    again = ops("queue", "pause", "jobs")
    assert again.exit_code == 0 and "already paused" in again.stdout
    assert ops_json("queues", "--no-rates")["queues"][0]["paused"] is True
    assert ops_json("queue", "resume", "jobs")["changed"] is True
    assert len(conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)").fetchall()) == 1


def test_peek_does_not_consume(ops, ops_json, conn, queue):
    ids = send_n(conn, queue, 5)
    doc = ops_json("queue", "peek", "jobs", "--limit", "2", "--after", str(ids[0]))
    assert [m["msg_id"] for m in doc["messages"]] == ids[1:3]
    assert doc["messages"][0]["message"] == {"n": 2} and doc["messages"][0]["read_ct"] == 0
    assert column(conn, "SELECT read_ct FROM pgmq.q_jobs ORDER BY msg_id") == [0] * 5
    table = ops("queue", "peek", "jobs")
    assert table.exit_code == 0 and '{"n": 5}' in table.stdout
    conn.execute("SELECT pgmq.archive('jobs', %s::bigint)", (ids[0],))
    archived = ops_json("queue", "peek", "jobs", "--archived")
    assert [m["msg_id"] for m in archived["messages"]] == [ids[0]] and archived["archived"] is True


def test_queue_metrics_has_every_column(ops, ops_json, busy):
    doc = ops_json("queue", "metrics", "jobs")
    assert list(doc) == list(QUEUE_METRICS_COLUMNS)
    assert doc["queue_name"] == "jobs" and doc["depth"] == 4 and doc["total_sent"] == 4
    table = ops("queue", "metrics", "jobs")
    assert table.exit_code == 0 and "oldest_msg_age_sec" in table.stdout


def test_purge_refused_changes_nothing_then_purges(ops, ops_json, conn, queue):
    send_n(conn, queue, 3)
    refused = ops("queue", "purge", "jobs", input="n\n")
    assert refused.exit_code == Exit.ABORTED, refused.output
    assert "Delete all 3 message(s)" in refused.stderr and "aborted" in refused.stderr
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 3
    no_tty = ops("queue", "purge", "jobs", "--json")  # no answer at all (EOF): refused too
    assert no_tty.exit_code == Exit.ABORTED
    assert ops_json("queue", "purge", "jobs", input="y\n") == {"queue": "jobs", "purged": 3}
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0


def test_drop_refused_then_dropped_then_not_found(ops, ops_json, conn, queue):
    refused = ops("queue", "drop", "jobs", input="\n")  # the default is no
    assert refused.exit_code == Exit.ABORTED
    assert column(conn, "SELECT queue_name FROM pgmq.list_queues()") == ["jobs"]
    assert ops_json("queue", "drop", "jobs", "--yes") == {"queue": "jobs", "dropped": True, "messages": 0}
    assert column(conn, "SELECT queue_name FROM pgmq.list_queues()") == []
    gone = ops_json("queue", "drop", "jobs", "--yes", code=Exit.NOT_FOUND)
    assert gone == {"error": 'queue "jobs" does not exist', "sqlstate": None, "exit_code": 3}


@pytest.mark.parametrize("args", [("queue", "peek", "nope"), ("queue", "metrics", "nope"),
                                  ("queue", "purge", "nope", "--yes"), ("queue", "pause", "nope"),
                                  ("queue", "move", "nope", "jobs", "--yes"),
                                  ("queue", "move", "jobs", "nope", "--yes"),
                                  ("exchange", "drop", "nope", "--yes"),
                                  ("exchange", "bind", "nope", "jobs"),
                                  ("dlq", "peek", "jobs"), ("dlq", "redrive", "jobs", "--yes")])
def test_not_found_exits_3(ops, queue, args):
    result = ops(*args)
    assert result.exit_code == Exit.NOT_FOUND, result.output
    assert result.stderr.startswith("error: ") and "does not exist" in result.stderr


def test_database_error_exits_1_with_its_sqlstate(ops, ops_json):
    result = ops("exchange", "create", "bad-name")
    assert result.exit_code == Exit.DATABASE
    assert "(SQLSTATE 42602)" in result.stderr
    doc = ops_json("exchange", "create", "bad-name", code=Exit.DATABASE)
    assert doc["sqlstate"] == "42602" and doc["exit_code"] == 1


def test_usage_error_exits_2(ops):
    assert ops("queue", "peek", "jobs", "--limit", "0").exit_code == Exit.USAGE
    assert ops("dlq", "peek", "jobs", "--limit", "1001").exit_code == Exit.USAGE  # browse's max
    assert ops("queue", "frobnicate").exit_code == Exit.USAGE


# -- move and redrive in chunks -------------------------------------------------------------------

def xmins(conn, table):
    """Distinct inserting transactions of a table's rows."""
    return scalar(conn, f"SELECT count(DISTINCT xmin::text) FROM pgmq.{table}")


def test_move_refused_then_5000_in_chunks_with_progress(ops, ops_json, conn, queue):
    conn.execute("SELECT pgmq.create('target')")
    send_n(conn, queue, 5000)
    refused = ops("queue", "move", "jobs", "target", input="n\n")
    assert refused.exit_code == Exit.ABORTED and "Move 5,000 message(s)" in refused.stderr
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_target") == 0
    result = ops("queue", "move", "jobs", "target", "--yes", "--batch", "1000", "--json")
    assert result.exit_code == 0, result.output
    assert '"moved": 5000' in result.stdout and '"calls": 6' in result.stdout  # the 6th found none
    assert "5000/5000" in result.stderr  # the progress bar's last state
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_target") == 5000
    assert xmins(conn, "q_target") == 5  # one transaction per chunk
    # oldest first: the payloads keep their order
    assert column(conn, "SELECT (message->>'n')::int FROM pgmq.q_target ORDER BY msg_id")[:3] == [1, 2, 3]


def test_move_limit(ops_json, conn, queue):
    conn.execute("SELECT pgmq.create('target')")
    send_n(conn, queue, 30)
    doc = ops_json("queue", "move", "jobs", "target", "--yes", "--batch", "10", "--limit", "25")
    assert (doc["moved"], doc["calls"], doc["left"]) == (25, 3, 5)


def test_dlq_list_peek_and_redrive_to_the_source(ops, ops_json, conn, dlq):
    listed = ops_json("dlq", "list")["dead_letter_queues"]
    assert listed == [{"queue": "jobs_dlq", "sources": ["jobs"], "depth": 1,
                       "oldest_msg_age_sec": listed[0]["oldest_msg_age_sec"]}]
    assert ops("dlq", "list").stdout.split("\n")[3].split()[:3] == ["jobs_dlq", "jobs", "1"]
    table = ops("dlq", "peek", "jobs_dlq")
    assert table.exit_code == 0 and "nack" in table.stdout and "jobs" in table.stdout
    peeked = ops_json("dlq", "peek", "jobs_dlq")["messages"]
    assert peeked[0]["headers"]["x-pgmq-dead-letter"]["source_queue"] == "jobs"
    refused = ops("dlq", "redrive", "jobs_dlq", input="n\n")
    assert refused.exit_code == Exit.ABORTED
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs_dlq") == 1
    doc = ops_json("dlq", "redrive", "jobs_dlq", "--yes")
    assert (doc["moved"], doc["target"], doc["left"]) == (1, None, 0)
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs WHERE read_ct = 0") == 1


def test_redrive_5000_in_chunks(ops, conn, dlq):
    conn.execute("SELECT pgmq.create('again')")
    send_n(conn, dlq, 4999)  # with the dead letter: 5000
    result = ops("queue", "redrive", "jobs_dlq", "--to", "again", "--yes", "--batch", "1000")
    assert result.exit_code == 0, result.output
    assert "5,000 message(s) redriven" in result.stdout and "in 6 transaction(s)" in result.stdout
    assert "5000/5000" in result.stderr
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_again") == 5000
    assert xmins(conn, "q_again") == 5


# -- exchanges ----------------------------------------------------------------------------------

def test_exchange_lifecycle(ops, ops_json, conn, queue):
    assert ops_json("exchange", "create", "orders", "--type", "direct")["created"] is True
    assert ops_json("exchange", "bind", "orders", "jobs", "--key", "eu")["bound"] is True
    listed = {e["exchange_name"]: e for e in ops_json("exchange", "list")["exchanges"]}
    assert listed["orders"]["exchange_type"] == "direct"
    assert listed["orders"]["bindings"] == [{"queue": "jobs", "key": "eu"}]
    assert "pgmq.topic" in listed  # the built-in one
    table = ops("exchange", "list")
    assert table.exit_code == 0 and "jobs [eu]" in table.stdout
    assert column(conn, "SELECT queue_name FROM pgmq.publish('orders', 'eu', '{}')") == ["jobs"]
    assert ops_json("exchange", "unbind", "orders", "jobs", "--key", "eu")["removed"] == 1
    ops_json("exchange", "unbind", "orders", "jobs", code=Exit.NOT_FOUND)  # nothing left to unbind
    ops_json("exchange", "bind", "orders", "jobs", "--key", "us")
    refused = ops("exchange", "drop", "orders", "--cascade", input="n\n")
    assert refused.exit_code == Exit.ABORTED and "the bound queue(s) jobs" in refused.stderr
    doc = ops_json("exchange", "drop", "orders", "--cascade", "--yes")
    assert doc == {"exchange": "orders", "dropped": True, "dropped_queues": ["jobs"]}
    assert column(conn, "SELECT queue_name FROM pgmq.list_queues()") == []


def test_estimated_counts_are_marked(ops, ops_json, conn, queue):
    # > 640 pages (5 MB): queue_metrics() estimates the counts of this table from a sample
    conn.execute("SELECT pgmq.send_batch('jobs', array_fill(jsonb_build_object('pad', repeat('x', 300)), "
                 "ARRAY[25000]))")
    doc = ops_json("queues", "--no-rates")["queues"][0]
    assert doc["estimated"] is True and doc["depth"] > 0
    cells = next(line.split() for line in ops("queues", "--no-rates").stdout.splitlines()
                 if line.split()[:1] == ["jobs"])
    assert cells[1].startswith("~") and cells[2].startswith("~")  # depth, visible
