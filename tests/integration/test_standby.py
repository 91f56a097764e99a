"""Read offload, promised (issue 33; docs/guides/high-availability.md): on a hot standby the
read-only surface (metrics, metrics_all, queue_metrics, list_queues, browse, the exporter, the
admin CLI's reads, Client.metrics) answers as the primary does, and what writes is refused with
PostgreSQL's own 25006, unmangled, which the CLI explains ("read-only: this server is a
standby"). The dashboard's side is tests/dashboard/test_standby.py."""

from __future__ import annotations

import psycopg
import pytest

from pgmq_build.client import Client
from pgmq_build.replication import ReplicaPair
from tests.helpers import column, raises_sql, run_cli

SETUP = """
CALL pgmq.create_queue('dead');
CALL pgmq.create_queue('orders', 'N', 'dead', 1, 0);
SELECT pgmq.send_batch('orders', ARRAY['{"n": 1}', '{"n": 2}', '{"n": 3}', '{"n": 4}']::jsonb[]);
SELECT pgmq.archive('orders', 1);
SELECT pgmq.send('dead', '{"n": 0}');
SELECT pgmq.create_unlogged('fast');
SELECT pgmq.send('fast', '{"n": 9}');
"""

# A sequence is WAL-logged up to 32 values ahead of its last value (SEQ_LOG_VALS), and a
# standby reads what was logged: the totals read from msg_id sequences may be that much higher.
SEQ_LOG_VALS = 32
TOTALS = {"total_messages", "total_sent"}

# Read-only calls and the columns that may differ between the two servers (clocks, ages, the
# totals above, which are checked apart)
READS = {
    "SELECT * FROM pgmq.metrics('orders')": {"scrape_time", "newest_msg_age_sec",
                                              "oldest_msg_age_sec", *TOTALS},
    "SELECT * FROM pgmq.metrics_all()": {"scrape_time", "newest_msg_age_sec",
                                         "oldest_msg_age_sec", *TOTALS},
    "SELECT * FROM pgmq.queue_metrics()": {"measured_at", "oldest_msg_age_sec",
                                           "newest_msg_age_sec", "table_bytes", "index_bytes",
                                           "archive_bytes", "dead_tuples", *TOTALS},
    "SELECT * FROM pgmq.list_queues()": set(),
    "SELECT * FROM pgmq.browse('orders')": set(),
    "SELECT * FROM pgmq.browse('orders', 0, 10, true)": {"archived_at"},
    "SELECT * FROM pgmq.list_queue_settings()": set(),
    "SELECT * FROM pgmq.list_callbacks()": set(),
    "SELECT * FROM pgmq.list_exchanges()": set(),
}

# Writes, each refused on the standby with 25006 and PostgreSQL's message
WRITES = [
    "SELECT pgmq.send('orders', '{}')",
    "SELECT * FROM pgmq.read('orders', 10, 1)",
    "SELECT * FROM pgmq.pop('orders')",
    "SELECT pgmq.delete('orders', 2)",
    "SELECT pgmq.archive('orders', 2)",
    "SELECT pgmq.set_vt('orders', 2, 10)",
    "SELECT pgmq.nack('orders', 2, 'x')",
    "SELECT pgmq.purge_queue('orders')",
    "SELECT pgmq.pause('orders')",
    "SELECT pgmq.redrive('dead', 'orders', NULL)",
    "SELECT pgmq.create('another')",
    "SELECT pgmq.drop_queue('orders')",
]


@pytest.fixture(scope="module")
def pair(standby_pair: ReplicaPair) -> ReplicaPair:
    return standby_pair.seeded(SETUP)


@pytest.fixture
def standby(pair: ReplicaPair) -> psycopg.Connection:
    with psycopg.connect(pair.standby.dsn(), autocommit=True) as conn:
        assert conn.execute("SELECT pg_is_in_recovery()").fetchone()[0]
        yield conn


def _rows(conn: psycopg.Connection, query: str, skip: set[str]) -> list[dict]:
    cur = conn.execute(query)
    names = [d.name for d in cur.description]
    return [{k: v for k, v in zip(names, row, strict=True) if k not in skip} for row in cur]


