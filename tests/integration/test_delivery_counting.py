"""Delivery counting (pgmq.set_delivery_counting, features/ops/functions/delivery_counting.sql.j2):
a counting queue's consumers count what read, pop and the grouped reads hand them, and which of
those had been delivered before, in their session's row of pgmq.queue_consumers, in the read's
own transaction (committed deliveries only, exact at once); the rows of sessions gone move into
pgmq.queue_counters. A queue that does not count, and a read that finds nothing, write nothing."""

from __future__ import annotations

import threading
from collections import Counter

import psycopg
import pytest
from psycopg.rows import dict_row

from pgmq_build.ops import counters
from tests.helpers import column, raises_sql, run_threads, scalar, send_n

# the sessions' rows plus what the sessions gone left in queue_counters
COUNTS = """
SELECT coalesce(sum(d), 0)::numeric, coalesce(sum(r), 0)::numeric FROM (
    SELECT c.delivered AS d, c.redelivered AS r FROM pgmq.queue_consumers c WHERE c.queue_name = %(q)s
    UNION ALL
    SELECT sum(n) FILTER (WHERE counter = 'delivered'), sum(n) FILTER (WHERE counter = 'redelivered')
    FROM pgmq.queue_counters WHERE queue_name = %(q)s) s
"""


def counted(conn, queue="jobs") -> tuple[int, int]:
    d, r = conn.execute(COUNTS, {"q": queue}).fetchone()
    return int(d), int(r)


@pytest.fixture
def counting(conn, queue):
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs')") is True
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs')") is False  # set already
    return conn


def test_reads_and_pops_count_deliveries_and_redeliveries(counting):
    conn = counting
    send_n(conn, "jobs", 10)
    assert len(conn.execute("SELECT * FROM pgmq.read('jobs', 0, 3)").fetchall()) == 3
    assert counted(conn) == (3, 0)
    again = conn.execute("SELECT msg_id, read_ct FROM pgmq.read('jobs', 30, 3)").fetchall()
    assert [r[1] for r in again] == [2, 2, 2]  # the lease of 0 s ran out: handed out again
    assert counted(conn) == (6, 3)
    assert len(conn.execute("SELECT * FROM pgmq.pop('jobs', 7)").fetchall()) == 7
    assert counted(conn) == (3 + 3 + 7, 3)
    # a read that finds nothing writes nothing
    seen = scalar(conn, "SELECT last_seen FROM pgmq.queue_consumers")
    assert conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)").fetchall() == []
    assert scalar(conn, "SELECT last_seen FROM pgmq.queue_consumers") == seen
    assert counted(conn) == (3 + 3 + 7, 3)
    # a pop of a message delivered before is a redelivery
    send_n(conn, "jobs", 1)
    conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)")
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
    assert counted(conn) == (8, 0)


def test_a_redelivery_by_a_grouped_read_is_counted(counting):
    conn = counting
    conn.execute("SELECT pgmq.send('jobs', '{}', headers => '{\"x-pgmq-group\": \"a\"}')")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 0, 1)")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 30, 1)")
    assert counted(conn) == (2, 1)
    # with a retry policy the grouped read judges each row: counted the same
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5)")
    conn.execute("SELECT pgmq.set_vt('jobs', 1, 0)")
    conn.execute("SELECT * FROM pgmq.read_grouped('jobs', 30, 1)")
    assert counted(conn) == (3, 2)


def test_judged_reads_count(counting):
    """A queue with a retry policy is read by the judged rounds: same counts."""
    conn = counting
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5)")
    send_n(conn, "jobs", 4)
    conn.execute("SELECT * FROM pgmq.read('jobs', 0, 2)")
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 4)")   # 2 again, 2 new
    assert counted(conn) == (6, 2)


def test_a_rolled_back_read_is_not_counted(counting, connect):
    conn = counting
    send_n(conn, "jobs", 3)
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    with conn.transaction(force_rollback=True):
        assert len(conn.execute("SELECT * FROM pgmq.pop('jobs', 2)").fetchall()) == 2
        assert counted(conn) == (3, 0)
    # the count went back with the transaction, as did the pop; a new session's too
    assert counted(conn) == (1, 0)
    other = connect()
    with other.transaction(force_rollback=True):
        other.execute("SELECT * FROM pgmq.pop('jobs', 1)")
    assert counted(conn) == (1, 0)
    conn.execute("SELECT * FROM pgmq.pop('jobs', 5)")        # the 2 again
    assert counted(conn) == (3, 0)


def test_a_queue_that_does_not_count_writes_nothing(conn, queue):
    conn.execute("SELECT pgmq.create('quiet')")
    send_n(conn, "quiet", 3)
    conn.execute("SELECT * FROM pgmq.read('quiet', 30, 1)")
    conn.execute("SELECT * FROM pgmq.pop('quiet', 5)")
    conn.execute("SELECT * FROM pgmq.pop('quiet', 5)")
    assert counted(conn, "quiet") == (0, 0)
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_consumers") == 0
    # switched off: no more counts
    conn.execute("SELECT pgmq.set_delivery_counting('jobs')")
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs', false)") is True
    assert scalar(conn, "SELECT pgmq.set_delivery_counting('jobs', false)") is False
    send_n(conn, "jobs", 1)
    conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")
    assert counted(conn) == (0, 0)


