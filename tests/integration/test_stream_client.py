"""pgmq_build.client's stream calls against a real server, and consume_stream(): each batch's
handler work commits with its ack (exactly once) across competing consumers, failures, expired
leases and broken connections."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import psycopg
import pytest

from pgmq_build.client import Client, StreamBatch
from tests.helpers import column, raises_sql, scalar, wait_for


@pytest.fixture
def client(dsn):
    with Client(dsn, max_size=6) as c:
        c.create_stream("ev")
        yield c


@pytest.fixture
def done_table(conn):
    """Where handlers record the events they did: a second commit of one event fails."""
    conn.execute("CREATE TABLE done_events (n int PRIMARY KEY, batch_id bigint NOT NULL)")
    return "done_events"


def record(batch: StreamBatch, conn: psycopg.Connection) -> None:
    """A handler whose work is a write on the connection it is given."""
    conn.execute("INSERT INTO done_events SELECT unnest(%s::int[]), %s",
                 ([e.message["n"] for e in batch.events], batch.batch_id))


def run_consumer(client: Client, *args, **kwargs) -> tuple[Future, ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=1)
    return pool.submit(client.consume_stream, *args, **kwargs), pool


# ----------------------------------------------------------------------------- the calls

def test_lifecycle_send_read_ack_info(client, conn):
    assert client.create_stream("ev") is None  # idempotent
    client.create_stream("ev2", retention=3600, rotation_period=timedelta(minutes=5),
                         retention_bytes=10**9, drop_unacked=True)
    listed = {s.stream_name: s for s in client.list_streams()}
    assert set(listed) == {"ev", "ev2"}
    assert (listed["ev2"].retention, listed["ev2"].rotation_period) == (timedelta(hours=1), timedelta(minutes=5))
    assert (listed["ev2"].retention_bytes, listed["ev2"].drop_unacked) == (10**9, True)
    assert listed["ev"].segments == 1 and listed["ev"].total_bytes > 0

    assert client.subscribe("ev", "early", start="earliest") == 0
    first = client.stream_send("ev", {"n": 1}, headers={"k": "v"})
    late = client.subscribe("ev", "late")  # from 'latest': after event 1
    assert client.subscribe("ev", "late", start="earliest") == late  # idempotent
    assert client.stream_send_batch("ev", [{"n": 2}, {"n": 3}], headers=[None, {"h": 3}]) == [first + 1, first + 2]

    # batches are cut at ticks: 'late' subscribing made one after event 1
    one = client.stream_read("ev", "early", lease_seconds=60)
    assert [e.message for e in one.events] == [{"n": 1}] and one.events[0].ev_id == first
    assert one.events[0].headers == {"k": "v"} and isinstance(one.events[0].ev_time, datetime)
    two = client.stream_read("ev", "early")  # the next batch, while the first is out
    assert two.messages == [{"n": 2}, {"n": 3}] and len(two) == 2 and two.batch_id != one.batch_id
    assert [e.headers for e in two.events] == [None, {"h": 3}]
    assert client.stream_read("ev", "early") is None  # nothing new
    client.stream_ack("ev", "early", two.batch_id)
    info = {i.subscription_name: i for i in client.stream_info("ev")}
    assert (info["early"].batches_out, info["early"].lag_events) == (1, 3)  # 'one' holds it back
    client.stream_ack("ev", "early", one.batch_id)
    with raises_sql("55000"):
        client.stream_ack("ev", "early", one.batch_id)  # acknowledged already
    info = {i.subscription_name: i for i in client.stream_info()}
    assert (info["early"].lag_events, info["early"].batches_out, info["early"].lost) == (0, 0, 0)

    late_batch = client.stream_read("ev", "late")
    assert late_batch.messages == [{"n": 2}, {"n": 3}]
    client.stream_ack("ev", "late", late_batch.batch_id)

    assert client.stream_tick("ev") == 0  # nothing came since the readers' ticks
    client.stream_send("ev", {"n": 4})
    assert client.stream_tick() == 1
    assert client.unsubscribe("ev", "late") is True
    assert client.unsubscribe("ev", "late") is False
    assert [i.subscription_name for i in client.stream_info("ev")] == ["early"]
    assert client.drop_stream("ev2") is True and client.drop_stream("ev2") is False


def test_rewind_to_a_position_and_to_a_time(client):
    client.subscribe("ev", "a")
    client.stream_send("ev", {"n": 1})
    b = client.stream_read("ev", "a")
    client.stream_ack("ev", "a", b.batch_id)
    middle = client.stream_info("ev")[0].position
    client.stream_send("ev", {"n": 2})
    b = client.stream_read("ev", "a")
    assert b.messages == [{"n": 2}]  # leased, then rewound: the open batch is dropped
    assert client.stream_rewind("ev", "a", middle) == middle
    assert client.stream_read("ev", "a").messages == [{"n": 2}]
    at = client.stream_rewind("ev", "a", datetime(2000, 1, 1, tzinfo=timezone.utc))
    assert at < middle
    assert client.stream_read("ev", "a").messages == [{"n": 1}]  # batches cut where they were
    assert client.stream_read("ev", "a").messages == [{"n": 2}]


def test_server_errors_propagate_with_their_sqlstate(client):
    with raises_sql("42P01"):
        client.stream_send("nope", {})
    with raises_sql("42704"):
        client.stream_read("ev", "ghost")
    with raises_sql("22023"):
        client.subscribe("ev", "x", start=999999)
    client.subscribe("ev", "a")
    with raises_sql("22023"):
        client.stream_rewind("ev", "a", 999999)


# ----------------------------------------------------------------------------- consume_stream

def test_competing_consumers_do_every_event_exactly_once(dsn, client, conn, done_table):
    """Three consume_stream loops (each with its own client and pool) share one subscription
    while two producers send: each event's work commits once."""
    client.subscribe("ev", "work")
    produced = 600
    stop = threading.Event()
    clients = [Client(dsn) for _ in range(3)]
    pool = ThreadPoolExecutor(max_workers=5)
    try:
        consumers = [pool.submit(c.consume_stream, "ev", "work", record, poll_interval=0.05,
                                 stop=stop) for c in clients]

        def produce(start: int) -> None:
            with Client(dsn, max_size=1) as p:
                for k in range(start, produced, 20):
                    p.stream_send_batch("ev", [{"n": n} for n in range(k, min(k + 10, produced))])
                    time.sleep(0.01)  # the consumers read while the producers send

        producers = [pool.submit(produce, s) for s in (0, 10)]
        for f in producers:
            f.result(timeout=60)
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM done_events") == produced
                 or any(f.done() for f in consumers), timeout=60, what="every event done")
        stop.set()
        handed = sum(f.result(timeout=10) for f in consumers)
    finally:
        stop.set()
        pool.shutdown()
        for c in clients:
            c.close()
    assert column(conn, "SELECT n FROM done_events ORDER BY n") == list(range(produced))
    assert handed == produced  # no batch was handed out twice: none failed or expired
    assert scalar(conn, "SELECT count(DISTINCT batch_id) FROM done_events") > 3  # several batches
    assert client.stream_info("ev")[0].lag_events == 0


