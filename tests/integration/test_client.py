"""pgmq_build.client: every method against a real server, and the consume() loop."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from pgmq_build.client import Client, Message, QueueMetrics
from tests.helpers import column, raises_sql, scalar, wait_for


@pytest.fixture
def client(dsn):
    with Client(dsn) as c:
        c.create("jobs")
        yield c


def lease_seconds(conn, msg_id, table="q_jobs"):
    return scalar(conn, f"SELECT round(extract(epoch FROM vt - clock_timestamp())) FROM pgmq.{table} "
                        "WHERE msg_id = %s", (msg_id,))


# ----------------------------------------------------------------------------- lifecycle

def test_create_drop_and_unlogged(client, conn):
    client.create("jobs")  # idempotent
    client.create("fast", unlogged=True)
    assert conn.execute("SELECT queue_name, is_unlogged FROM pgmq.meta ORDER BY 1").fetchall() == [
        ("fast", True), ("jobs", False)]
    assert client.drop("fast") is True
    assert client.drop("fast") is False
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == ["jobs"]


def test_context_manager_closes_own_pool(dsn):
    with Client(dsn, min_size=0, max_size=2) as c:
        assert not c.closed
        pool = c.pool
    assert c.closed and pool.closed
    with pytest.raises(RuntimeError, match="closed"):
        c.metrics("jobs")
    c.close()  # idempotent


def test_shared_pool_is_not_closed(dsn, queue):
    with ConnectionPool(dsn, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True) as pool:
        with Client(pool=pool) as c:
            assert c.send("jobs", {"a": 1}) == 1
        assert not pool.closed
        with Client(pool=pool) as c:
            assert [m.message for m in c.read("jobs")] == [{"a": 1}]


def test_bad_dsn_fails_at_construction_with_psycopg_error(dsn):
    with pytest.raises(psycopg.OperationalError):
        Client(dsn + " dbname=no_such_database_here")


def test_client_needs_dsn_or_pool():
    with pytest.raises(ValueError):
        Client()


# ----------------------------------------------------------------------------- sending

def test_send_and_read_map_every_column(client, conn):
    msg_id = client.send("jobs", {"task": 1})
    (msg,) = client.read("jobs", vt=45)
    assert isinstance(msg, Message)
    assert (msg.msg_id, msg.read_ct, msg.message, msg.headers) == (msg_id, 1, {"task": 1}, None)
    assert msg.vt - msg.last_read_at == timedelta(seconds=45)
    assert msg.enqueued_at <= msg.last_read_at
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.read_ct = 2  # type: ignore[misc]


def test_send_accepts_any_json_value(client):
    ids = [client.send("jobs", v) for v in ([1, 2], "text", 3.5, None)]
    assert [m.message for m in client.read("jobs", qty=10)] == [[1, 2], "text", 3.5, None]
    assert ids == sorted(ids)


def test_send_with_headers(client):
    client.send("jobs", {"n": 1}, headers={"trace": "abc", "x-pgmq-priority": -1})
    client.send("jobs", {"n": 0})
    msgs = client.read("jobs", qty=2)
    assert [m.message["n"] for m in msgs] == [1, 0]  # the header's priority is honoured
    assert msgs[0].headers == {"trace": "abc", "x-pgmq-priority": -1}


def test_send_with_delay_in_seconds(client, conn):
    msg_id = client.send("jobs", {}, headers={"h": 1}, delay=60)
    assert client.read("jobs") == []
    assert lease_seconds(conn, msg_id) == 60
    assert scalar(conn, "SELECT headers FROM pgmq.q_jobs") == {"h": 1}


def test_send_with_delay_as_datetime(client, conn):
    at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(hours=1)
    msg_id = client.send("jobs", {}, delay=at)
    assert scalar(conn, "SELECT vt FROM pgmq.q_jobs WHERE msg_id = %s", (msg_id,)) == at
    past = datetime.now(timezone.utc) - timedelta(minutes=1)
    client.send("jobs", {"now": True}, headers={"k": "v"}, delay=past)
    assert [m.message for m in client.read("jobs", qty=5)] == [{"now": True}]


def test_send_refuses_bad_delays_before_the_round_trip(client, conn):
    with pytest.raises(ValueError, match="delay"):
        client.send("jobs", {}, delay=-1)
    with pytest.raises(ValueError, match="timezone-aware"):
        client.send("jobs", {}, delay=datetime.now())
    with pytest.raises(TypeError):
        client.send("jobs", {}, delay=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        client.send("jobs", {}, delay=True)
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0


def test_server_errors_propagate_with_sqlstate(client):
    with raises_sql("42P01"):
        client.send("nope", {})
    with raises_sql("P0001", "queue name contains invalid characters: $, ;, --, or \\'"):
        client.read("bad;name")
    with raises_sql("P0001", "routing_key cannot contain consecutive dots. Got: bad..key"):
        client.send_topic("bad..key", {})


def test_send_batch(client, conn):
    ids = client.send_batch("jobs", [{"n": 0}, {"n": 1}, {"n": 2}])
    assert ids == sorted(ids) and len(ids) == 3
    hids = client.send_batch("jobs", [{"n": 3}, {"n": 4}], headers=[{"a": 1}, None])
    assert conn.execute("SELECT msg_id, headers FROM pgmq.q_jobs WHERE msg_id = ANY(%s) ORDER BY 1",
                        (hids,)).fetchall() == [(hids[0], {"a": 1}), (hids[1], None)]
    did = client.send_batch("jobs", [{"n": 5}], delay=120)
    assert lease_seconds(conn, did[0]) == 120
    at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(days=1)
    tid = client.send_batch("jobs", [{"n": 6}], headers=[{"b": 2}], delay=at)
    assert scalar(conn, "SELECT vt FROM pgmq.q_jobs WHERE msg_id = %s", (tid[0],)) == at
    assert [m.message["n"] for m in client.read("jobs", qty=10)] == [0, 1, 2, 3, 4]


def test_send_batch_validates_its_arguments(client):
    with pytest.raises(ValueError, match="empty"):
        client.send_batch("jobs", [])
    with pytest.raises(ValueError, match="headers"):
        client.send_batch("jobs", [{}, {}], headers=[{}])
    with pytest.raises(TypeError):
        client.send_batch("jobs", "abc")
    with pytest.raises(ValueError):
        client.send_batch("jobs", [{}], delay=-5)


def test_send_topic(client, conn):
    client.create("audit")
    conn.execute("SELECT pgmq.bind_topic('orders.*', 'jobs')")
    conn.execute("SELECT pgmq.bind_topic('orders.#', 'audit')")
    assert client.send_topic("orders.created", {"id": 7}, headers={"h": 1}) == 2
    assert client.send_topic("orders.created.eu", {"id": 8}, delay=30) == 1
    assert client.send_topic("payments.done", {"id": 9}) == 0
    (job,) = client.read("jobs")
    assert (job.message, job.headers) == ({"id": 7}, {"h": 1})
    assert [m.message["id"] for m in client.read("audit", qty=5)] == [7]
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_audit") == 2
    with pytest.raises(ValueError):
        client.send_topic("orders.x", {}, delay=-1)


# ----------------------------------------------------------------------------- reading

def test_read_qty_order_and_conditional(client):
    ids = client.send_batch("jobs", [{"kind": "a", "n": n} if n % 2 else {"kind": "b", "n": n}
                                     for n in range(6)])
    assert [m.msg_id for m in client.read("jobs", qty=2)] == ids[:2]
    assert [m.message["n"] for m in client.read("jobs", qty=10, conditional={"kind": "a"})] == [3, 5]
    assert [m.message["n"] for m in client.read("jobs", qty=10)] == [2, 4]
    assert client.read("jobs", qty=10) == []


def test_read_validates_its_arguments(client):
    for kwargs in ({"qty": 0}, {"vt": -1}):
        with pytest.raises(ValueError):
            client.read("jobs", **kwargs)
    with pytest.raises(TypeError):
        client.read("jobs", vt=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        client.pop("jobs", 0)
    with pytest.raises(ValueError):
        client.read_with_poll("jobs", poll_interval_ms=0)
    # vt=0 is legal: the message stays visible
    client.send("jobs", {})
    assert len(client.read("jobs", vt=0)) == 1
    assert client.read("jobs", vt=0)[0].read_ct == 2


def test_read_with_poll_waits_for_a_message(client, dsn):
    started = time.monotonic()
    assert client.read_with_poll("jobs", max_poll_seconds=1, poll_interval_ms=50) == []
    assert 0.9 < time.monotonic() - started < 3

    def later():
        time.sleep(0.3)
        with Client(dsn) as other:
            other.send("jobs", {"late": True})

    t = threading.Thread(target=later)
    t.start()
    started = time.monotonic()
    msgs = client.read_with_poll("jobs", vt=10, qty=5, max_poll_seconds=5, poll_interval_ms=50)
    t.join()
    assert [m.message for m in msgs] == [{"late": True}]
    assert time.monotonic() - started < 2
    client.send("jobs", {"kind": "x"})
    client.send("jobs", {"kind": "y"})
    assert [m.message for m in client.read_with_poll("jobs", qty=5, max_poll_seconds=0,
                                                     conditional={"kind": "y"})] == [{"kind": "y"}]


def test_pop_reads_and_deletes(client, conn):
    client.send_batch("jobs", [{"n": n} for n in range(3)])
    (first,) = client.pop("jobs")
    assert first.message == {"n": 0}
    assert [m.message["n"] for m in client.pop("jobs", qty=5)] == [1, 2]
    assert client.pop("jobs") == []
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 0


# ----------------------------------------------------------------------------- finishing

def test_delete_one_and_many(client, conn):
    ids = client.send_batch("jobs", [{}, {}, {}, {}])
    assert client.delete("jobs", ids[0]) is True
    assert client.delete("jobs", ids[0]) is False
    assert client.delete("jobs", [ids[1], ids[2], 999]) == [ids[1], ids[2]]
    assert client.delete("jobs", []) == []
    assert column(conn, "SELECT msg_id FROM pgmq.q_jobs") == [ids[3]]
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 0


def test_archive_one_and_many(client, conn):
    ids = client.send_batch("jobs", [{"n": n} for n in range(4)], headers=[{"h": n} for n in range(4)])
    assert client.archive("jobs", ids[0]) is True
    assert client.archive("jobs", ids[0]) is False
    assert sorted(client.archive("jobs", (ids[1], ids[2], 999))) == [ids[1], ids[2]]
    assert column(conn, "SELECT msg_id FROM pgmq.q_jobs") == [ids[3]]
    assert conn.execute("SELECT msg_id, message, headers FROM pgmq.a_jobs ORDER BY 1").fetchall() == [
        (ids[n], {"n": n}, {"h": n}) for n in range(3)]


def test_set_vt_forms(client, conn):
    a, b, c = client.send_batch("jobs", [{"n": 0}, {"n": 1}, {"n": 2}])
    client.read("jobs", vt=300, qty=3)
    msg = client.set_vt("jobs", a, 0)
    assert isinstance(msg, Message) and msg.msg_id == a and msg.read_ct == 1
    assert [m.msg_id for m in client.read("jobs", qty=3)] == [a]
    at = datetime.now(timezone.utc).replace(microsecond=0) + timedelta(minutes=10)
    assert client.set_vt("jobs", b, at).vt == at
    moved = client.set_vt("jobs", [b, c, 999], 100)
    assert [m.msg_id for m in moved] == [b, c]
    assert lease_seconds(conn, c) == 100
    assert [m.msg_id for m in client.set_vt("jobs", [c], at)] == [c]
    assert client.set_vt("jobs", 999, 0) is None
    with pytest.raises(ValueError):
        client.set_vt("jobs", a, -1)
    with pytest.raises(ValueError):
        client.set_vt("jobs", a, datetime.now())


def test_nack_without_retry_policy(client, conn):
    msg_id = client.send("jobs", {"n": 1}, headers={"keep": 1})
    client.read("jobs", vt=300)
    assert client.nack("jobs", msg_id, "boom") is True
    assert client.read("jobs") == []  # back after 1 s, not at once (a failing handler backs off)
    conn.execute("UPDATE pgmq.q_jobs SET vt = now()")
    (again,) = client.read("jobs")
    assert again.msg_id == msg_id and again.read_ct == 2
    assert again.headers == {"keep": 1, "x-pgmq-last-error": "boom"}
    assert client.nack("jobs", msg_id) is True  # error is optional
    assert client.nack("jobs", 999) is False
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 0


def test_nack_with_retry_policy_retries_then_dead_letters(client, conn):
    client.create("dlq")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 1, 60, 1, NULL, 'dlq')")
    msg_id = client.send("jobs", {"task": 1}, headers={"trace": "t"})
    client.read("jobs")
    assert client.nack("jobs", msg_id, "first") is True
    assert lease_seconds(conn, msg_id) == 60  # the policy's retry delay
    assert client.read("jobs") == []
    client.set_vt("jobs", msg_id, 0)
    (second,) = client.read("jobs")
    assert second.read_ct == 2
    assert client.nack("jobs", msg_id, "second") is True
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    (dead,) = client.read("dlq")
    assert dead.message == {"task": 1} and dead.headers["trace"] == "t"
    record = dead.headers["x-pgmq-dead-letter"]
    assert (record["source_queue"], record["source_msg_id"], record["reason"], record["attempts"],
            record["last_error"]) == ("jobs", msg_id, "nack", 2, "second")


# ----------------------------------------------------------------------------- metrics

def test_metrics(client):
    client.send_batch("jobs", [{}, {}, {}])
    client.send("jobs", {}, delay=60)
    client.read("jobs")
    m = client.metrics("jobs")
    assert isinstance(m, QueueMetrics)
    assert [f.name for f in dataclasses.fields(QueueMetrics)] == [
        "queue_name", "queue_length", "newest_msg_age_sec", "oldest_msg_age_sec", "total_messages",
        "scrape_time", "queue_visible_length", "default_partition_length"]
    assert (m.queue_name, m.queue_length, m.total_messages, m.queue_visible_length) == ("jobs", 4, 4, 2)
    assert m.oldest_msg_age_sec >= m.newest_msg_age_sec >= 0
    assert m.default_partition_length in (None, 0)
    assert isinstance(m.scrape_time, datetime)
    with raises_sql("42P01"):
        client.metrics("nope")


def test_publish_routes_through_an_exchange(client, conn):
    client.create("pdfs")
    client.create("all_docs")
    conn.execute("SELECT pgmq.create_exchange('docs', 'direct')")
    conn.execute("SELECT pgmq.bind_queue('pdfs', 'docs', 'pdf')")
    conn.execute("SELECT pgmq.bind_queue('all_docs', 'docs', 'pdf')")
    routed = client.publish("docs", "pdf", {"n": 1}, headers={"x-pgmq-priority": 2})
    assert sorted(q for q, _ in routed) == ["all_docs", "pdfs"]
    assert [m.message for m in client.read("pdfs")] == [{"n": 1}]
    assert client.publish("docs", "txt", {"n": 2}) == []
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    assert len(client.publish("docs", "pdf", {"n": 3}, delay=later)) == 2
    assert client.read("all_docs", qty=5)[0].message == {"n": 1}
    with raises_sql("42704"):
        client.publish("nope", "pdf", {})
    client.create_stream("doc_log")
    conn.execute("SELECT pgmq.bind_stream('doc_log', 'docs', 'pdf')")
    routed = client.publish_routed("docs", "pdf", {"n": 4})
    assert sorted((kind, name) for kind, name, _ in routed) == [
        ("queue", "all_docs"), ("queue", "pdfs"), ("stream", "doc_log")]
    ev_id = next(i for kind, _, i in routed if kind == "stream")
    assert scalar(conn, "SELECT message FROM pgmq.s_doc_log WHERE ev_id = %s", (ev_id,)) == {"n": 4}
    assert sorted(q for q, _ in client.publish("docs", "pdf", {"n": 5})) == ["all_docs", "pdfs"]
    assert scalar(conn, "SELECT count(*) FROM pgmq.s_doc_log") == 2


# ----------------------------------------------------------------------------- consume

def run_consumer(client: Client, queue: str, handler, **kwargs) -> tuple[Future, ThreadPoolExecutor]:
    pool = ThreadPoolExecutor(max_workers=1)
    return pool.submit(client.consume, queue, handler, **kwargs), pool


def test_consume_archives_each_message_and_stops(client, conn):
    ids = client.send_batch("jobs", [{"n": n} for n in range(25)])
    seen: list[int] = []
    stop = threading.Event()

    def handler(msg: Message) -> None:
        seen.append(msg.msg_id)
        if len(seen) == 25:
            stop.set()

    assert client.consume("jobs", handler, batch=10, poll_interval=0.2, stop=stop) == 25
    assert seen == ids
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert column(conn, "SELECT msg_id FROM pgmq.a_jobs ORDER BY 1") == ids


def test_consume_ack_delete(client, conn):
    client.send_batch("jobs", [{}, {}])
    stop = threading.Event()
    handled: list[int] = []

    def handler(msg: Message) -> None:
        handled.append(msg.msg_id)
        if len(handled) == 2:
            stop.set()

    assert client.consume("jobs", handler, poll_interval=0.1, stop=stop, ack="delete") == 2
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 0


def test_consume_enables_insert_notifications_once(client, conn):
    stop = threading.Event()
    stop.set()
    assert client.consume("jobs", lambda m: None, stop=stop) == 0
    assert conn.execute("SELECT queue_name, throttle_interval_ms FROM pgmq.list_notify_insert_throttles()"
                        ).fetchall() == [("jobs", 250)]
    # An existing configuration is kept, not reset to the default throttle.
    conn.execute("SELECT pgmq.update_notify_insert('jobs', 0)")
    assert client.consume("jobs", lambda m: None, stop=stop) == 0
    assert scalar(conn, "SELECT throttle_interval_ms FROM pgmq.list_notify_insert_throttles()") == 0
    with raises_sql("P0001", 'Queue "nope" does not exist. Create it first using pgmq.create()'):
        client.consume("nope", lambda m: None, stop=stop)


def test_two_consumers_process_every_message_exactly_once(dsn, client, conn):
    total = 300
    conn.execute("SELECT pgmq.enable_notify_insert('jobs', 0)")
    seen: Counter[int] = Counter()
    by_consumer: Counter[str] = Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def handler_for(name: str):
        def handler(msg: Message) -> None:
            time.sleep(0.001)
            with lock:
                seen[msg.msg_id] += 1
                by_consumer[name] += 1
                if sum(seen.values()) >= total:
                    stop.set()
        return handler

    sent: list[int] = []
    with Client(dsn) as c1, Client(dsn) as c2, ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(c.consume, "jobs", handler_for(name), batch=7, poll_interval=0.5,
                               stop=stop)
                   for name, c in (("c1", c1), ("c2", c2))]
        for start in range(0, total, 50):  # produced while the consumers run
            sent += client.send_batch("jobs", [{"n": n} for n in range(start, start + 50)])
            time.sleep(0.05)
        assert stop.wait(30), f"only {sum(seen.values())} of {total} handled"
        counts = [f.result(timeout=10) for f in futures]
    assert sum(counts) == total
    assert sorted(seen) == sorted(sent) and set(seen.values()) == {1}
    assert by_consumer["c1"] > 0 and by_consumer["c2"] > 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert scalar(conn, "SELECT count(DISTINCT msg_id) FROM pgmq.a_jobs") == total


def test_failing_handler_nacks_then_dead_letters(client, conn):
    client.create("dlq")
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 2, 0, 1, NULL, 'dlq')")
    msg_id = client.send("jobs", {"task": "doomed"})
    good_id = client.send("jobs", {"task": "fine"})
    attempts: list[int] = []
    stop = threading.Event()

    def handler(msg: Message) -> None:
        if msg.message["task"] == "fine":
            return
        attempts.append(msg.read_ct)
        if len(attempts) == 3:
            stop.set()
        raise RuntimeError(f"boom {len(attempts)}")

    assert client.consume("jobs", handler, poll_interval=0.1, stop=stop) == 4
    assert attempts == [1, 2, 3]
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert column(conn, "SELECT msg_id FROM pgmq.a_jobs") == [good_id]
    (dead,) = client.read("dlq")
    record = dead.headers["x-pgmq-dead-letter"]
    assert (record["source_msg_id"], record["reason"], record["attempts"], record["last_error"]) == (
        msg_id, "nack", 3, "RuntimeError: boom 3")


def test_failing_handler_with_backoff_keeps_the_error_in_headers(client, conn):
    conn.execute("SELECT pgmq.set_retry_policy('jobs', 5, 60)")
    msg_id = client.send("jobs", {})
    stop = threading.Event()

    def handler(msg: Message) -> None:
        stop.set()
        raise ValueError("bad input")

    assert client.consume("jobs", handler, poll_interval=0.1, stop=stop) == 1
    assert scalar(conn, "SELECT headers->>'x-pgmq-last-error' FROM pgmq.q_jobs") == "ValueError: bad input"
    assert lease_seconds(conn, msg_id) == 60


def test_on_error_leave_and_raise(client, conn):
    msg_id = client.send("jobs", {})
    stop = threading.Event()

    def fail_and_stop(msg: Message) -> None:
        stop.set()
        raise KeyError("x")

    assert client.consume("jobs", fail_and_stop, vt=120, stop=stop, on_error="leave") == 1
    assert lease_seconds(conn, msg_id) == 120  # untouched: the lease will expire
    assert scalar(conn, "SELECT headers FROM pgmq.q_jobs") is None
    client.set_vt("jobs", msg_id, 0)
    stop.clear()
    with pytest.raises(KeyError):
        client.consume("jobs", fail_and_stop, vt=120, on_error="raise")
    assert scalar(conn, "SELECT read_ct FROM pgmq.q_jobs") == 2


def test_consume_wakes_on_listen_before_the_poll_interval(client, conn):
    stop = threading.Event()
    got = threading.Event()
    arrived: list[float] = []

    def handler(msg: Message) -> None:
        arrived.append(time.monotonic())
        got.set()

    future, pool = run_consumer(client, "jobs", handler, poll_interval=5, stop=stop)
    try:
        wait_for(lambda: scalar(conn, "SELECT count(*) FROM pgmq.list_notify_insert_throttles()") == 1, timeout=10,
                 what="the notify throttle")
        time.sleep(0.5)  # the consumer has done its first (empty) read and is waiting
        sent_at = time.monotonic()
        conn.execute("SELECT pgmq.send('jobs', '{\"wake\": \"up\"}')")
        assert got.wait(5)
        assert arrived[0] - sent_at < 1.0
    finally:
        stop.set()
        assert future.result(timeout=5) == 1
        pool.shutdown()


def test_consume_polls_for_delayed_messages(client):
    stop = threading.Event()
    handled: list[float] = []
    client.send("jobs", {}, delay=1)
    started = time.monotonic()

    def handler(msg: Message) -> None:
        handled.append(time.monotonic() - started)
        stop.set()

    assert client.consume("jobs", handler, poll_interval=0.3, stop=stop) == 1
    assert 0.9 < handled[0] < 3


def test_consume_honours_stop_while_idle(client):
    stop = threading.Event()
    future, pool = run_consumer(client, "jobs", lambda m: None, poll_interval=5, stop=stop)
    try:
        time.sleep(0.5)
        assert not future.done()
        stopped_at = time.monotonic()
        stop.set()
        assert future.result(timeout=3) == 0
        assert time.monotonic() - stopped_at < 1.0
    finally:
        stop.set()
        pool.shutdown()


def test_consume_finishes_its_batch_after_stop(client, conn):
    client.send_batch("jobs", [{"n": n} for n in range(5)])
    stop = threading.Event()
    seen: list[int] = []

    def handler(msg: Message) -> None:
        seen.append(msg.message["n"])
        stop.set()  # asked to stop during the first message of the batch

    assert client.consume("jobs", handler, batch=3, stop=stop) == 3
    assert seen == [0, 1, 2]
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 3
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs WHERE read_ct = 0") == 2


def test_consume_validates_its_arguments(client):
    for kwargs in ({"batch": 0}, {"vt": 0}, {"poll_interval": 0}, {"on_error": "ignore"},
                   {"ack": "keep"}):
        with pytest.raises(ValueError):
            client.consume("jobs", lambda m: None, **kwargs)


def test_consume_survives_broken_connections(client, conn):
    # Found by the chaos suite: consume() ended with the first connection that broke (a server
    # restart, pg_terminate_backend, a refused reconnect), so every consumer loop died with it.
    # Transient errors are now logged and retried; the loop goes on where it was.
    seen: list[int] = []
    stop = threading.Event()
    future, pool = run_consumer(client, "jobs", lambda m: seen.append(m.message["n"]),
                                poll_interval=0.2, stop=stop)
    try:
        client.send_batch("jobs", [{"n": n} for n in range(5)])
        wait_for(lambda: len(seen) == 5, what="the first messages")
        killed = scalar(conn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                              "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                              "AND backend_type = 'client backend'")
        assert killed >= 2  # the listener and the pool's connection(s)
        conn.execute("SELECT pgmq.send_batch('jobs', ARRAY['{\"n\": 5}', '{\"n\": 6}']::jsonb[])")
        wait_for(lambda: len(seen) == 7 or future.done(), what="messages after the kill")
        assert not future.done(), future.exception()
        stop.set()
        assert future.result(timeout=5) == 7
    finally:
        stop.set()
        pool.shutdown()
    assert sorted(seen) == list(range(7))
    assert scalar(conn, "SELECT count(*) FROM pgmq.a_jobs") == 7


def test_consume_still_raises_what_retrying_cannot_fix(client, conn):
    stop = threading.Event()
    future, pool = run_consumer(client, "jobs", lambda m: None, poll_interval=0.1, stop=stop)
    try:
        time.sleep(0.3)
        conn.execute("DROP TABLE pgmq.a_jobs")
        conn.execute("DROP TABLE pgmq.q_jobs CASCADE")  # the queue's table is gone: 42P01
        with pytest.raises(psycopg.Error) as info:
            future.result(timeout=10)
        assert info.value.sqlstate == "42P01"
    finally:
        stop.set()
        pool.shutdown()


def _kill_all_but(conn: psycopg.Connection) -> int:
    return scalar(conn, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                        "AND backend_type = 'client backend'")


def test_a_lost_connection_drops_the_whole_pool(dsn, conn, queue):
    # Issue 33: after a failover every pooled connection is dead, and each one cost a failed
    # call (consume(): a failed read and a doubled backoff). One lost connection now retires
    # the pool: the next call checks that the server answers and gets a fresh pool.
    with Client(dsn, min_size=4, max_size=4) as client:
        client.pool.wait(timeout=10)
        old = client.pool
        assert old.get_stats()["pool_available"] == 4
        assert _kill_all_but(conn) >= 4  # (the db fixture's connection too)
        with pytest.raises(psycopg.OperationalError) as info:
            client.send(queue, {"n": 0})
        assert info.value.sqlstate == "57P01"  # admin_shutdown, as the server said it
        ids = [client.send(queue, {"n": n}) for n in range(1, 5)]  # none meets a dead one
        assert client.pool is not old and old.closed
        assert sorted(ids) == ids and len(ids) == 4


def test_a_shared_pool_is_drained_not_closed(dsn, conn, queue):
    with ConnectionPool(dsn, min_size=3, max_size=3, kwargs={"autocommit": True}) as pool, \
            Client(pool=pool) as client:
        pool.wait(timeout=10)
        assert _kill_all_but(conn) >= 3
        with pytest.raises(psycopg.OperationalError):
            client.send(queue, {"n": 0})
        for n in range(1, 4):
            client.send(queue, {"n": n})
        assert client.pool is pool and not pool.closed


def test_while_the_server_is_down_calls_fail_fast_then_recover(conn, queue):
    # our own server: stopping the session's would disturb the other tests
    from pgmq_build.cluster import TempCluster

    with TempCluster() as cluster:
        dsn = cluster.dsn()
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pgmq")
            admin.execute("SELECT pgmq.create('jobs')")
        with Client(dsn, min_size=2, max_size=2) as client:
            client.pool.wait(timeout=10)
            cluster.pg_ctl("stop", mode="immediate")
            for _ in range(2):  # the dead connection, then the check of the server
                t0 = time.monotonic()
                with pytest.raises(psycopg.OperationalError):
                    client.send("jobs", {"n": 0})
                assert time.monotonic() - t0 < 5  # refused at once, no pool timeout (30 s)
            assert client.reconnecting
            cluster.pg_ctl("start")
            assert client.send("jobs", {"n": 1}) >= 1
            assert not client.reconnecting
