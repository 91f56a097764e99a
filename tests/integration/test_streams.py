"""Streams (templates/features/streams): an append-only log in rotated segment tables, with
subscriptions whose batches are cut at ticks (transaction snapshots)."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, raises_sql, run_threads, scalar


def send(conn, n: int, stream: str = "ev") -> int:
    return scalar(conn, "SELECT pgmq.stream_send(%s, %s)", (stream, Jsonb({"n": n})))


def read(conn, sub: str, stream: str = "ev", lease: int = 30) -> tuple[int | None, list[int]]:
    """(batch_id, the events' n) of the next batch; (None, []) when nothing is new."""
    rows = conn.execute("SELECT batch_id, message->>'n' FROM pgmq.stream_read(%s, %s, %s)",
                        (stream, sub, lease)).fetchall()
    return (rows[0][0] if rows else None), [int(n) for _, n in rows]


def drain(conn, sub: str, stream: str = "ev") -> list[int]:
    got: list[int] = []
    while True:
        batch, ns = read(conn, sub, stream)
        if batch is None:
            return got
        conn.execute("SELECT pgmq.stream_ack(%s, %s, %s)", (stream, sub, batch))
        got += ns


@pytest.fixture
def stream(conn):
    conn.execute("SELECT pgmq.create_stream('ev')")
    return "ev"


def test_every_subscription_sees_every_event_once_in_order(conn, stream):
    conn.execute("SELECT pgmq.subscribe('ev', 'a', 'earliest'), pgmq.subscribe('ev', 'b')")
    send(conn, 1)
    assert column(conn, "SELECT * FROM pgmq.stream_send_batch('ev', ARRAY['{\"n\":2}','{\"n\":3}']::jsonb[])") == [2, 3]
    assert drain(conn, "a") == [1, 2, 3]
    send(conn, 4)
    assert drain(conn, "a") == [4]
    assert drain(conn, "b") == [1, 2, 3, 4]
    assert drain(conn, "a") == [] and drain(conn, "b") == []
    # a subscription from 'latest' starts after what is there; subscribe is idempotent
    late = scalar(conn, "SELECT pgmq.subscribe('ev', 'c')")
    assert scalar(conn, "SELECT pgmq.subscribe('ev', 'c', 'earliest')") == late
    send(conn, 5)
    assert drain(conn, "c") == [5]
    info = conn.execute("SELECT subscription_name, lag_events, batches_out, lost FROM pgmq.stream_info('ev')").fetchall()
    assert info == [("a", 1, 0, 0), ("b", 1, 0, 0), ("c", 0, 0, 0)]


def test_a_late_commit_is_never_skipped(connect, conn, stream):
    """A slow producer's event commits after a reader has already read past later events: it
    comes in a later batch, never lost, never twice."""
    conn.execute("SELECT pgmq.subscribe('ev', 'a')")
    slow = connect(autocommit=False)
    send(slow, 1)  # uncommitted
    send(conn, 2)
    assert drain(conn, "a") == [2]
    send(conn, 3)
    slow.commit()
    send(conn, 4)
    assert sorted(drain(conn, "a")) == [1, 3, 4]
    assert drain(conn, "a") == []


def test_a_late_commit_that_is_the_last_event_still_comes(connect, conn, stream):
    """No event after it: the readers' tick is made when an event committed since the last tick,
    not only when new ids were handed out (the late one's id is older than that tick)."""
    conn.execute("SELECT pgmq.subscribe('ev', 'a')")
    slow = connect(autocommit=False)
    send(slow, 1)  # its id is taken, its commit comes last
    send(conn, 2)
    assert drain(conn, "a") == [2]  # this read's tick has seen id 2 and not 1
    slow.commit()
    assert drain(conn, "a") == [1]
    assert scalar(conn, "SELECT pgmq.stream_tick('ev')") == 0  # nothing new: no tick
    assert drain(conn, "a") == []


def test_an_unacknowledged_batch_comes_back_after_its_lease(connect, conn, stream):
    conn.execute("SELECT pgmq.subscribe('ev', 'a')")
    send(conn, 1)
    first, ns = read(conn, "a", lease=1)
    assert ns == [1]
    other = connect()
    assert read(other, "a") == (None, [])  # leased to the first consumer
    time.sleep(1.2)
    second, ns = read(other, "a")
    assert ns == [1] and second != first
    with raises_sql("55000"):
        conn.execute("SELECT pgmq.stream_ack('ev', 'a', %s)", (first,))  # too late
    conn.execute("SELECT pgmq.stream_ack('ev', 'a', %s)", (second,))
    assert drain(conn, "a") == []


def test_a_consumer_that_dies_mid_batch_gives_it_back(connect, conn, stream):
    """Read, work and acknowledge in one transaction: a backend killed in the middle leaves
    nothing done and the batch is delivered again."""
    conn.execute("SELECT pgmq.subscribe('ev', 'a')")
    conn.execute("CREATE TABLE done_events (n int)")
    send(conn, 1)
    victim = connect(autocommit=False)
    batch, ns = read(victim, "a")
    victim.execute("INSERT INTO done_events SELECT unnest(%s::int[])", (ns,))
    conn.execute("SELECT pg_terminate_backend(%s)", (victim.info.backend_pid,))
    with pytest.raises(psycopg.OperationalError):
        victim.execute("SELECT pgmq.stream_ack('ev', 'a', %s)", (batch,))
    assert scalar(conn, "SELECT count(*) FROM done_events") == 0
    with conn.transaction():
        batch, ns = read(conn, "a")
        conn.execute("INSERT INTO done_events SELECT unnest(%s::int[])", (ns,))
        conn.execute("SELECT pgmq.stream_ack('ev', 'a', %s)", (batch,))
    assert column(conn, "SELECT n FROM done_events") == [1]


def test_competing_consumers_share_a_subscription_without_overlap(connect, conn, stream):
    """Three consumers of one subscription and two producers at once: every event is done
    exactly once (each batch's results and its ack commit together)."""
    conn.execute("SELECT pgmq.subscribe('ev', 'work')")
    conn.execute("CREATE TABLE done_events (n int PRIMARY KEY)")  # a second delivery would fail
    produced = 400
    stop = threading.Event()
    errors: list[BaseException] = []

    def producer(start: int) -> None:
        c = connect()
        for n in range(start, produced, 2):
            send(c, n)

    def consumer() -> None:
        c = connect()
        try:
            while not stop.is_set():
                rows = c.execute("SELECT batch_id, message->>'n' FROM pgmq.stream_read('ev', 'work')").fetchall()
                if not rows:
                    time.sleep(0.01)
                    continue
                with c.transaction():
                    c.execute("INSERT INTO done_events SELECT unnest(%s::int[])", ([int(n) for _, n in rows],))
                    c.execute("SELECT pgmq.stream_ack('ev', 'work', %s)", (rows[0][0],))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    consumers = [threading.Thread(target=consumer) for _ in range(3)]
    for t in consumers:
        t.start()
    run_threads([threading.Thread(target=producer, args=(s,)) for s in (0, 1)])
    deadline = time.monotonic() + 30
    while scalar(conn, "SELECT count(*) FROM done_events") < produced and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in consumers:
        t.join()
    assert errors == []
    assert column(conn, "SELECT n FROM done_events ORDER BY n") == list(range(produced))


def test_rewind_replays(conn, stream):
    conn.execute("SELECT pgmq.subscribe('ev', 'a')")
    send(conn, 1)
    assert drain(conn, "a") == [1]
    middle = scalar(conn, "SELECT position FROM pgmq.stream_info('ev')")
    send(conn, 2)
    assert drain(conn, "a") == [2]
    assert scalar(conn, "SELECT pgmq.stream_rewind('ev', 'a', %s::bigint)", (middle,)) == middle
    assert drain(conn, "a") == [2]
    conn.execute("SELECT pgmq.stream_rewind('ev', 'a', '-infinity'::timestamptz)")
    assert drain(conn, "a") == [1, 2]


def test_rotation_and_retention_keep_what_a_subscription_needs(conn):
    conn.execute("SELECT pgmq.create_stream('ev', retention => '0', rotation_period => '1 second')")
    conn.execute("SELECT pgmq.subscribe('ev', 'slow', 'earliest'), pgmq.subscribe('ev', 'fast', 'earliest')")
    send(conn, 1)
    assert drain(conn, "fast") == [1]
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")  # rotates: segment 0 closed
    time.sleep(1.1)
    send(conn, 2)
    conn.execute("SELECT pgmq.stream_tick('ev')")
    segments = "SELECT count(*) FROM pgmq.stream_segments WHERE stream_name = 'ev'"
    assert scalar(conn, segments) >= 2  # slow has not acknowledged segment 0
    assert drain(conn, "slow") == [1, 2]
    assert drain(conn, "fast") == [2]
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert scalar(conn, "SELECT min(segment) FROM pgmq.stream_segments WHERE stream_name = 'ev'") >= 1
    assert scalar(conn, "SELECT to_regclass('pgmq.s_ev$0')") is None  # dropped whole
    assert scalar(conn, "SELECT sum(lost) FROM pgmq.stream_info('ev')") == 0


def test_retention_keeps_acknowledged_segments_for_their_time(conn):
    """A closed segment every subscription has acknowledged stays until it is older than the
    retention (it was dropped at once when no retention_bytes was set)."""
    conn.execute("SELECT pgmq.create_stream('ev', retention => '1 hour', rotation_period => '1 second')")
    conn.execute("SELECT pgmq.subscribe('ev', 'a', 'earliest')")
    send(conn, 1)
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")  # rotates: segment 0 closed
    send(conn, 2)
    assert drain(conn, "a") == [1, 2]  # acknowledged past segment 0
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")  # closed > 1 s ago: kept an hour
    assert column(conn, "SELECT segment FROM pgmq.stream_segments ORDER BY 1")[0] == 0
    conn.execute("UPDATE pgmq.streams SET retention = '1 second'")
    conn.execute("SELECT pgmq.stream_tick('ev')")
    assert 0 not in column(conn, "SELECT segment FROM pgmq.stream_segments ORDER BY 1")


def test_drop_unacked_retention_counts_what_was_lost(conn):
    conn.execute("SELECT pgmq.create_stream('ev', retention => '0', rotation_period => '1 second', "
                 "drop_unacked => true)")
    conn.execute("SELECT pgmq.subscribe('ev', 'slow', 'earliest')")
    send(conn, 1)
    send(conn, 2)
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")  # close segment 0
    time.sleep(1.1)
    conn.execute("SELECT pgmq.stream_tick('ev')")  # drop it: 2 events lost to slow
    assert scalar(conn, "SELECT lost FROM pgmq.stream_info('ev')") == 2
    send(conn, 3)
    assert drain(conn, "slow") == [3]


def test_a_held_xmin_horizon_leaves_no_dead_tuples(connect, conn, stream):
    conn.execute("SELECT pgmq.subscribe('ev', 'a')")
    holder = connect(autocommit=False)
    holder.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
    holder.execute("SELECT 1")
    for n in range(200):
        send(conn, n)
        if n % 20 == 19:
            assert len(drain(conn, "a")) == 20
    holder.rollback()
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_sleep(0.1)")
    dead = scalar(conn, "SELECT coalesce(sum(n_dead_tup), 0) FROM pg_stat_user_tables "
                        "WHERE schemaname = 'pgmq' AND relname LIKE 's\\_ev%'")
    assert dead == 0


def test_bad_input_is_refused(conn, stream):
    conn.execute("SELECT pgmq.subscribe('ev', 'a')")
    cases = [
        ("SELECT pgmq.stream_send('nope', '{}')", "42P01"),
        ("SELECT pgmq.stream_send('bad;name', '{}')", "42602"),
        ("SELECT pgmq.create_stream('ev2', retention => '-1 day')", "22023"),
        ("SELECT pgmq.create_stream('ev2', rotation_period => '0')", "22023"),
        ("SELECT pgmq.stream_send_batch('ev', ARRAY[]::jsonb[])", "22023"),
        ("SELECT pgmq.stream_send_batch('ev', ARRAY['{}']::jsonb[], ARRAY[NULL, NULL]::jsonb[])", "22023"),
        ("SELECT pgmq.subscribe('ev', '')", "22023"),
        ("SELECT pgmq.subscribe('ev', 'x', 'soonish')", "22023"),
        ("SELECT pgmq.subscribe('ev', 'x', '999999')", "22023"),
        ("SELECT * FROM pgmq.stream_read('ev', 'ghost')", "42704"),
        ("SELECT * FROM pgmq.stream_read('ev', 'a', 0)", "22023"),
        ("SELECT pgmq.stream_ack('ev', 'a', 123456)", "55000"),
        ("SELECT pgmq.stream_rewind('ev', 'a', 999999::bigint)", "22023"),
    ]
    for sql, state in cases:
        with raises_sql(state):
            conn.execute(sql)
    assert scalar(conn, "SELECT count(*) FROM pgmq.streams") == 1
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_subscriptions") == 1
    assert scalar(conn, "SELECT pgmq.drop_stream('ev')") is True
    assert scalar(conn, "SELECT pgmq.drop_stream('ev')") is False
    assert scalar(conn, "SELECT to_regclass('pgmq.s_ev')") is None


def test_a_stream_is_its_owners(conn, make_role, stream):
    """Its tables belong to the extension's owner: its owner holds SELECT and INSERT only;
    other roles may neither read nor drop it."""
    owner = make_role("streamer")
    stranger = make_role("stranger")
    conn.execute(f"GRANT USAGE ON SCHEMA public TO {owner}")
    conn.execute(f"SET ROLE {owner}")
    try:
        conn.execute("SELECT pgmq.create_stream('mine')")
        conn.execute("SELECT pgmq.subscribe('mine', 'a')")
        send(conn, 1, "mine")
        assert drain(conn, "a", "mine") == [1]
        with raises_sql("42501"):
            conn.execute("CREATE TRIGGER t BEFORE INSERT ON pgmq.s_mine$0 FOR EACH ROW EXECUTE FUNCTION pgmq.notify_queue_listeners()")
        with raises_sql("42501"):
            conn.execute("DELETE FROM pgmq.s_mine$0")
    finally:
        conn.execute("RESET ROLE")
    conn.execute(f"SET ROLE {stranger}")
    try:
        with raises_sql("42501"):
            conn.execute("SELECT * FROM pgmq.stream_read('mine', 'a')")
        with raises_sql("42501"):
            conn.execute("SELECT pgmq.stream_send('mine', '{}')")
        with raises_sql("42501"):
            conn.execute("SELECT pgmq.drop_stream('mine')")
    finally:
        conn.execute("RESET ROLE")
    assert scalar(conn, "SELECT pg_get_userbyid(relowner) = current_user FROM pg_class WHERE oid = 'pgmq.s_mine$0'::regclass")
