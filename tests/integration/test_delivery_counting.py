"""Delivery counting (pgmq.set_delivery_counting, features/ops/functions/delivery_counting.sql.j2):
a counting queue's consumers count what read, pop and the grouped reads hand them, and which of
those had been delivered before; each session writes its counts at most once a second, and at
once when a read finds nothing; committed deliveries only; the sessions are recorded in
pgmq.queue_consumers. A queue that does not count is never written to by its reads."""

from __future__ import annotations

import threading
import time
from collections import Counter

import psycopg
import pytest
from psycopg.rows import dict_row

from pgmq_build.ops import counters
from tests.helpers import column, raises_sql, run_threads, scalar, send_n

COUNTS = ("SELECT c.counter, sum(c.n)::bigint FROM pgmq.queue_counters c "
          "WHERE c.queue_name = %s AND c.counter IN ('delivered', 'redelivered') GROUP BY 1")


def counted(conn, queue="jobs") -> tuple[int, int]:
    got = dict(conn.execute(COUNTS, (queue,)).fetchall())
    return got.get("delivered", 0), got.get("redelivered", 0)


def key(queue="jobs") -> str:
    return "pgmq.deliveries_" + __import__("hashlib").md5(queue.lower().encode()).hexdigest()


@pytest.fixture
def counting(conn, queue):
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs')") is True
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs')") is False  # set already
    return conn


def test_reads_and_pops_count_deliveries_and_redeliveries(counting):
    conn = counting
    send_n(conn, "jobs", 10)
    # the session's first read writes at once; the next ones within the second wait
    assert len(conn.execute("SELECT * FROM pgmq.read('jobs', 0, 3)").fetchall()) == 3
    assert counted(conn) == (3, 0)
    again = conn.execute("SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, 3)").fetchall()
    assert [r[1] for r in again] == [2, 2, 2]  # the lease of 0 s ran out: handed out again
    assert len(conn.execute("SELECT * FROM pgmq.pop('jobs', 7)").fetchall()) == 7
    assert counted(conn) == (3, 0)
    # a read that finds nothing writes what is pending
    assert conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)").fetchall() == []
    assert counted(conn) == (3 + 3 + 7, 3)
    # a pop of a message delivered before is a redelivery
    send_n(conn, "jobs", 1)
    conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)")
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")
    assert counted(conn) == (15, 4)
    # and one session is seen, as the role that read
    rows = conn.execute("SELECT pid, role_name FROM pgmq.queue_consumers WHERE queue_name = 'jobs'").fetchall()
    assert rows == [(conn.info.backend_pid, conn.info.user)]


def test_a_pop_of_every_message_counts_them(counting):
    """pop(q, NULL) takes every visible message (upstream's LIMIT NULL): all are counted."""
    conn = counting
    send_n(conn, "jobs", 5)
    assert len(conn.execute("SELECT * FROM pgmq.pop('jobs', NULL)").fetchall()) == 5
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")  # nothing: writes
    assert counted(conn) == (5, 0)


def test_every_reader_counts(counting):
    conn = counting
    conn.execute("SELECT pgmq.send('jobs', '{}', headers => jsonb_build_object('x-pgmq-group', g)) "
                 "FROM generate_series(1, 8) g")
    readers = ["SELECT * FROM pgmq.read_unordered('jobs', 30, 1)",
               "SELECT * FROM pgmq.read_with_poll('jobs', 30, 1, 1)",
               "SELECT * FROM pgmq.read_grouped('jobs', 30, 1)",
               "SELECT * FROM pgmq.read_grouped_rr('jobs', 30, 2)",
               "SELECT * FROM pgmq.read_grouped_head('jobs', 30, 1)",
               "SELECT * FROM pgmq.read_payload('jobs', 30, 1, NULL::jsonb)",
               "SELECT * FROM pgmq.pop_payload('jobs', 1, NULL::jsonb)"]
    handed = sum(len(conn.execute(sql).fetchall()) for sql in readers)
    assert handed == 8
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 30, 1)")  # nothing left: writes
    assert counted(conn) == (8, 0)


