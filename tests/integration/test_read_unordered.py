"""read_unordered: read without msg_id order, for many consumers (docs/performance/contention.md).
Visible messages come in the order they became visible, on the vt index; leases, read_ct,
conditional and SKIP LOCKED as read; a queue with rules, priorities or a pause is read by read."""

from __future__ import annotations

import datetime as dt

from tests.helpers import column, raises_sql, scalar, send_n


def test_takes_messages_in_the_order_they_became_visible(conn, queue):
    ids = send_n(conn, "jobs", 4)
    # the last message made visible earliest: first for read_unordered, last for read's msg_id order
    conn.execute("SELECT pgmq.set_vt('jobs', %s, now() - interval '1 hour')", (ids[3],))
    conn.execute("SELECT pgmq.set_vt('jobs', %s, now() - interval '1 minute')", (ids[2],))
    rows = conn.execute("SELECT msg_id, read_ct, last_read_at, vt FROM pgmq.read_unordered('jobs', 30, 2)").fetchall()
    assert sorted(r[0] for r in rows) == [ids[2], ids[3]]
    for _id, read_ct, last_read, vt in rows:
        assert read_ct == 1 and dt.timedelta(seconds=29) < vt - last_read <= dt.timedelta(seconds=30)
    # leased messages are invisible; the rest come next
    assert sorted(column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 10)")) == ids[:2]
    assert column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 10)") == []


def test_walks_the_vt_index(conn, queue):
    send_n(conn, "jobs", 3)
    conn.execute("ANALYZE pgmq.q_jobs")

    def vt_scans() -> int:
        conn.execute("SELECT pg_stat_force_next_flush()")
        return scalar(conn, "SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelname = 'q_jobs_vt_idx'")

    before = vt_scans()
    assert len(column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 1)")) == 1
    assert vt_scans() > before
    before = vt_scans()
    column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 1)")  # read: the primary key
    assert vt_scans() == before


def test_conditional_and_an_expired_lease(conn, queue):
    conn.execute("""SELECT pgmq.send_batch('jobs', ARRAY['{"t":"a"}','{"t":"b"}']::jsonb[])""")
    got = conn.execute("""SELECT message, read_ct FROM pgmq.read_unordered('jobs', 0, 10, '{"t":"b"}')""").fetchall()
    assert got == [({"t": "b"}, 1)]
    # a lease of 0 seconds leaves it visible: read again, counted again
    assert scalar(conn, """SELECT read_ct FROM pgmq.read_unordered('jobs', 0, 1, '{"t":"b"}')""") == 2


def test_concurrent_readers_skip_each_others_rows(connect, queue):
    conn = connect()
    ids = send_n(conn, "jobs", 3)
    holder = connect(autocommit=False)
    held = column(holder, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 1)")
    other = column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 5)")
    assert len(held) == 1 and sorted(held + other) == ids
    holder.rollback()  # the lease is undone: the message is visible again
    assert column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 5)") == held


def test_a_queue_with_priorities_is_read_in_reads_order(conn, queue):
    conn.execute("SELECT pgmq.enable_priorities('jobs')")
    low = scalar(conn, """SELECT pgmq.send('jobs', '{"n": 0}', '{"x-pgmq-priority": 9}'::jsonb)""")
    ids = send_n(conn, "jobs", 2)
    # visible earliest, but of a lower priority: read's order, not the vt index's
    conn.execute("SELECT pgmq.set_vt('jobs', %s, now() - interval '1 hour')", (low,))
    assert column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 1)") == ids[:1]


def test_a_queue_with_delivery_rules_is_read_in_reads_order(conn, queue):
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5)")
    ids = send_n(conn, "jobs", 3)
    conn.execute("SELECT pgmq.set_vt('jobs', %s, now() - interval '1 hour')", (ids[2],))
    assert column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 1)") == ids[:1]


def test_a_paused_queue_gives_nothing(conn, queue):
    send_n(conn, "jobs", 2)
    conn.execute("SELECT pgmq.pause('jobs')")
    assert column(conn, "SELECT msg_id FROM pgmq.read_unordered('jobs', 30, 5)") == []


def test_bad_names_fail_as_reads_do(conn):
    with raises_sql("22004"):
        conn.execute("SELECT * FROM pgmq.read_unordered(NULL, 30, 1)")
    with raises_sql("42P01"):
        conn.execute("SELECT * FROM pgmq.read_unordered('no_such_queue', 30, 1)")
    with raises_sql("42P01"):
        conn.execute("SELECT * FROM pgmq.read('no_such_queue', 30, 1)")
