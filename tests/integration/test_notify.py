"""LISTEN/NOTIFY: throttled insert notifications and the opt-in msg_id channel."""

from __future__ import annotations

import time

import psycopg

from tests.helpers import raises_sql, scalar


def drain(listener: psycopg.Connection, timeout: float = 0.5) -> list[tuple[str, str]]:
    return [(n.channel, n.payload) for n in listener.notifies(timeout=timeout)]


def listen(connect, channel: str) -> psycopg.Connection:
    listener = connect()
    listener.execute(f'LISTEN "{channel}"')
    return listener


def notifying(connect, queue: str = "jobs", throttle_ms: int = 0) -> tuple[psycopg.Connection, psycopg.Connection]:
    """A new queue with insert notifications (throttle_ms): (an admin connection, a connection
    listening on the queue's channel)."""
    admin = connect()
    admin.execute("SELECT pgmq.create(%s::text)", (queue,))
    admin.execute("SELECT pgmq.enable_notify_insert(%s::text, %s::integer)", (queue, throttle_ms))
    return admin, listen(connect, f"pgmq.q_{queue}.INSERT")


def test_notification_arrives_at_commit_not_before(connect):
    admin, listener = notifying(connect)
    producer = connect(autocommit=False)
    producer.execute("SELECT pgmq.send('jobs', '{}')")
    assert drain(listener, 0.3) == []
    producer.commit()
    assert drain(listener) == [("pgmq.q_jobs.INSERT", "")]


def test_rolled_back_send_notifies_nobody(connect):
    admin, listener = notifying(connect)
    producer = connect(autocommit=False)
    producer.execute("SELECT pgmq.send('jobs', '{}')")
    producer.rollback()
    assert drain(listener) == []


def test_mixed_case_queue_names_notify_on_their_own_channel(connect):
    admin, listener = notifying(connect, "MyQueue")
    admin.execute("SELECT pgmq.send('MyQueue', '{}')")
    assert drain(listener) == [("pgmq.q_MyQueue.INSERT", "")]


def test_throttle_limits_notifications(connect):
    admin, listener = notifying(connect, throttle_ms=1000)
    for _ in range(5):
        admin.execute("SELECT pgmq.send('jobs', '{}')")
    assert len(drain(listener)) == 1
    time.sleep(1.1)
    admin.execute("SELECT pgmq.send('jobs', '{}')")
    assert len(drain(listener)) == 1


def test_default_throttle_and_listing(connect):
    admin = connect()
    for q in ("b", "a"):
        admin.execute("SELECT pgmq.create(%s)", (q,))
    admin.execute("SELECT pgmq.enable_notify_insert('b')")
    admin.execute("SELECT pgmq.enable_notify_insert(queue_name => 'a', throttle_interval_ms => 10)")
    rows = admin.execute("SELECT queue_name, throttle_interval_ms, last_notified_at = to_timestamp(0) "
                         "FROM pgmq.list_notify_insert_throttles()").fetchall()
    assert rows == [("a", 10, True), ("b", 250, True)]


def test_update_notify_insert(connect):
    admin, listener = notifying(connect, throttle_ms=5000)
    admin.execute("SELECT pgmq.send('jobs', '{}')")
    assert len(drain(listener)) == 1
    admin.execute("SELECT pgmq.update_notify_insert('jobs', 0)")
    admin.execute("SELECT pgmq.send('jobs', '{}')")
    admin.execute("SELECT pgmq.send('jobs', '{}')")
    assert len(drain(listener)) == 2
    assert scalar(admin, "SELECT throttle_interval_ms FROM pgmq.notify_insert_throttle") == 0


