"""Bad arguments to the Python client (pgmq_build.client) against a real server: refused with a
TypeError/ValueError naming the argument and the value before any round trip (so nothing
changes), or by the server with a documented SQLSTATE; accepted values round-trip exactly."""

from __future__ import annotations

import math
import threading
from datetime import datetime, timedelta

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pgmq_build.client import Client
from tests.helpers import column, scalar

INT32_MAX = 2**31 - 1
# What the server may answer a queue name with (README: Queue names; Errors): upstream's
# P0001 (bad characters, over 47 characters), ours 42602 (empty), 42622 (over 47 bytes),
# 42P07 (differs from an existing queue only in case).
NAME_REFUSALS = {"P0001", "42602", "42622", "42P07"}


@pytest.fixture
def client(dsn):
    with Client(dsn) as c:
        c.create("jobs")
        c.create_stream("ev")
        c.subscribe("ev", "s")
        yield c


def state(conn: psycopg.Connection) -> tuple:
    """Everything a refused call must leave as it was."""
    return (column(conn, "SELECT queue_name FROM pgmq.meta ORDER BY 1"),
            conn.execute("SELECT * FROM pgmq.stream_info()").fetchall(),
            column(conn, "SELECT stream_name FROM pgmq.streams ORDER BY 1"),
            scalar(conn, "SELECT count(*) FROM pgmq.s_ev"),
            conn.execute("SELECT msg_id, read_ct, vt, message, headers FROM pgmq.q_jobs ORDER BY 1").fetchall(),
            scalar(conn, "SELECT count(*) FROM pgmq.a_jobs"),
            scalar(conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgmq'::regnamespace"))


# Each call with one bad argument: (call, exception type, words the message must contain).
BAD_CALLS = [
    (lambda c: c.create(b"jobs"), TypeError, ["queue", "str", "bytes"]),
    (lambda c: c.create(123), TypeError, ["queue", "str", "int"]),
    (lambda c: c.create("a\x00b"), ValueError, ["queue", "NUL"]),
    (lambda c: c.create("a\ud800"), ValueError, ["queue", "surrogate"]),
    (lambda c: c.create("jobs2", unlogged="no"), TypeError, ["unlogged", "bool"]),
    (lambda c: c.send(None, {}), TypeError, ["queue", "NoneType"]),
    (lambda c: c.send("jobs", {1, 2}), TypeError, ["message", "JSON"]),
    (lambda c: c.send("jobs", float("nan")), ValueError, ["message", "JSON"]),
    (lambda c: c.send("jobs", {"a": "x\x00y"}), ValueError, ["message", "NUL"]),
    (lambda c: c.send("jobs", {"a": "\udc00"}), ValueError, ["message", "surrogate"]),
    (lambda c: c.send("jobs", {}, headers=[1]), TypeError, ["headers", "dict", "list"]),
    (lambda c: c.send("jobs", {}, headers="x"), TypeError, ["headers", "dict", "str"]),
    (lambda c: c.send("jobs", {}, headers={"x-pgmq-ttl": "soon"}), TypeError, ["x-pgmq-ttl", "int"]),
    (lambda c: c.send("jobs", {}, headers={"x-pgmq-priority": 2**40}), ValueError, ["x-pgmq-priority", "2147483647"]),
    (lambda c: c.send("jobs", {}, delay=2**31), ValueError, ["delay", "2147483647", str(2**31)]),
    (lambda c: c.send("jobs", {}, delay="5"), TypeError, ["delay", "int", "datetime"]),
    (lambda c: c.send_batch("jobs", [{}, {}], headers="ab"), TypeError, ["headers", "sequence"]),
    (lambda c: c.send_batch("jobs", [{}, {}], headers=5), TypeError, ["headers", "sequence"]),
    (lambda c: c.send_batch("jobs", [{}, {}, {"x": float("inf")}]), ValueError, ["messages[2]"]),
    (lambda c: c.send_batch("jobs", [{}, {}], headers=[{}, [1]]), TypeError, ["headers[1]", "dict"]),
    (lambda c: c.send_batch("jobs", [{}], delay=-1), ValueError, ["delay", "-1"]),
    (lambda c: c.send_topic(None, {}), TypeError, ["routing_key"]),
    (lambda c: c.publish(None, "k", {}), TypeError, ["exchange"]),
    (lambda c: c.read("jobs", vt=2**31), ValueError, ["vt", "2147483647"]),
    (lambda c: c.read("jobs", qty=2**31), ValueError, ["qty", "2147483647"]),
    (lambda c: c.read("jobs", qty=True), TypeError, ["qty", "bool"]),
    (lambda c: c.read_with_poll("jobs", max_poll_seconds=2**31), ValueError, ["max_poll_seconds"]),
    (lambda c: c.pop("jobs", "3"), TypeError, ["qty", "str"]),
    (lambda c: c.delete("jobs", "12"), TypeError, ["msg_id", "str"]),
    (lambda c: c.delete("jobs", None), TypeError, ["msg_id", "NoneType"]),
    (lambda c: c.delete("jobs", 1.0), TypeError, ["msg_id", "float"]),
    (lambda c: c.delete("jobs", True), TypeError, ["msg_id", "bool"]),
    (lambda c: c.delete("jobs", 2**63), ValueError, ["msg_id", str(2**63)]),
    (lambda c: c.delete("jobs", [1, None]), TypeError, ["msg_id[1]", "NoneType"]),
    (lambda c: c.archive("jobs", "12"), TypeError, ["msg_id", "str"]),
    (lambda c: c.set_vt("jobs", "1", 10), TypeError, ["msg_id", "str"]),
    (lambda c: c.set_vt("jobs", 1, 2**31), ValueError, ["vt", "2147483647"]),
    (lambda c: c.set_vt("jobs", 1, datetime(2030, 1, 1)), ValueError, ["vt", "timezone-aware"]),
    (lambda c: c.nack("jobs", "1"), TypeError, ["msg_id", "str"]),
    (lambda c: c.nack("jobs", 1.5), TypeError, ["msg_id", "float"]),
    (lambda c: c.nack("jobs", 1, error=5), TypeError, ["error", "str"]),
    (lambda c: c.metrics(None), TypeError, ["queue"]),
    (lambda c: c.consume("jobs", None), TypeError, ["handler", "callable"]),
    (lambda c: c.consume("jobs", print, stop=True), TypeError, ["stop", "Event"]),
    (lambda c: c.consume("jobs", print, poll_interval=float("nan")), ValueError, ["poll_interval", "finite"]),
    (lambda c: c.consume("jobs", print, poll_interval=math.inf), ValueError, ["poll_interval", "finite"]),
    # streams
    (lambda c: c.create_stream(b"ev"), TypeError, ["stream", "str", "bytes"]),
    (lambda c: c.create_stream("ev2", retention="7 days"), TypeError, ["retention", "timedelta", "str"]),
    (lambda c: c.create_stream("ev2", retention=-1), ValueError, ["retention", "-1"]),
    (lambda c: c.create_stream("ev2", retention=timedelta(seconds=-1)), ValueError, ["retention", "at least"]),
    (lambda c: c.create_stream("ev2", rotation_period=0), ValueError, ["rotation_period", "at least 0:00:01"]),
    (lambda c: c.create_stream("ev2", retention_bytes=0), ValueError, ["retention_bytes", "from 1"]),
    (lambda c: c.create_stream("ev2", retention_bytes=1.5), TypeError, ["retention_bytes", "float"]),
    (lambda c: c.create_stream("ev2", drop_unacked=1), TypeError, ["drop_unacked", "bool", "int"]),
    (lambda c: c.drop_stream(None), TypeError, ["stream", "NoneType"]),
    (lambda c: c.stream_send("ev", {"a": float("nan")}), ValueError, ["message", "JSON"]),
    (lambda c: c.stream_send("ev", {}, headers=["x"]), TypeError, ["headers", "dict"]),
    (lambda c: c.stream_send_batch("ev", []), ValueError, ["messages", "empty"]),
    (lambda c: c.stream_send_batch("ev", [{}, {"x": "\x00"}]), ValueError, ["messages[1]", "NUL"]),
    (lambda c: c.stream_send_batch("ev", [{}], headers=[{}, {}]), ValueError, ["headers", "2 entries", "1 messages"]),
    (lambda c: c.subscribe("ev", ""), ValueError, ["subscription", "empty"]),
    (lambda c: c.subscribe("ev", 5), TypeError, ["subscription", "str", "int"]),
    (lambda c: c.subscribe("ev", "s", start="soonish"), ValueError, ["start", "'soonish'"]),
    (lambda c: c.subscribe("ev", "s", start=-1), ValueError, ["start", "-1"]),
    (lambda c: c.subscribe("ev", "s", start=True), ValueError, ["start", "True"]),
    (lambda c: c.unsubscribe("ev", None), TypeError, ["subscription", "NoneType"]),
    (lambda c: c.stream_read("ev", "s", lease_seconds=0), ValueError, ["lease_seconds", "from 1"]),
    (lambda c: c.stream_read("ev", "s", lease_seconds=2**31), ValueError, ["lease_seconds", "2147483647"]),
    (lambda c: c.stream_ack("ev", "s", "7"), TypeError, ["batch_id", "str"]),
    (lambda c: c.stream_rewind("ev", "s", "yesterday"), TypeError, ["to", "position", "datetime"]),
    (lambda c: c.stream_rewind("ev", "s", datetime(2030, 1, 1)), ValueError, ["to", "timezone-aware"]),
    (lambda c: c.stream_rewind("ev", "s", 2**63), ValueError, ["to", str(2**63)]),
    (lambda c: c.stream_info(5), TypeError, ["stream", "int"]),
    (lambda c: c.stream_tick(b"ev"), TypeError, ["stream", "bytes"]),
    (lambda c: c.consume_stream("ev", "s", None), TypeError, ["handler", "callable"]),
    (lambda c: c.consume_stream("ev", "s", print, lease_seconds=0), ValueError, ["lease_seconds"]),
    (lambda c: c.consume_stream("ev", "s", print, poll_interval=-1), ValueError, ["poll_interval"]),
    (lambda c: c.consume_stream("ev", "s", print, on_error="nack"), ValueError, ["on_error", "'nack'"]),
]


def test_bad_arguments_are_named_and_change_nothing(client, conn):
    # one database for all the cases (a fresh one per case would cost ~0.2 s each)
    ids = client.send_batch("jobs", [{"n": 1}, {"n": 2}])
    assert ids == [1, 2]
    before = state(conn)
    for i, (call, exc, words) in enumerate(BAD_CALLS):
        with pytest.raises(exc) as info:
            call(client)
        for word in words:
            assert word in str(info.value), f"case {i}: {word!r} not in {info.value}"
        assert state(conn) == before, f"case {i} changed something"


def test_a_str_msg_id_no_longer_deletes_other_messages(client, conn):
    """Before: delete("jobs", "12") iterated the string and deleted messages 1 and 2."""
    client.send_batch("jobs", [{"n": 1}, {"n": 2}, {"n": 3}])
    with pytest.raises(TypeError):
        client.delete("jobs", "12")
    assert column(conn, "SELECT msg_id FROM pgmq.q_jobs ORDER BY 1") == [1, 2, 3]
    assert client.delete("jobs", [1, 2]) == [1, 2]  # a list still works, and any iterable
    assert client.archive("jobs", (i for i in [3])) == [3]


def test_send_batch_with_one_bad_element_sends_none(client, conn):
    with pytest.raises(ValueError, match=r"messages\[3\] contains a NUL"):
        client.send_batch("jobs", [{"n": 0}, {"n": 1}, {"n": 2}, {"n": "\x00"}])
    with pytest.raises(TypeError, match=r"headers\[2\]\['x-pgmq-max-retries'\]"):
        client.send_batch("jobs", [{}, {}, {}], headers=[None, {}, {"x-pgmq-max-retries": "many"}])
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_jobs") == 0
    assert scalar(conn, "SELECT last_value FROM pgmq.q_jobs_msg_id_seq") == 1  # not even an id used


def test_client_constructor_arguments(dsn):
    with pytest.raises(TypeError, match="dsn must be a str"):
        Client(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pool must be a psycopg_pool.ConnectionPool"):
        Client(pool=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_size must be an integer from 3"):
        Client(dsn, min_size=3, max_size=2)


def test_accepted_boundaries(client, conn):
    """The largest values are accepted and reach the server as given."""
    msg_id = client.send("jobs", None, headers={"x-pgmq-priority": -(2**31)}, delay=INT32_MAX)
    assert scalar(conn, "SELECT priority FROM pgmq.q_jobs WHERE msg_id = %s", (msg_id,)) == -(2**31)
    assert client.delete("jobs", 2**63 - 1) is False
    assert client.read("jobs", vt=INT32_MAX, qty=INT32_MAX) == []
    stop = threading.Event()
    stop.set()
    assert client.consume("jobs", print, stop=stop, poll_interval=0.5) == 0


# ----------------------------------------------------------------------------- property tests

NAMES = st.one_of(
    st.text(max_size=60),  # anything, surrogates and NUL included
    st.text(st.characters(codec="utf-8", exclude_characters="\x00"), min_size=1, max_size=50),
    st.sampled_from(["JOBS", "a b", 'x"y', "a;b", "a--b", "$x", "it's", "é" * 24,
                     "é" * 23 + "x", "x" * 47, "x" * 48, "ok.name", "ok-name"]),
).filter(lambda n: n != "jobs")  # the fixture's queue: create is idempotent, drop would remove it


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=NAMES)
def test_queue_names_round_trip_exactly_or_are_refused_cleanly(client, conn, name):
    before = state(conn)
    try:
        client.create(name)
    except (TypeError, ValueError) as exc:
        assert "queue" in str(exc)
        assert state(conn) == before
        return
    except psycopg.Error as exc:
        assert exc.sqlstate in NAME_REFUSALS, f"{name!r}: {exc.sqlstate} {exc}"
        assert state(conn) == before
        return
    try:
        assert name in column(conn, "SELECT queue_name FROM pgmq.list_queues()")
        msg_id = client.send(name, {"name": name}, headers={"h": name})
        (msg,) = client.read(name, vt=0)
        assert (msg.msg_id, msg.message, msg.headers) == (msg_id, {"name": name}, {"h": name})
    finally:
        assert client.drop(name) is True
    assert state(conn) == before


BAD_INTS = st.one_of(
    st.integers(max_value=-1), st.integers(min_value=INT32_MAX + 1),
    st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
    st.text(max_size=5), st.lists(st.integers(), max_size=2),
)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(arg=st.sampled_from(["vt", "qty", "delay", "pop", "set_vt"]), value=BAD_INTS)
def test_bad_numbers_are_refused_before_the_round_trip(client, conn, arg, value):
    calls = {"vt": lambda: client.read("jobs", vt=value), "qty": lambda: client.read("jobs", qty=value),
             "delay": lambda: client.send("jobs", {}, delay=value),
             "pop": lambda: client.pop("jobs", value), "set_vt": lambda: client.set_vt("jobs", 1, value)}
    before = state(conn)
    with pytest.raises((TypeError, ValueError)) as info:
        calls[arg]()
    name = {"pop": "qty", "set_vt": "vt"}.get(arg, arg)
    assert str(info.value).startswith(name), info.value
    assert state(conn) == before