def test_a_failing_handler_rolls_back_and_the_batch_comes_back_after_its_lease(client, conn, done_table):
    client.subscribe("ev", "a")
    client.stream_send_batch("ev", [{"n": 1}, {"n": 2}])
    calls: list[tuple[int, int]] = []
    stop = threading.Event()

    def handler(batch: StreamBatch, c: psycopg.Connection) -> None:
        calls.append((batch.batch_id, time.monotonic()))
        record(batch, c)  # written, then rolled back by the failure
        if len(calls) == 1:
            raise RuntimeError("first delivery fails")
        stop.set()

    handed = client.consume_stream("ev", "a", handler, lease_seconds=1, poll_interval=0.1, stop=stop)
    assert handed == 4  # the two events, twice
    (first, t1), (second, t2) = calls
    assert second != first and t2 - t1 >= 0.9  # a new batch id, after the lease
    assert conn.execute("SELECT n, batch_id FROM done_events ORDER BY n").fetchall() == [(1, second), (2, second)]
    assert client.stream_info("ev")[0].batches_out == 0


def test_on_error_raise_propagates_after_the_rollback(client, conn, done_table):
    client.subscribe("ev", "a")
    client.stream_send("ev", {"n": 1})

    def handler(batch, c):
        record(batch, c)
        raise KeyError("bad event")

    with pytest.raises(KeyError, match="bad event"):
        client.consume_stream("ev", "a", handler, on_error="raise", poll_interval=0.1)
    assert scalar(conn, "SELECT count(*) FROM done_events") == 0
    assert client.stream_info("ev")[0].batches_out == 1  # still leased; it comes back later