def test_a_planted_count_stops_no_read(counting, connect):
    """A consumer may write its own row: planted at bigint's maximum, its next reads saturate
    there; a row of a session gone is moved into queue_counters, saturating too."""
    conn = counting
    send_n(conn, "jobs", 4)
    conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)")
    conn.execute("UPDATE pgmq.queue_consumers SET delivered = 9223372036854775807, "
                 "redelivered = 9223372036854775807")
    assert len(conn.execute("SELECT * FROM pgmq.read('jobs', 0, 1)").fetchall()) == 1
    assert counted(conn) == (9223372036854775807, 9223372036854775807)
    conn.execute("INSERT INTO pgmq.queue_counters VALUES ('jobs', 'delivered', '', 1, 9223372036854775807)")
    conn.execute("UPDATE pgmq.queue_consumers SET pid = 0, last_seen = now() - interval '2 hours'")
    assert len(connect().execute("SELECT * FROM pgmq.pop('jobs', 4)").fetchall()) == 4
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_consumers WHERE pid = 0") == 0
    assert column(conn, "SELECT n FROM pgmq.queue_counters WHERE counter = 'delivered' ORDER BY slot") == \
        [9223372036854775807]


def test_consumers_are_seen_and_exported(counting, connect):
    conn = counting
    send_n(conn, "jobs", 30)
    others = [connect() for _ in range(3)]
    for c in others:
        c.execute("SELECT * FROM pgmq.read('jobs', 30, 2)")
    conn.execute("SELECT * FROM pgmq.read('jobs', 30, 2)")
    pids = sorted(column(conn, "SELECT pid FROM pgmq.queue_consumers WHERE queue_name = 'jobs'"))
    assert pids == sorted(c.info.backend_pid for c in [*others, conn])
    # a session gone left its counts in queue_counters: they are part of the total
    conn.execute("INSERT INTO pgmq.queue_counters VALUES ('jobs', 'delivered', '', 7, 100)")
    ops = connect(row_factory=dict_row)  # as the exporter reads
    families = {f.name: f for f in counters.families(counters.read(ops), counters.read_failures(ops),
                                                     counters.read_consumers(ops))}
    assert [(s.labels, s.value) for s in families["pgmq_queue_consumers"].samples] == [({"queue": "jobs"}, 4)]
    delivered = [s for s in families["pgmq_queue_delivered_messages"].samples if s.name.endswith("_total")]
    assert [(s.labels, s.value) for s in delivered] == [({"queue": "jobs"}, 108)]
    # a session gone and not seen for an hour is removed by the next session's first write, its
    # counts moved into queue_counters; a live one is not, however old its row
    conn.execute("INSERT INTO pgmq.queue_consumers VALUES ('jobs', 0, 'ghost', now() - interval '2 hours', 5, 1)")
    conn.execute("UPDATE pgmq.queue_consumers SET last_seen = now() - interval '2 hours' WHERE pid = %s",
                 (others[0].info.backend_pid,))
    connect().execute("SELECT * FROM pgmq.read('jobs', 30, 1)")
    left = column(conn, "SELECT pid FROM pgmq.queue_consumers WHERE queue_name = 'jobs'")
    assert 0 not in left and others[0].info.backend_pid in left and len(left) == 5
    assert counted(conn) == (108 + 5 + 1, 1)


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
            if not ids:
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
        assert counted(conn) == (2, 0)
        assert column(conn, "SELECT role_name FROM pgmq.queue_consumers") == [role]
        # it may not clear the rows or the counts, nor write another session's row
        conn.execute("SELECT * FROM pgmq.read('jobs', 0, 0)")
        send_n(conn, "jobs", 1)
        conn.execute("SELECT * FROM pgmq.pop('jobs', 1)")
        tenant.execute("DELETE FROM pgmq.queue_consumers")
        tenant.execute("DELETE FROM pgmq.queue_counters")
        tenant.execute("UPDATE pgmq.queue_consumers SET delivered = 0 WHERE role_name <> current_user")
        assert scalar(conn, "SELECT count(*) FROM pgmq.queue_consumers") == 2
        assert counted(conn) == (3, 0)
        # (its own session's row it may rewrite: monitoring of a queue it consumes, as with its
        # callback counts)
        # a role that may not consume the queue cannot make a row for it
        outsider = make_role("outsider")
        conn.execute(f"SET ROLE {outsider}")
        with raises_sql("42501"):
            conn.execute("INSERT INTO pgmq.queue_consumers VALUES ('jobs', pg_backend_pid(), current_user, now(), 9, 9)")
        conn.execute("RESET ROLE")
    finally:
        tenant.close()