def test_update_and_enable_errors(conn):
    conn.execute("SELECT pgmq.create('plain')")
    with raises_sql("P0001", 'Queue "plain" does not have notify_insert enabled. '
                             'Enable it first using pgmq.enable_notify_insert()'):
        conn.execute("SELECT pgmq.update_notify_insert('plain', 10)")
    with raises_sql("P0001", 'Queue "ghost" does not exist. Create the queue first using pgmq.create()'):
        conn.execute("SELECT pgmq.update_notify_insert('ghost', 10)")
    with raises_sql("P0001", 'Queue "ghost" does not exist. Create it first using pgmq.create()'):
        conn.execute("SELECT pgmq.enable_notify_insert('ghost')")
    # upstream's two texts: without "got" in enable, with it in update
    with raises_sql("P0001", "throttle_interval_ms must be non-negative"):
        conn.execute("SELECT pgmq.enable_notify_insert('plain', -1)")
    with raises_sql("P0001", "throttle_interval_ms must be non-negative, got: -5"):
        conn.execute("SELECT pgmq.update_notify_insert('plain', -5)")
    # a NULL throttle fails on the table's NOT NULL, as upstream's
    with raises_sql("23502", 'null value in column "throttle_interval_ms" of relation '
                             '"notify_insert_throttle" violates not-null constraint'):
        conn.execute("SELECT pgmq.enable_notify_insert('plain', NULL)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.notify_insert_throttle") == 0


def test_disable_stops_notifications(connect):
    admin = connect()
    admin.execute("SELECT pgmq.create('jobs')")
    admin.execute("SELECT pgmq.enable_notify_insert('jobs', 0)")
    admin.execute("SELECT pgmq.disable_notify_insert('jobs')")
    listener = listen(connect, "pgmq.q_jobs.INSERT")
    admin.execute("SELECT pgmq.send('jobs', '{}')")
    assert drain(listener) == []
    assert scalar(admin, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_jobs'::regclass") == 0


def test_enable_twice_keeps_one_trigger(conn):
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.enable_notify_insert('jobs')")
    conn.execute("SELECT pgmq.enable_notify_insert('jobs', 100)")
    assert scalar(conn, "SELECT count(*) FROM pg_trigger WHERE tgrelid = 'pgmq.q_jobs'::regclass") == 1
    assert scalar(conn, "SELECT throttle_interval_ms FROM pgmq.notify_insert_throttle") == 100


def test_throttle_row_lost_in_a_crash_still_notifies(connect):
    admin = connect()
    admin.execute("SELECT pgmq.create('jobs')")
    admin.execute("SELECT pgmq.enable_notify_insert('jobs', 1000)")
    admin.execute("DELETE FROM pgmq.notify_insert_throttle")  # what crash recovery of UNLOGGED does
    listener = listen(connect, "pgmq.q_jobs.INSERT")
    admin.execute("SELECT pgmq.send('jobs', '{}')")
    assert len(drain(listener)) == 1


def test_open_producer_transaction_does_not_block_other_producers(connect):
    admin = connect()
    admin.execute("SELECT pgmq.create('jobs')")
    admin.execute("SELECT pgmq.enable_notify_insert('jobs', 10)")
    slow = connect(autocommit=False)
    slow.execute("SELECT pgmq.send('jobs', '{}')")
    fast = connect()
    fast.execute("SET lock_timeout = '500ms'")
    fast.execute("SELECT pgmq.send('jobs', '{}')")  # must not wait for `slow`
    slow.commit()
    assert scalar(admin, "SELECT count(*) FROM pgmq.q_jobs") == 2


def test_drop_queue_removes_throttle_row(conn):
    conn.execute("SELECT pgmq.create('jobs')")
    conn.execute("SELECT pgmq.enable_notify_insert('jobs')")
    conn.execute("SELECT pgmq.drop_queue('jobs')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.notify_insert_throttle") == 0


def test_msg_id_channel_carries_each_id(connect):
    admin = connect()
    admin.execute("SELECT pgmq.create('Orders')")
    admin.execute("SELECT pgmq.enable_notify_msg_id('Orders')")
    listener = listen(connect, "pgmq.q_Orders.MSG_ID")
    admin.execute("SELECT pgmq.send_batch('Orders', ARRAY['{}','{}','{}']::jsonb[])")
    assert drain(listener) == [("pgmq.q_Orders.MSG_ID", "1"), ("pgmq.q_Orders.MSG_ID", "2"),
                               ("pgmq.q_Orders.MSG_ID", "3")]
    admin.execute("SELECT pgmq.disable_notify_msg_id('Orders')")
    admin.execute("SELECT pgmq.send('Orders', '{}')")
    assert drain(listener) == []
