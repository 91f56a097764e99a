"""read / read_with_poll / pop / delete / archive / set_vt / metrics."""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from tests.helpers import column, raises_sql, scalar, send_n

COLS = ["msg_id", "read_ct", "enqueued_at", "last_read_at", "vt", "message", "headers"]


def test_read_leases_in_order_and_counts(conn, queue):
    ids = send_n(conn, "jobs", 5)
    cur = conn.execute("SELECT * FROM pgmq.read(queue_name => 'jobs', vt => 30, qty => 3)")
    assert [d.name for d in cur.description] == COLS
    rows = cur.fetchall()
    assert [r[0] for r in rows] == ids[:3]
    for _id, read_ct, _enq, last_read, vt, _msg, _hdr in rows:
        assert read_ct == 1 and last_read is not None
        assert dt.timedelta(seconds=29) < vt - last_read <= dt.timedelta(seconds=30)
    # leased messages are invisible; the rest come next
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 10)") == ids[3:]
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 10)") == []


def test_expired_lease_redelivers_with_higher_read_ct(conn, queue):
    send_n(conn, "jobs", 1)
    assert conn.execute("SELECT read_ct FROM pgmq.read('jobs', 0, 1)").fetchone() == (1,)
    assert conn.execute("SELECT read_ct FROM pgmq.read('jobs', 0, 1)").fetchone() == (2,)


def test_read_conditional_filters_by_containment(conn, queue):
    conn.execute("""SELECT pgmq.send_batch('jobs', ARRAY['{"t":"a","n":1}','{"t":"b"}','{"t":"a","n":2}']::jsonb[])""")
    got = conn.execute("""SELECT message FROM pgmq.read('jobs', 30, 10, conditional => '{"t":"a"}')""").fetchall()
    assert [m for (m,) in got] == [{"t": "a", "n": 1}, {"t": "a", "n": 2}]
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 10, NULL)") == [2]


def test_read_qty_zero_and_negative(conn, queue):
    send_n(conn, "jobs", 2)
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 0)") == []
    with raises_sql("2201W"):
        conn.execute("SELECT * FROM pgmq.read('jobs', 30, -1)")


def test_read_with_poll_returns_as_soon_as_a_message_arrives(connect):
    reader, writer = connect(), connect()
    reader.execute("SELECT pgmq.create('jobs')")

    def later():
        time.sleep(0.4)
        writer.execute("SELECT pgmq.send('jobs', '{\"late\": 1}')")

    t = threading.Thread(target=later)
    start = time.monotonic()
    t.start()
    rows = reader.execute("SELECT message FROM pgmq.read_with_poll('jobs', 30, 1, 5, 50)").fetchall()
    elapsed = time.monotonic() - start
    t.join()
    assert rows == [({"late": 1},)]
    assert 0.3 < elapsed < 4


def test_read_with_poll_gives_up_after_max_poll_seconds(conn, queue):
    start = time.monotonic()
    assert conn.execute("SELECT * FROM pgmq.read_with_poll('jobs', 30, 1, 1, 100)").fetchall() == []
    assert 0.9 < time.monotonic() - start < 3


def test_read_with_poll_named_arguments_and_validation(conn, queue):
    send_n(conn, "jobs", 1)
    rows = conn.execute("""SELECT * FROM pgmq.read_with_poll(queue_name => 'jobs', vt => 5, qty => 1,
                           max_poll_seconds => 1, poll_interval_ms => 10, conditional => '{"n": 1}')""").fetchall()
    assert len(rows) == 1
    with raises_sql("22023", "poll_interval_ms must be positive"):
        conn.execute("SELECT * FROM pgmq.read_with_poll('jobs', 5, 1, 1, 0)")
    with raises_sql("22023", "max_poll_seconds must be non-negative"):
        conn.execute("SELECT * FROM pgmq.read_with_poll('jobs', 5, 1, -1)")


def test_pop_deletes_without_counting(conn, queue):
    ids = send_n(conn, "jobs", 4)
    cur = conn.execute("SELECT * FROM pgmq.pop('jobs')")
    assert [d.name for d in cur.description] == COLS
    assert [(r[0], r[1]) for r in cur.fetchall()] == [(ids[0], 0)]
    assert column(conn, "SELECT msg_id FROM pgmq.pop(queue_name => 'jobs', qty => 2)") == ids[1:3]
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 1


def test_pop_skips_invisible(conn, queue):
    send_n(conn, "jobs", 2)
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    assert column(conn, "SELECT msg_id FROM pgmq.pop('jobs', 5)") == [2]


def test_delete_single_and_batch(conn, queue):
    ids = send_n(conn, "jobs", 4)
    assert scalar(conn, "SELECT pgmq.delete('jobs', %s::bigint)", (ids[0],)) is True
    assert scalar(conn, "SELECT pgmq.delete('jobs', %s::bigint)", (ids[0],)) is False
    got = column(conn, "SELECT * FROM pgmq.delete('jobs', %s::bigint[])", ([ids[1], ids[2], 999],))
    assert sorted(got) == ids[1:3]
    assert column(conn, "SELECT msg_id FROM pgmq.q_jobs") == [ids[3]]