def test_a_redelivery_by_a_grouped_read_is_counted(counting):
    conn = counting
    conn.execute("SELECT pgmq.send('jobs', '{}', headers => '{\"x-pgmq-group\": \"a\"}')")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 0, 1)")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 30, 1)")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 30, 1)")  # empty
    assert counted(conn) == (2, 1)
    # with a retry policy the grouped read judges each row: counted the same
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5)")
    conn.execute("SELECT pgmq.set_vt('jobs', 1, 0)")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 30, 1)")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 30, 1)")  # empty
    assert counted(conn) == (3, 2)


def test_judged_reads_count(counting):
    """A queue with a retry policy is read by the judged rounds: same counts."""
    conn = counting
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5)")
    send_n(conn, "jobs", 4)
    conn.execute("SELECT * FROM pgmq.read('jobs', 0, 2)")
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 4)")   # 2 again, 2 new
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")        # nothing visible
    assert counted(conn) == (6, 2)


def test_a_rolled_back_read_is_not_counted(counting, connect):
    conn = counting
    send_n(conn, "jobs", 3)
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")   # writes at once: (1, 0)
    with conn.transaction(force_rollback=True):
        assert len(conn.execute("SELECT * FROM pgmq.pop('jobs', 2)").fetchall()) == 2
    # the pending count went back with the transaction, as did the pop
    assert scalar(conn, "SELECT current_setting(%s)", (key(),)).startswith("0/0/")
    conn.execute("SELECT * FROM pgmq.pop('jobs', 5)")        # the 2 again
    conn.execute("SELECT * FROM pgmq.pop('jobs', 5)")        # empty: writes
    assert counted(conn) == (3, 0)


def test_a_queue_that_does_not_count_writes_nothing(conn, queue):
    conn.execute("SELECT pgmq.create('quiet')")
    send_n(conn, "quiet", 3)
    conn.execute("SELECT * FROM pgmq.read('quiet', 30, 1)")
    conn.execute("SELECT * FROM pgmq.pop('quiet', 5)")
    conn.execute("SELECT * FROM pgmq.pop('quiet', 5)")
    assert counted(conn, "quiet") == (0, 0)
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_consumers") == 0
    assert scalar(conn, "SELECT current_setting(%s, true)", (key("quiet"),)) is None
    # switched off: no more counts
    conn.execute("SELECT pgmq.set_delivery_counting('jobs')")
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs', false)") is True
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs', false)") is False
    send_n(conn, "jobs", 1)
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")
    assert counted(conn) == (0, 0)


def test_any_session_variable_leaves_reads_working(counting):
    """The pending counts live in a session variable the session may set to anything: a value
    not of their form counts as nothing pending, and the largest counts saturate."""
    conn = counting
    send_n(conn, "jobs", 4)
    for planted in ("garbage", "-1/-1/-1", "1e30/0/0", "", "9/9/99999999999999999999"):
        conn.execute("SELECT set_config(%s, %s, false)", (key(), planted))
        assert len(conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)").fetchall()) == 1
    big = "999999999999999999/999999999999999999/0"
    for _ in range(10):
        conn.execute("SELECT set_config(%s, %s, false)", (key(), big))
        assert len(conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)").fetchall()) == 1
    # written ten times near 10^18: the counters saturate at bigint's maximum
    assert counted(conn) == (9223372036854775807, 9223372036854775807)
    assert len(conn.execute("SELECT * FROM pgmq.pop('jobs', 4)").fetchall()) == 4


