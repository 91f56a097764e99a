"""The metrics history (templates/features/ops/history.sql.j2): sample_metrics() records one
row per queue and keeps the table within its bounds; metrics_history() reads it. Only the
extension's owner, superusers and roles granted EXECUTE (pg_monitor) sample; each role reads the
history of the queues it may read, as queue_metrics() decides; nobody else writes the table."""

from __future__ import annotations

import pytest

from tests.helpers import column, raises_sql, scalar, send_n


def _sample(conn, *args: object) -> int:
    """sample_metrics(*args): the number of queues it sampled (the rows it returns)."""
    marks = ", ".join(["%s"] * len(args))
    return scalar(conn, f"SELECT count(*) FROM pgmq.sample_metrics({marks})", args)


def test_a_sample_holds_what_queue_metrics_gives(conn):
    conn.execute("SELECT pgmq.create('a'), pgmq.create('b')")
    send_n(conn, "a", 3)
    conn.execute("SELECT pgmq.read('a', 30, 1)")
    returned = conn.execute("SELECT queue_name, depth, in_flight, total_sent FROM pgmq.sample_metrics()").fetchall()
    assert returned == [("a", 3, 1, 3), ("b", 0, 0, 0)]  # the queue_metrics() rows it recorded
    row = conn.execute("SELECT depth, visible, in_flight, delayed, total_sent, oldest_msg_age_sec IS NOT NULL "
                       "FROM pgmq.metrics_history('a')").fetchall()
    assert row == [(3, 2, 1, 0, 3, True)]
    assert column(conn, "SELECT DISTINCT queue_name FROM pgmq.metrics_history() ORDER BY 1") == ["a", "b"]
    # since: a time after the sample leaves it out
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history('a', now() + interval '1 second')") == 0


def test_max_rows_keeps_the_last_samples_of_each_queue(conn):
    conn.execute("SELECT pgmq.create('a'), pgmq.create('b')")
    for _ in range(5):
        send_n(conn, "a", 1)
        _sample(conn, "1 hour", 3)
    # the last three samples, of both queues: depths 3, 4, 5 for a
    assert column(conn, "SELECT depth FROM pgmq.metrics_history('a')") == [3, 4, 5]
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history('b')") == 3
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history") == 6


def test_max_age_drops_older_samples(conn):
    conn.execute("SELECT pgmq.create('a')")
    _sample(conn)
    # a sample of two hours ago (the owner may write the table; nobody else can)
    conn.execute("UPDATE pgmq.metrics_history SET sampled_at = now() - interval '2 hours'")
    _sample(conn)
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history") == 2  # 24 h kept by default
    _sample(conn, "1 hour", 100)
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history WHERE sampled_at < now() - interval '1 hour'") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history") == 2


@pytest.mark.parametrize("args", [("30 seconds", 10), ("367 days", 10), (None, 10), ("1 hour", 0),
                                  ("1 hour", 1000001), ("1 hour", None)])
def test_bounds_out_of_range_are_refused(conn, args):
    with raises_sql("22023"):
        _sample(conn, *args)


def test_dropping_a_queue_drops_its_history(conn):
    conn.execute("SELECT pgmq.create('a'), pgmq.create('b')")
    _sample(conn)
    conn.execute("SELECT pgmq.drop_queue('a')")
    assert column(conn, "SELECT DISTINCT queue_name FROM pgmq.metrics_history") == ["b"]
    conn.execute("SELECT pgmq.create('a')")  # made again: no history of its predecessor
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history('a')") == 0


def test_reading_an_unknown_queue_is_42P01(conn):
    with raises_sql("42P01"):
        conn.execute("SELECT * FROM pgmq.metrics_history('nope')")


@pytest.fixture
def tenant(conn, connect, make_role):
    """A login role that owns queue `mine`; the superuser owns `theirs`; both sampled once."""
    name = make_role("tenant", login=True)
    t = connect(user=name)
    t.execute("SELECT pgmq.create('mine')")
    conn.execute("SELECT pgmq.create('theirs')")
    _sample(conn)
    return name, t


def test_a_tenant_reads_only_the_history_of_its_queues(conn, tenant):
    _, t = tenant
    assert column(t, "SELECT DISTINCT queue_name FROM pgmq.metrics_history()") == ["mine"]
    assert column(t, "SELECT DISTINCT queue_name FROM pgmq.metrics_history") == ["mine"]  # the table too
    with raises_sql("42501"):
        t.execute("SELECT * FROM pgmq.metrics_history('theirs')")
    # granted access to a queue, it reads that queue's history as well
    conn.execute(f"CALL pgmq.grant_queue_access('theirs', '{tenant[0]}')")
    assert column(t, "SELECT DISTINCT queue_name FROM pgmq.metrics_history() ORDER BY 1") == ["mine", "theirs"]


def test_a_tenant_can_neither_sample_nor_write_the_table(conn, tenant):
    _, t = tenant
    with raises_sql("42501"):
        _sample(t)
    with raises_sql("42501"):
        t.execute("INSERT INTO pgmq.metrics_history VALUES (1, now(), 'mine', 1e9, 0, 0, 0, 0, 0, NULL)")
    with raises_sql("42501"):
        t.execute("UPDATE pgmq.metrics_history SET depth = 0")
    with raises_sql("42501"):
        t.execute("DELETE FROM pgmq.metrics_history")
    with raises_sql("42501"):
        t.execute("SELECT nextval('pgmq.metrics_history_sample_seq')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.metrics_history") == 2


def test_a_monitoring_role_samples_every_queue(conn, connect, make_role, tenant):
    name = make_role("monitor", login=True)
    conn.execute(f"GRANT pg_monitor TO {name}")
    mon = connect(user=name)
    assert _sample(mon) == 2  # the tenant's queue and the superuser's
    assert scalar(mon, "SELECT count(*) FROM pgmq.metrics_history()") == 4
    # what it sampled, the tenant reads for its own queue only
    assert scalar(tenant[1], "SELECT count(*) FROM pgmq.metrics_history()") == 2
