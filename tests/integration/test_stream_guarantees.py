"""Streams keep their promises under every isolation level, against drop_stream, for NULL names and
against other roles (issue 30 item 8, issue 29 vector 7; docs/concepts/queues-and-streams.md "Streams"):

- a consumer whose transactions are REPEATABLE READ or SERIALIZABLE receives every committed event
  (2.8.0: never, its reads skipped the tick), once, also beside READ COMMITTED readers and while
  serialization failures make it retry;
- every stream routine racing create/drop loops succeeds or says the stream (42P01) or the
  subscription (42704) does not exist: never a deadlock (40P01), XX000 or 23503;
- a NULL stream or subscription name is 22004 in every stream routine;
- create_stream and subscribe on another role's stream or subscription warn naming it and change
  nothing, for a superuser too;
- a subscription's retry queue is a queue its role may send to, when set (also by writing the
  row directly) and when a privileged stream_nack uses it.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import pytest
from psycopg import IsolationLevel
from psycopg.types.json import Jsonb

from tests.helpers import column, notices, raises_sql, run_threads, scalar

LEVELS = [IsolationLevel.REPEATABLE_READ, IsolationLevel.SERIALIZABLE]


def send(conn, n, stream="ev"):
    return scalar(conn, "SELECT pgmq.stream_send(%s, %s)", (stream, Jsonb({"n": n})))


def consume_once(conn, sub, stream="ev") -> list[int] | None:
    """One transaction (at the connection's isolation level): read a batch and acknowledge it.
    The event numbers it committed, [] when nothing was new, None on a serialization failure
    (40001: the caller retries, as PostgreSQL asks of these levels)."""
    try:
        with conn.transaction():
            rows = conn.execute("SELECT batch_id, (message->>'n')::int FROM pgmq.stream_read(%s, %s)",
                                (stream, sub)).fetchall()
            if rows:
                conn.execute("SELECT pgmq.stream_ack(%s, %s, %s)", (stream, sub, rows[0][0]))
    except psycopg.errors.SerializationFailure:
        return None
    return [n for _, n in rows]


def consumer(connect, level):
    c = connect(autocommit=False)
    c.isolation_level = level
    return c


# ----------------------------------------------------------------------------- isolation levels

@pytest.mark.parametrize("level", LEVELS, ids=["repeatable_read", "serializable"])
def test_a_consumer_at_any_isolation_level_receives_committed_events(conn, connect, level):
    """2.8.0: 25 empty reads with 3 committed events waiting (its reads never ticked outside READ
    COMMITTED); now the first read delivers them, the next ones nothing new."""
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a')")
    for n in (1, 2, 3):
        send(conn, n)
    c = consumer(connect, level)
    got = [consume_once(c, "a") for _ in range(3)]
    assert got == [[1, 2, 3], [], []]
    send(conn, 4)
    assert consume_once(c, "a") == [4]
    # subscribe('latest') in such a transaction starts after what it has seen
    with c.transaction():
        start = scalar(c, "SELECT pgmq.subscribe('ev', 'b')")
    send(conn, 5)
    assert consume_once(c, "b") == [5]
    assert start > 0


def test_a_repeatable_read_snapshot_older_than_the_newest_tick_makes_no_tick(conn, connect):
    """A tick's snapshot must be later than every tick before it, or batches repeat events: a
    REPEATABLE READ reader whose snapshot predates another reader's tick gets nothing new in that
    transaction, and the event in its next one; the other subscription never gets it twice."""
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a'), pgmq.subscribe('ev', 'b')")
    rr = consumer(connect, IsolationLevel.REPEATABLE_READ)
    rr.execute("SELECT 1")  # its snapshot
    send(conn, 1)
    assert [n for _, n in conn.execute("SELECT batch_id, (message->>'n')::int FROM pgmq.stream_read('ev', 'a')")] == [1]
    ticks = scalar(conn, "SELECT count(*) FROM pgmq.stream_ticks")
    assert rr.execute("SELECT * FROM pgmq.stream_read('ev', 'b')").fetchall() == []
    rr.commit()
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_ticks") == ticks  # no tick from the old snapshot
    assert consume_once(rr, "b") == [1]
    conn.execute("SELECT pgmq.stream_ack('ev', 'a', (SELECT max(batch_id) FROM pgmq.stream_batches "
                 "WHERE subscription_name = 'a'))")
    send(conn, 2)
    assert consume_once(connect(), "a") == [2]
    assert consume_once(rr, "b") == [2]


def test_consumers_at_every_level_with_retries_get_every_event_once(conn, connect):
    """A producer, two SERIALIZABLE consumers sharing a subscription, one REPEATABLE READ and one
    READ COMMITTED consumer of their own: each subscription receives every event exactly once, and
    no consumer that retries its serialization failures (40001) starves: each ends within a
    bounded number of attempts."""
    n_events, max_attempts = 40, 4000
    conn.execute("SELECT pgmq.create_stream('ev')")
    for sub in ("x", "y", "z"):
        conn.execute("SELECT pgmq.subscribe('ev', %s)", (sub,))
    got: dict[str, list[int]] = {"x": [], "y": [], "z": []}
    attempts: Counter = Counter()
    failures: Counter = Counter()
    lock = threading.Lock()
    produced = threading.Event()

    def produce():
        p = connect()
        for n in range(n_events):
            send(p, n)
        produced.set()

    def consume(name, sub, level):
        c = consumer(connect, level)
        while attempts[name] < max_attempts:
            with lock:
                if produced.is_set() and len(got[sub]) >= n_events:
                    return
            attempts[name] += 1
            batch = consume_once(c, sub)
            if batch is None:
                failures[name] += 1
                continue
            with lock:
                got[sub] += batch
            if not batch:
                time.sleep(0.005)

    run_threads([threading.Thread(target=produce),
                 threading.Thread(target=consume, args=("x1", "x", IsolationLevel.SERIALIZABLE)),
                 threading.Thread(target=consume, args=("x2", "x", IsolationLevel.SERIALIZABLE)),
                 threading.Thread(target=consume, args=("y", "y", IsolationLevel.REPEATABLE_READ)),
                 threading.Thread(target=consume, args=("z", "z", IsolationLevel.READ_COMMITTED))])
    for sub in ("x", "y", "z"):
        assert sorted(got[sub]) == list(range(n_events)), (sub, attempts, failures)
    assert max(attempts.values()) < max_attempts, (attempts, failures)


# ----------------------------------------------------------------------------- drop_stream races

RACE_SECONDS = 3.0
# One line per routine (each a transaction of its own); {iso}: the isolation level.
RACERS = {
    "stream_read": ["SELECT * FROM pgmq.stream_read('rx', 'a')"],
    "stream_read+ack": ["BEGIN", "SELECT pgmq.stream_ack('rx', 'a', b) FROM "
                        "(SELECT batch_id b FROM pgmq.stream_read('rx', 'a') LIMIT 1) x", "COMMIT"],
    "repeatable read": ["BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT pgmq.stream_ack('rx', 'r', b) FROM "
                        "(SELECT batch_id b FROM pgmq.stream_read('rx', 'r') LIMIT 1) x", "COMMIT"],
    "serializable": ["BEGIN ISOLATION LEVEL SERIALIZABLE", "SELECT pgmq.stream_ack('rx', 's', b) FROM "
                     "(SELECT batch_id b FROM pgmq.stream_read('rx', 's') LIMIT 1) x", "COMMIT"],
    "stream_nack": ["BEGIN", "SELECT pgmq.stream_nack('rx', 'a', b, ARRAY[e]), pgmq.stream_ack('rx', 'a', b) FROM "
                    "(SELECT batch_id b, ev_id e FROM pgmq.stream_read('rx', 'a') LIMIT 1) x", "COMMIT"],
    "stream_send": ["SELECT pgmq.stream_send('rx', '{}')"],
    "stream_send_batch": ["SELECT pgmq.stream_send_batch('rx', ARRAY['{}'::jsonb, '{}'])"],
    "publish_routed": ["SELECT * FROM pgmq.publish_routed('rxx', 'k', '{}')"],
    "stream_info": ["SELECT * FROM pgmq.stream_info('rx')"],
    "stream_info()": ["SELECT * FROM pgmq.stream_info()"],
    "list_streams": ["SELECT * FROM pgmq.list_streams()"],
    "stream_tick": ["SELECT pgmq.stream_tick('rx')"],
    "stream_tick()": ["SELECT pgmq.stream_tick()"],
    "subscribe": ["SELECT pgmq.subscribe('rx', 'b')"],
    "unsubscribe": ["SELECT pgmq.unsubscribe('rx', 'b')"],
    "stream_rewind": ["SELECT pgmq.stream_rewind('rx', 'a', now())"],
    "grant_stream_access": ["SELECT pgmq.grant_stream_access('rx', 'pg_monitor', 'read')"],
    "bind_stream": ["SELECT pgmq.bind_stream('rx', 'rxx', 'j')", "SELECT pgmq.unbind_stream('rx', 'rxx', 'j')"],
    # and with a snapshot older than the statement
    **{f"{name} (repeatable read)": ["BEGIN ISOLATION LEVEL REPEATABLE READ", sql, "COMMIT"] for name, sql in [
        ("stream_tick()", "SELECT pgmq.stream_tick()"), ("stream_info()", "SELECT * FROM pgmq.stream_info()"),
        ("subscribe", "SELECT pgmq.subscribe('rx', 'c')"), ("stream_rewind", "SELECT pgmq.stream_rewind('rx', 'c', now())"),
        ("bind_stream", "SELECT pgmq.bind_stream('rx', 'rxx', 'i')")]},
}
ADMIN = ["SELECT pgmq.create_stream('rx')", "SELECT pgmq.subscribe('rx', 'a', retry_queue => 'rx_retry')",
         "SELECT pgmq.subscribe('rx', 'r')", "SELECT pgmq.subscribe('rx', 's')",
         "SELECT pgmq.stream_send('rx', '{}')", "SELECT pgmq.bind_stream('rx', 'rxx', 'k')",
         "SELECT pgmq.stream_send('rx', '{}')", "SELECT pgmq.drop_stream('rx')"]
DOES_NOT_EXIST = {"42P01", "42704"}  # the stream; the subscription (dropped with it)


def test_every_stream_routine_racing_drop_stream_succeeds_or_finds_no_stream(conn, connect):
    """Several connections loop every stream routine while another creates and drops the stream:
    2.8.0 deadlocked (40P01: stream_read locked the id sequence before the parent table, the drop
    the other way), and failed with XX000 (stream_info, subscribe: a sequence dropped between its
    lookup and its use) and 22023 (stream_rewind by time)."""
    conn.execute("SELECT pgmq.create_exchange('rxx', 'direct')")
    deadline = time.monotonic() + RACE_SECONDS
    ok: Counter = Counter()
    errors: Counter = Counter()
    samples: dict = {}

    def loop(name, statements):
        c = connect()
        while time.monotonic() < deadline:
            try:
                for sql in statements:
                    c.execute(sql)
                ok[name] += 1
            except psycopg.Error as e:
                errors[(name, e.sqlstate)] += 1
                samples.setdefault((name, e.sqlstate), str(e).splitlines()[0])
                if c.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    c.execute("ROLLBACK")

    run_threads([threading.Thread(target=loop, args=("admin", ADMIN))]
                + [threading.Thread(target=loop, args=(name, sql)) for name, sql in RACERS.items()])
    bad = {k: (n, samples[k]) for k, n in errors.items() if k[1] not in DOES_NOT_EXIST}
    assert not bad
    assert ok["admin"] > 0 and sum(ok.values()) > ok["admin"]


# ----------------------------------------------------------------------------- NULL names

API = Path(__file__).resolve().parents[2] / "docs" / "api.txt"
ALL_STREAMS = {"stream_tick", "stream_info"}  # NULL stream_name: every stream
DUMMY = {"stream_name": "'nn'", "subscription_name": "'s'", "text": "'x'", "interval": "'1 hour'",
         "bigint": "1", "integer": "1", "boolean": "false", "jsonb": "'{}'", "jsonb[]": "ARRAY['{}']::jsonb[]",
         "bigint[]": "ARRAY[1]::bigint[]", "timestamp with time zone": "now()", "name": "'pg_monitor'"}
NAMES = ("stream_name", "subscription_name")


def stream_routines() -> list[tuple[str, list[tuple[str, str]]]]:
    """(name, [(argument, type), ...]) of every public stream routine in docs/api.txt that takes a
    stream or subscription name."""
    out = []
    for m in re.finditer(r"^\w+\s+function\s+pgmq\.(\w+)\((.*?)\) RETURNS", API.read_text(), re.M):
        name, args = m.group(1), [a.split(" DEFAULT ")[0].split(" ", 1) for a in m.group(2).split(", ") if a]
        if not name.startswith("_") and any(a[0] in NAMES for a in args):
            out.append((name, [(a[0], a[1]) for a in args]))
    return out


NULL_CALLS = [
    (f"{name}({arg} NULL)", "SELECT * FROM pgmq.{}({})".format(name, ", ".join(
        f"{a} => NULL::{t}" if a == arg else f"{a} => {DUMMY.get(a) or DUMMY[t]}::{t}" for a, t in args)))
    for name, args in stream_routines() for arg, _ in args
    if arg in NAMES and not (name in ALL_STREAMS and arg == "stream_name")
]


def test_the_sweep_covers_every_stream_routine():
    names = {c.split("(")[0] for c, _ in NULL_CALLS}
    assert {"create_stream", "drop_stream", "stream_send", "stream_send_batch", "subscribe", "unsubscribe",
            "stream_read", "stream_ack", "stream_nack", "stream_rewind", "grant_stream_access",
            "revoke_stream_access", "bind_stream", "unbind_stream"} <= names
    assert sum(c.startswith(("stream_rewind(subscription", "stream_rewind(stream")) for c, _ in NULL_CALLS) == 4


@pytest.mark.parametrize("call", [sql for _, sql in NULL_CALLS], ids=[i for i, _ in NULL_CALLS])
def test_a_null_name_is_22004_before_anything_happens(conn, call):
    """2.8.0: 22023 (subscribe) or 42704 'subscription ""' (the others) for a NULL subscription."""
    conn.execute("SELECT pgmq.create_stream('nn'), pgmq.subscribe('nn', 's'), pgmq.create_exchange('x', 'topic')")
    before = scalar(conn, "SELECT (SELECT count(*) FROM pgmq.stream_ticks) + (SELECT count(*) FROM pgmq.stream_batches)")
    with raises_sql("22004"):
        conn.execute(call)
    assert scalar(conn, "SELECT (SELECT count(*) FROM pgmq.stream_ticks) + (SELECT count(*) FROM pgmq.stream_batches)") == before


def test_a_null_batch_id_or_time_is_22004(conn):
    conn.execute("SELECT pgmq.create_stream('nn'), pgmq.subscribe('nn', 's')")
    for call in ("SELECT pgmq.stream_ack('nn', 's', NULL)",
                 "SELECT pgmq.stream_nack('nn', 's', NULL, ARRAY[1]::bigint[])",
                 "SELECT pgmq.stream_rewind('nn', 's', NULL::timestamptz)"):
        with raises_sql("22004"):
            conn.execute(call)


# ----------------------------------------------------------------------------- squatting

@contextlib.contextmanager
def acting_as(conn, role):
    conn.execute(f"SET ROLE {role}")
    try:
        yield conn
    finally:
        conn.execute("RESET ROLE")


def test_create_stream_on_another_roles_stream_warns_naming_it_and_changes_nothing(conn, make_role):
    """2.8.0: a superuser (or a member of the owner) heard nothing, another role got 42710."""
    tenant, app = make_role("tenant"), make_role("app")
    with acting_as(conn, tenant):
        conn.execute("SELECT pgmq.create_stream('orders', retention => '1 hour')")
    seen = notices(conn)
    warning = ("WARNING", f'stream "orders" already exists and belongs to role "{tenant}"')
    conn.execute("SELECT pgmq.create_stream('orders', retention => '2 days')")  # a superuser
    assert seen == [warning]
    with acting_as(conn, app):
        conn.execute("SELECT pgmq.create_stream('orders', retention => '3 days')")  # a plain role
    assert seen == [warning, warning]
    assert conn.execute("SELECT owner::text, retention FROM pgmq.streams").fetchall() == [
        (tenant, scalar(conn, "SELECT interval '1 hour'"))]
    with acting_as(conn, tenant):
        conn.execute("SELECT pgmq.create_stream('orders')")  # its owner: idempotent, quiet
    assert seen == [warning, warning]


def test_subscribe_to_another_roles_subscription_warns_naming_it_and_changes_nothing(conn, make_role):
    """2.8.0: the application's subscribe(..., retry_queue) said nothing and joined the tenant's
    subscription, setting its retry queue."""
    tenant, app = make_role("tenant"), make_role("app")
    with acting_as(conn, app):
        conn.execute("SELECT pgmq.create_stream('orders')")
        conn.execute(f"SELECT pgmq.grant_stream_access('orders', '{tenant}', 'read')")
    with acting_as(conn, tenant):
        position = scalar(conn, "SELECT pgmq.subscribe('orders', 'billing', retry_queue => 'tenant_retry')")
    seen = notices(conn)
    warning = ("WARNING", f'subscription "billing" of stream "orders" already exists and belongs to role "{tenant}"')
    with acting_as(conn, app):
        assert scalar(conn, "SELECT pgmq.subscribe('orders', 'billing', retry_queue => 'billing_retry')") == position
    assert seen == [warning]
    assert scalar(conn, "SELECT pgmq.subscribe('orders', 'billing', retry_queue => 'su_retry')") == position
    assert seen == [warning, warning]
    assert conn.execute("SELECT created_by::text, retry_queue FROM pgmq.stream_subscriptions").fetchall() == [
        (tenant, "tenant_retry")]
    assert column(conn, "SELECT queue_name FROM pgmq.meta ORDER BY 1") == ["tenant_retry"]  # none made
    with acting_as(conn, tenant):
        conn.execute("SELECT pgmq.subscribe('orders', 'billing', retry_queue => 'tenant_retry2')")  # its own
    assert seen == [warning, warning]
    assert scalar(conn, "SELECT retry_queue FROM pgmq.stream_subscriptions") == "tenant_retry2"


# ----------------------------------------------------------------------------- retry queue rights

@pytest.fixture
def billing(conn, make_role):
    """Stream 'orders' and subscription 'billing' (retry queue 'billing_retry') of role app; role
    tenant may read the stream; queue 'victimq' is the superuser's."""
    tenant, app = make_role("tenant"), make_role("app")
    conn.execute("SELECT pgmq.create('victimq')")
    with acting_as(conn, app):
        conn.execute("SELECT pgmq.create_stream('orders')")
        conn.execute(f"SELECT pgmq.grant_stream_access('orders', '{tenant}', 'read')")
        conn.execute("SELECT pgmq.subscribe('orders', 'billing', retry_queue => 'billing_retry')")
    return {"tenant": tenant, "app": app}


def test_a_reader_cannot_write_a_subscriptions_steering_columns(conn, billing):
    """Row security let any reader of the stream write subscription rows: 2.8.0 took
    UPDATE ... SET retry_queue = 'victimq' (a privileged nack then wrote there)."""
    tenant, app = billing["tenant"], billing["app"]
    with acting_as(conn, tenant):
        for sql in ("UPDATE pgmq.stream_subscriptions SET retry_queue = 'victimq'",
                    f"UPDATE pgmq.stream_subscriptions SET created_by = '{tenant}'",
                    "INSERT INTO pgmq.stream_subscriptions (stream_name, subscription_name, position, handed, created_by) "
                    f"VALUES ('orders', 'forged', 0, 0, '{app}')",
                    "INSERT INTO pgmq.stream_subscriptions (stream_name, subscription_name, position, handed, retry_queue) "
                    "VALUES ('orders', 'mine', 0, 0, 'victimq')"):
            with raises_sql("42501"):
                conn.execute(sql)
        # what readers do write stays open: positions (stream_read, stream_rewind)
        conn.execute("UPDATE pgmq.stream_subscriptions SET handed = position")
    assert conn.execute("SELECT subscription_name, created_by::text, retry_queue FROM pgmq.stream_subscriptions"
                        ).fetchall() == [("billing", app, "billing_retry")]


def test_a_privileged_nack_never_copies_into_a_queue_the_subscriptions_role_may_not_send_to(conn, connect, billing):
    """A row written around the checks (here: with triggers off, as before 2.9.0) points the
    retry queue at the superuser's queue: the superuser's stream_nack refuses (42501), copies
    nothing, and its rolled-back batch comes back; the subscription goes on; once its role sets a
    queue of its own again, the nack copies there. 2.8.0 copied into 'victimq'."""
    tenant, app = billing["tenant"], billing["app"]
    forger = connect()
    forger.execute("SET session_replication_role = replica")
    with acting_as(forger, tenant):
        forger.execute("UPDATE pgmq.stream_subscriptions SET retry_queue = 'victimq'")
    eid = send(conn, 1, "orders")
    with conn.transaction():
        batch = scalar(conn, "SELECT batch_id FROM pgmq.stream_read('orders', 'billing')")
        with raises_sql("42501"):
            conn.execute("SELECT pgmq.stream_nack('orders', 'billing', %s, ARRAY[%s]::bigint[])", (batch, eid))
        raise psycopg.Rollback
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_victimq") == 0
    later = send(conn, 2, "orders")
    assert column(conn, "SELECT ev_id FROM pgmq.stream_read('orders', 'billing')") == [eid, later]  # nothing lost
    with acting_as(conn, app):
        conn.execute("SELECT pgmq.subscribe('orders', 'billing', retry_queue => 'billing_retry')")
    with conn.transaction():
        batch = scalar(conn, "SELECT max(batch_id) FROM pgmq.stream_batches")
        assert scalar(conn, "SELECT pgmq.stream_nack('orders', 'billing', %s, ARRAY[%s]::bigint[])", (batch, eid)) == 1
        conn.execute("SELECT pgmq.stream_ack('orders', 'billing', %s)", (batch,))
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_billing_retry") == 1


def test_subscribe_refuses_a_retry_queue_the_caller_may_not_send_to(conn, billing):
    tenant = billing["tenant"]
    with acting_as(conn, tenant):
        with raises_sql("42501"):
            conn.execute("SELECT pgmq.subscribe('orders', 'audit', retry_queue => 'victimq')")
    assert column(conn, "SELECT subscription_name FROM pgmq.stream_subscriptions") == ["billing"]


# ----------------------------------------------------------------------------- upgrade

def test_streams_of_2_8_0_get_their_tick_horizon_and_guard_on_upgrade(conn, connect):
    conn.execute("DROP EXTENSION pgmq CASCADE")
    conn.execute("CREATE EXTENSION pgmq VERSION '2.8.0'")
    conn.execute("SELECT pgmq.create_stream('ev'), pgmq.subscribe('ev', 'a')")
    send(conn, 1)
    conn.execute("ALTER EXTENSION pgmq UPDATE TO '2.9.0'")
    assert scalar(conn, "SELECT count(*) FROM pg_depend WHERE objid = 'pgmq.\"s_ev$tick\"'::regclass "
                        "AND deptype = 'e'") == 0  # not an extension member: drop_stream drops it
    c = consumer(connect, IsolationLevel.SERIALIZABLE)
    send(conn, 2)
    assert consume_once(c, "a") == [1, 2]
    assert scalar(conn, "SELECT count(*) FROM pg_trigger WHERE tgname = 'stream_subscriptions_guard'") == 1
    assert scalar(conn, "SELECT pgmq.drop_stream('ev')") is True
    assert scalar(conn, "SELECT to_regclass('pgmq.\"s_ev$tick\"')") is None