def test_consumers_are_seen_and_exported(counting, connect):
    conn = counting
    send_n(conn, "jobs", 30)
    others = [connect() for _ in range(3)]
    for c in others:
        c.execute("SELECT * FROM pgmq.read('jobs', 30, 2)")
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 2)")
    pids = sorted(column(conn, "SELECT pid FROM pgmq.queue_consumers WHERE queue_name = 'jobs'"))
    assert pids == sorted(c.info.backend_pid for c in [*others, conn])
    ops = connect(row_factory=dict_row)  # as the exporter reads
    families = {f.name: f for f in counters.families(counters.read(ops), counters.read_failures(ops),
                                                     counters.read_consumers(ops))}
    assert [(s.labels, s.value) for s in families["pgmq_queue_consumers"].samples] == [({"queue": "jobs"}, 4)]
    delivered = [s for s in families["pgmq_queue_delivered_messages"].samples if s.name.endswith("_total")]
    assert [(s.labels, s.value) for s in delivered] == [({"queue": "jobs"}, 8)]
    # a session gone and not seen for an hour is removed by the next session's first write; a
    # live one is not, however old its row
    conn.execute("INSERT INTO pgmq.queue_consumers VALUES ('jobs', 0, 'ghost', now() - interval '2 hours')")
    conn.execute("UPDATE pgmq.queue_consumers SET last_seen = now() - interval '2 hours' WHERE pid = %s",
                 (others[0].info.backend_pid,))
    connect().execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    left = column(conn, "SELECT pid FROM pgmq.queue_consumers WHERE queue_name = 'jobs'")
    assert 0 not in left and others[0].info.backend_pid in left and len(left) == 5


def test_concurrent_consumers_count_every_delivery_once(counting, connect):
    conn = counting
    n = 600
    send_n(conn, "jobs", n)
    got: Counter = Counter()
    lock = threading.Lock()

    def consume(c: psycopg.Connection, pop: bool) -> None:
        while True:
            sql = ("SELECT msg_id FROM pgmq.pop('jobs', 3)" if pop else
                   "SELECT msg_id FROM pgmq.read('jobs', 60, 3)")
            ids = column(c, sql)
            if not ids:  # the read that finds nothing writes what is pending
                return
            if not pop:
                c.execute("SELECT pgmq.delete('jobs', %s::bigint[])", (ids,))
            with lock:
                got.update(ids)

    conns = [connect() for _ in range(4)]
    run_threads(threading.Thread(target=consume, args=(c, i % 2 == 0)) for i, c in enumerate(conns))
    assert sum(got.values()) == n and set(got.values()) == {1}
    assert counted(conn) == (n, 0)
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_consumers WHERE queue_name = 'jobs'") == 4


def test_the_counts_wait_a_second_then_are_written(counting):
    conn = counting
    send_n(conn, "jobs", 5)
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")        # first: written
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")        # pending
    assert counted(conn) == (1, 0)
    time.sleep(1.05)
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")        # a second later: written
    assert counted(conn) == (3, 0)


def test_the_switch_is_the_owners(conn, queue, make_role, connect, dsn):
    with raises_sql("22004", "enabled cannot be NULL"):
        conn.execute("SELECT pgmq.set_delivery_counting('jobs', NULL)")
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.set_delivery_counting('nope')")
    role = make_role("tenant", login=True)
    conn.execute("CALL pgmq.grant_queue_access('jobs', %s)", (role,))
    tenant = psycopg.connect(dsn.replace(f"user={conn.info.user}", f"user={role}"), autocommit=True)
    try:
        with raises_sql("42501"):
            tenant.execute("SELECT pgmq.set_delivery_counting('jobs')")
        # a consumer of a counting queue counts under row security, as itself
        conn.execute("SELECT pgmq.set_delivery_counting('JOBS')")
        send_n(conn, "jobs", 2)
        tenant.execute("SELECT * FROM pgmq.pop('jobs', 2)")
        tenant.execute("SELECT * FROM pgmq.pop('jobs', 2)")
        assert counted(conn) == (2, 0)
        assert column(conn, "SELECT role_name FROM pgmq.queue_consumers") == [role]
        # it may not clear another consumer's row or the counts
        tenant.execute("DELETE FROM pgmq.queue_consumers")
        tenant.execute("DELETE FROM pgmq.queue_counters")
        assert scalar(conn, "SELECT count(*) FROM pgmq.queue_consumers") == 1
        assert counted(conn) == (2, 0)
    finally:
        tenant.close()