def test_a_handler_that_swallows_a_database_error_fails_its_batch(client, conn, done_table):
    """Its transaction is aborted, so the ack cannot run: the batch is not acknowledged."""
    client.subscribe("ev", "a")
    client.stream_send("ev", {"n": 1})
    stop = threading.Event()

    def handler(batch, c):
        stop.set()
        try:
            c.execute("SELECT 1/0")
        except psycopg.errors.DivisionByZero:
            pass

    client.consume_stream("ev", "a", handler, poll_interval=0.1, stop=stop)
    assert client.stream_info("ev")[0].batches_out == 1 and client.stream_info("ev")[0].lag_events == 1


def test_a_handler_slower_than_its_lease_loses_the_batch_and_its_work(dsn, client, conn, done_table):
    """The first consumer holds the batch past its lease; a second takes it over and commits;
    the first one's ack fails and its work is rolled back: each event done once."""
    client.subscribe("ev", "a")
    client.stream_send_batch("ev", [{"n": 1}, {"n": 2}])
    taken = threading.Event()
    stop_slow, stop_fast = threading.Event(), threading.Event()

    def slow(batch, c):
        record(batch, c)
        taken.set()
        time.sleep(2.5)  # past the 1 s lease
        stop_slow.set()

    def fast(batch, c):
        record(batch, c)
        stop_fast.set()

    future, pool = run_consumer(client, "ev", "a", slow, lease_seconds=1, poll_interval=0.1, stop=stop_slow)
    try:
        assert taken.wait(10)
        with Client(dsn) as other:
            other.consume_stream("ev", "a", fast, lease_seconds=30, poll_interval=0.1, stop=stop_fast)
        assert future.result(timeout=20) == 2
    finally:
        stop_slow.set()
        pool.shutdown()
    rows = conn.execute("SELECT n, batch_id FROM done_events ORDER BY n").fetchall()
    assert [n for n, _ in rows] == [1, 2] and len({b for _, b in rows}) == 1
    assert client.stream_info("ev")[0].batches_out == 0 and client.stream_info("ev")[0].lag_events == 0


def test_consume_stream_survives_broken_connections(client, conn, done_table):
    client.subscribe("ev", "a")
    stop = threading.Event()
    future, pool = run_consumer(client, "ev", "a", record, poll_interval=0.1, stop=stop)
    try:
        client.stream_send_batch("ev", [{"n": n} for n in range(5)])
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM done_events") == 5, what="the first events")
        killed = scalar(conn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                              "AND backend_type = 'client backend'")
        assert killed >= 1
        conn.execute("SELECT pgmq.stream_send_batch('ev', ARRAY['{\"n\": 5}', '{\"n\": 6}']::jsonb[])")
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM done_events") == 7 or future.done(),
                 what="events after the kill")
        assert not future.done(), future.exception()
    finally:
        stop.set()
        pool.shutdown()
    assert future.result() == 7
    assert column(conn, "SELECT n FROM done_events ORDER BY n") == list(range(7))


def test_consume_stream_raises_what_retrying_cannot_fix(client):
    with raises_sql("42704"):
        client.consume_stream("ev", "ghost", record, poll_interval=0.1)
    stop = threading.Event()
    stop.set()
    assert client.consume_stream("ev", "ghost", record, stop=stop) == 0  # stopped: no read at all


def test_stream_access_calls(client, conn, make_role):
    reader = make_role("reader")
    has = "SELECT has_table_privilege(%s, 'pgmq.s_ev', %s)"
    client.grant_stream_access("ev", reader, "read")
    assert scalar(conn, has, (reader, "SELECT")) and not scalar(conn, has, (reader, "INSERT"))
    client.grant_stream_access("ev", reader)  # all
    assert scalar(conn, has, (reader, "INSERT"))
    client.revoke_stream_access("ev", reader, "write")
    assert scalar(conn, has, (reader, "SELECT")) and not scalar(conn, has, (reader, "INSERT"))
    with raises_sql("22023"):
        client.grant_stream_access("ev", reader, "delete")
    with raises_sql("42704"):
        client.revoke_stream_access("ev", "no_such_role_here")