@pytest.mark.parametrize("query", list(READS))
def test_the_read_surface_answers_on_the_standby_as_on_the_primary(pair, standby, query):
    skip = READS[query]
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as primary:
        expected = _rows(primary, query, skip)
        totals = _rows(primary, query, set()) if skip & TOTALS else []
    got = _rows(standby, query, skip)
    if "metrics_all" in query or "queue_metrics" in query:
        # the unlogged queue's table cannot be read on a standby: it is left out there
        expected = [r for r in expected if r["queue_name"] != "fast"]
        assert [r["queue_name"] for r in got] == ["dead", "orders"]
    assert got == expected
    assert got or "callbacks" in query
    if totals:
        on_standby = {r["queue_name"]: r for r in _rows(standby, query, set())}
        for r in totals:
            for k in TOTALS & r.keys():
                if r["queue_name"] in on_standby:
                    assert r[k] <= on_standby[r["queue_name"]][k] <= r[k] + SEQ_LOG_VALS


def test_an_unlogged_queue_asked_for_by_name_says_why(standby):
    for query in ("SELECT * FROM pgmq.metrics('fast')",
                  "SELECT * FROM pgmq.queue_metrics('fast')",
                  "SELECT * FROM pgmq.browse('fast')"):
        with raises_sql("0A000", "cannot access temporary or unlogged relations during recovery"):
            standby.execute(query)


@pytest.mark.parametrize("query", WRITES)
def test_writes_are_refused_with_postgres_read_only_error(standby, query):
    with pytest.raises(psycopg.Error) as info:
        standby.execute(query)
    assert info.value.sqlstate == "25006"
    text = info.value.diag.message_primary
    assert text.startswith("cannot execute ") and text.endswith(
        (" in a read-only transaction", " during recovery")), text


def test_nothing_changed_on_the_standby_or_the_primary(pair, standby):
    assert column(standby, "SELECT msg_id FROM pgmq.q_orders ORDER BY 1") == [2, 3, 4]
    with psycopg.connect(pair.primary.dsn(), autocommit=True) as primary:
        assert column(primary, "SELECT msg_id FROM pgmq.q_orders ORDER BY 1") == [2, 3, 4]


def test_the_client_reads_metrics_and_gets_the_read_only_error_unmangled(pair):
    with Client(pair.standby.dsn()) as client:
        m = client.metrics("orders")
        assert (m.queue_name, m.queue_length) == ("orders", 3)
        assert 4 <= m.total_messages <= 4 + SEQ_LOG_VALS
        with pytest.raises(psycopg.Error) as info:
            client.send("orders", {"n": 5})
        assert info.value.sqlstate == "25006"
        assert "read-only transaction" in str(info.value)
        assert not client.reconnecting  # a refusal, not a lost connection


def test_the_exporter_and_the_cli_reads_work_on_the_standby(pair):
    dsn = pair.standby.dsn()
    out = run_cli("metrics", "--dsn", dsn)
    assert out.exit_code == 0, out.output
    assert 'pgmq_queue_depth_messages{queue="orders"} 3.0' in out.output
    assert 'pgmq_queue_depth_messages{queue="fast"}' not in out.output
    assert "pgmq_up 1.0" in out.output
    for args, shown in ((["queues", "--no-rates"], "orders"), (["queue", "peek", "orders"],
                                                                '{"n": 4}'),
                        (["dlq", "list"], "dead")):
        out = run_cli(*args, "--dsn", dsn)
        assert out.exit_code == 0, (args, out.output)
        assert shown in out.output, (args, out.output)


@pytest.mark.parametrize("args", [["queue", "purge", "orders", "--yes"],
                                  ["queue", "pause", "orders"],
                                  ["dlq", "redrive", "dead", "--to", "orders", "--yes"]])
def test_cli_writes_say_the_server_is_a_standby(pair, args):
    out = run_cli(*args, "--dsn", pair.standby.dsn())
    assert out.exit_code == 1, out.output
    assert "error: read-only: this server is a standby (run this against the primary): " \
           "cannot execute" in out.output
    assert "(SQLSTATE 25006)" in out.output


def test_a_read_only_session_on_the_primary_is_not_called_a_standby(pair):
    dsn = pair.primary.dsn() + " options='-c default_transaction_read_only=on'"
    out = run_cli("queue", "pause", "orders", "--dsn", dsn)
    assert out.exit_code == 1, out.output
    assert "standby" not in out.output and "(SQLSTATE 25006)" in out.output