def test_archive_single_and_batch(conn, queue):
    ids = send_n(conn, "jobs", 3)
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    assert scalar(conn, "SELECT pgmq.archive(queue_name => 'jobs', msg_id => %s::bigint)", (ids[0],)) is True
    assert scalar(conn, "SELECT pgmq.archive('jobs', %s::bigint)", (ids[0],)) is False
    assert sorted(column(conn, "SELECT * FROM pgmq.archive('jobs', %s::bigint[])", ([ids[1], ids[2], 77],))) == ids[1:]
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    arch = conn.execute("SELECT msg_id, read_ct, last_read_at IS NOT NULL, archived_at <= now(), message "
                        "FROM pgmq.a_jobs ORDER BY msg_id").fetchall()
    assert arch[0] == (ids[0], 1, True, True, {"n": 1})
    assert [a[0] for a in arch] == ids


@pytest.mark.parametrize("call,param", [
    ("pgmq.set_vt(queue_name => 'jobs', msg_id => %s::bigint, vt => 100)", "one"),
    ("pgmq.set_vt(queue_name => 'jobs', msg_id => %s::bigint, vt => clock_timestamp() + interval '100 s')", "one"),
    ("pgmq.set_vt(queue_name => 'jobs', msg_ids => %s::bigint[], vt => 100)", "many"),
    ("pgmq.set_vt(queue_name => 'jobs', msg_ids => %s::bigint[], vt => clock_timestamp() + interval '100 s')", "many"),
])
def test_set_vt_forms(conn, queue, call, param):
    ids = send_n(conn, "jobs", 2)
    arg = ids[0] if param == "one" else [ids[0], 12345]
    cur = conn.execute(f"SELECT * FROM {call}", (arg,))
    assert [d.name for d in cur.description] == COLS
    rows = cur.fetchall()
    assert [r[0] for r in rows] == [ids[0]] and rows[0][1] == 0  # read_ct unchanged
    assert rows[0][4] > scalar(conn, "SELECT clock_timestamp() + interval '90 s'")
    assert column(conn, "SELECT msg_id FROM pgmq.read('jobs', 30, 10)") == [ids[1]]


def test_set_vt_zero_releases_a_lease(conn, queue):
    send_n(conn, "jobs", 1)
    conn.execute("SELECT * FROM pgmq.read('jobs', 300, 1)")
    conn.execute("SELECT * FROM pgmq.set_vt('jobs', 1::bigint, 0)")
    assert conn.execute("SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, 1)").fetchall() == [(1, 2)]


def test_set_vt_missing_id_returns_nothing_and_null_vt_errors(conn, queue):
    assert conn.execute("SELECT * FROM pgmq.set_vt('jobs', 42::bigint, 10)").fetchall() == []
    # as upstream: no row, no error; a row meets the table's NOT NULL
    assert conn.execute("SELECT * FROM pgmq.set_vt('jobs', 42::bigint, NULL::timestamptz)").fetchall() == []
    conn.execute("SELECT pgmq.send('jobs', '{}')")
    with raises_sql("23502", 'null value in column "vt" of relation "q_jobs" violates not-null constraint'):
        conn.execute("SELECT * FROM pgmq.set_vt('jobs', 1::bigint, NULL::timestamptz)")


def test_metrics(conn, queue):
    empty = conn.execute("SELECT * FROM pgmq.metrics('jobs')")
    assert [d.name for d in empty.description] == [
        "queue_name", "queue_length", "newest_msg_age_sec", "oldest_msg_age_sec", "total_messages",
        "scrape_time", "queue_visible_length", "default_partition_length"]
    assert empty.fetchone()[:5] == ("jobs", 0, None, None, 0)
    send_n(conn, "jobs", 5)
    conn.execute("SELECT pgmq.send('jobs', '{}', 100)")
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 2)")
    conn.execute("SELECT pgmq.delete('jobs', 5::bigint)")
    name, length, newest, oldest, total, _, visible, default_len = conn.execute(
        "SELECT * FROM pgmq.metrics(queue_name => 'jobs')").fetchone()
    assert (name, length, total, visible, default_len) == ("jobs", 5, 6, 2, None)
    assert 0 <= newest <= oldest


def test_metrics_all(conn):
    for q in ("b_queue", "a_queue"):
        conn.execute("SELECT pgmq.create(%s)", (q,))
    conn.execute("SELECT pgmq.send('a_queue', '{}')")
    rows = conn.execute("SELECT queue_name, queue_length FROM pgmq.metrics_all()").fetchall()
    assert rows == [("a_queue", 1), ("b_queue", 0)]


def test_read_on_unlogged_queue(conn):
    conn.execute("SELECT pgmq.create_unlogged('u')")
    send_n(conn, "u", 2)
    assert column(conn, "SELECT msg_id FROM pgmq.read('u', 10, 5)") == [1, 2]
