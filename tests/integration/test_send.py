"""send / send_batch: every overload, called with named arguments as clients do."""

from __future__ import annotations

import datetime as dt

import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, raises_sql, scalar

MSG = Jsonb({"hello": "world"})
HDR = Jsonb({"x-trace": "t1"})


def row(conn, msg_id):
    return conn.execute("SELECT message, headers, vt - enqueued_at, read_ct FROM pgmq.q_jobs WHERE msg_id = %s",
                        (msg_id,)).fetchone()


@pytest.mark.parametrize("call,params,headers,delayed", [
    ("pgmq.send(queue_name => %s, msg => %s)", (MSG,), None, False),
    ("pgmq.send(queue_name => %s, msg => %s, headers => %s)", (MSG, HDR), {"x-trace": "t1"}, False),
    ("pgmq.send(queue_name => %s, msg => %s, delay => %s)", (MSG, 60), None, True),
    ("pgmq.send(queue_name => %s, msg => %s, delay => %s::timestamptz)",
     (MSG, "2999-01-01T00:00:00Z"), None, True),
    ("pgmq.send(queue_name => %s, msg => %s, headers => %s, delay => %s)", (MSG, HDR, 60), {"x-trace": "t1"}, True),
    ("pgmq.send(queue_name => %s, msg => %s, headers => %s, delay => %s::timestamptz)",
     (MSG, HDR, "2999-01-01T00:00:00Z"), {"x-trace": "t1"}, True),
])
def test_send_overloads(conn, queue, call, params, headers, delayed):
    cur = conn.execute(f"SELECT * FROM {call}", (queue, *params))
    assert cur.description[0].name == "send"
    msg_id = cur.fetchone()[0]
    message, hdrs, lead, read_ct = row(conn, msg_id)
    assert message == {"hello": "world"} and hdrs == headers and read_ct == 0
    assert (lead >= dt.timedelta(seconds=59)) is delayed
    visible = conn.execute("SELECT msg_id FROM pgmq.read('jobs', 10, 5)").fetchall()
    assert visible == ([] if delayed else [(msg_id,)])


def test_send_null_message_is_allowed(conn, queue):
    msg_id = scalar(conn, "SELECT pgmq.send('jobs', NULL::jsonb)")
    assert conn.execute("SELECT message FROM pgmq.pop('jobs')").fetchone() == (None,)
    assert msg_id == 1


def test_send_uses_clock_timestamp_so_same_transaction_sees_it(connect):
    c = connect(autocommit=False)
    c.execute("SELECT pgmq.create('jobs')")
    c.execute("SELECT pg_sleep(0.05)")  # now() is now well before clock_timestamp()
    msg_id = scalar(c, "SELECT pgmq.send('jobs', '{}')")
    assert column(c, "SELECT msg_id FROM pgmq.pop('jobs')") == [msg_id]
    c.rollback()


def test_negative_or_null_delay_rejected_and_nothing_sent(conn, queue):
    # a negative delay: our refusal (upstream makes the message visible at once)
    with raises_sql("22023", "delay cannot be negative"):
        conn.execute("SELECT pgmq.send('jobs', '{}', -1)")
    with raises_sql("22023", "delay cannot be negative"):
        conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}'::jsonb], -5)")
    # a NULL delay fails as upstream's does: the NULL vt on the table's NOT NULL
    vt_null = 'null value in column "vt" of relation "q_jobs" violates not-null constraint'
    with raises_sql("23502", vt_null):
        conn.execute("SELECT pgmq.send('jobs', '{}', NULL::integer)")
    with raises_sql("23502", vt_null):
        conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}'::jsonb], NULL::integer)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0


BATCH = [Jsonb({"n": i}) for i in range(5)]
HDRS = [Jsonb({"h": i}) for i in range(5)]


@pytest.mark.parametrize("call,params,with_headers,delayed", [
    ("pgmq.send_batch(queue_name => %s, msgs => %s)", (BATCH,), False, False),
    ("pgmq.send_batch(queue_name => %s, msgs => %s, headers => %s)", (BATCH, HDRS), True, False),
    ("pgmq.send_batch(queue_name => %s, msgs => %s, delay => %s)", (BATCH, 60), False, True),
    ("pgmq.send_batch(queue_name => %s, msgs => %s, delay => %s::timestamptz)",
     (BATCH, "2999-01-01T00:00:00Z"), False, True),
    ("pgmq.send_batch(queue_name => %s, msgs => %s, headers => %s, delay => %s)", (BATCH, HDRS, 60), True, True),
    ("pgmq.send_batch(queue_name => %s, msgs => %s, headers => %s, delay => %s::timestamptz)",
     (BATCH, HDRS, "2999-01-01T00:00:00Z"), True, True),
])
def test_send_batch_overloads(conn, queue, call, params, with_headers, delayed):
    cur = conn.execute(f"SELECT * FROM {call}", (queue, *params))
    assert cur.description[0].name == "send_batch"
    ids = [r[0] for r in cur.fetchall()]
    assert ids == sorted(ids) and len(ids) == 5
    stored = conn.execute("SELECT msg_id, message, headers FROM pgmq.q_jobs ORDER BY msg_id").fetchall()
    assert [(m["n"]) for _, m, _ in stored] == list(range(5))  # ids follow array order
    assert [h for _, _, h in stored] == ([{"h": i} for i in range(5)] if with_headers else [None] * 5)
    assert (conn.execute("SELECT count(*) FROM pgmq.read('jobs', 10, 10)").fetchone()[0] == 0) is delayed


def test_send_batch_validation(conn, queue):
    with raises_sql("P0001", "msgs cannot be NULL or empty"):
        conn.execute("SELECT pgmq.send_batch('jobs', ARRAY[]::jsonb[])")
    with raises_sql("P0001", "msgs cannot be NULL or empty"):
        conn.execute("SELECT pgmq.send_batch('jobs', NULL::jsonb[])")
    with raises_sql("P0001", "headers array length (1) must match msgs array length (2)"):
        conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}','{}']::jsonb[], ARRAY['{}']::jsonb[])")
    with raises_sql("P0001", "headers array length (0) must match msgs array length (1)"):
        conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{}']::jsonb[], ARRAY[]::jsonb[])")
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0


def test_large_batch_in_one_statement(conn, queue):
    ids = column(conn, "SELECT * FROM pgmq.send_batch('jobs', (SELECT array_agg(jsonb_build_object('i', g)) "
                       "FROM generate_series(1, 5000) g))")
    assert ids == list(range(1, 5001))


def test_internal_batch_helpers(conn, queue):
    conn.execute("SELECT pgmq._validate_batch_params(ARRAY['{}']::jsonb[], NULL)")
    ids = column(conn, "SELECT * FROM pgmq._send_batch('jobs', ARRAY['{\"a\":1}','{\"a\":2}']::jsonb[], NULL, now())")
    assert ids == [1, 2]
