"""Exchanges: pgpro_queue's API (create/drop_exchange, bind/unbind_queue, publish_message) and
pgmq.publish, with RabbitMQ's four exchange types, unroutable handling and alternate exchanges.
Upstream's topic functions are the built-in exchange 'pgmq.topic'."""

from __future__ import annotations

import json
import threading

import psycopg
import pytest

from tests.helpers import column, notices, raises_sql, scalar


def make_queues(conn, *names):
    for n in names:
        conn.execute("SELECT pgmq.create(%s)", (n,))


def fanout(conn, exchange, *queues):
    """A fanout exchange with these (new) queues bound to it."""
    make_queues(conn, *queues)
    conn.execute("SELECT pgmq.create_exchange(%s)", (exchange,))
    for q in queues:
        conn.execute("SELECT pgmq.bind_queue(%s, %s, NULL)", (q, exchange))


def publish(conn, exchange, key, msg=None, headers=None):
    rows = conn.execute("SELECT queue_name, msg_id FROM pgmq.publish(%s, %s, %s::jsonb, %s::jsonb)",
                        (exchange, key, json.dumps(msg or {"x": 1}), json.dumps(headers) if headers else None)
                        ).fetchall()
    return sorted(q for q, _ in rows)


def depth(conn, queue):
    return scalar(conn, "SELECT queue_length FROM pgmq.metrics(%s)", (queue,))


# ----------------------------------------------------------------------------- types

def test_fanout_reaches_every_bound_queue_and_ignores_the_key(conn):
    make_queues(conn, "a", "b", "c")
    conn.execute("SELECT pgmq.create_exchange('events')")  # fanout is the default type
    assert scalar(conn, "SELECT exchange_type FROM pgmq.list_exchanges() WHERE exchange_name = 'events'") == "fanout"
    for q in ("a", "b"):
        conn.execute("SELECT pgmq.bind_queue(%s, 'events', NULL)", (q,))
    conn.execute("SELECT pgmq.bind_queue('b', 'events', 'ignored')")  # same binding: key ignored
    assert publish(conn, "events", "anything") == ["a", "b"]
    assert publish(conn, "events", None) == ["a", "b"]
    assert [depth(conn, q) for q in "abc"] == [2, 2, 0]


def test_direct_matches_the_key_exactly(conn):
    make_queues(conn, "pdf", "img", "both")
    conn.execute("SELECT pgmq.create_exchange('files', 'direct')")
    conn.execute("SELECT pgmq.bind_queue('pdf', 'files', 'application/pdf')")
    conn.execute("SELECT pgmq.bind_queue('img', 'files', 'image/png')")
    conn.execute("SELECT pgmq.bind_queue('both', 'files', 'application/pdf')")
    conn.execute("SELECT pgmq.bind_queue('both', 'files', 'image/png')")
    assert publish(conn, "files", "application/pdf") == ["both", "pdf"]
    assert publish(conn, "files", "image/png") == ["both", "img"]
    assert publish(conn, "files", "IMAGE/PNG") == []
    with raises_sql("22004"):
        publish(conn, "files", None)


@pytest.mark.parametrize("pattern, key, matches", [
    ("orders.*", "orders.eu", True),
    ("orders.*", "orders.eu.paid", False),
    ("orders.#", "orders.eu.paid", True),
    ("*.paid", "orders.paid", True),
    ("#", "x", True),
    ("orders.eu", "orders_eu", False),
])
def test_topic_wildcards(conn, pattern, key, matches):
    make_queues(conn, "t")
    conn.execute("SELECT pgmq.create_exchange('topics', 'topic')")
    conn.execute("SELECT pgmq.bind_queue('t', 'topics', %s)", (pattern,))
    assert publish(conn, "topics", key) == (["t"] if matches else [])


def test_topic_exchange_validates_keys_and_patterns_with_upstreams_rules(conn):
    make_queues(conn, "t")
    conn.execute("SELECT pgmq.create_exchange('topics', 'topic')")
    with raises_sql("22023", "pattern cannot contain consecutive dots. Got: a..b"):
        conn.execute("SELECT pgmq.bind_queue('t', 'topics', 'a..b')")
    with raises_sql("22023"):
        publish(conn, "topics", "bad key!")


@pytest.mark.parametrize("binding, headers, matches", [
    ({"x-match": "all", "format": "pdf", "type": "report"}, {"format": "pdf", "type": "report", "n": 1}, True),
    ({"x-match": "all", "format": "pdf", "type": "report"}, {"format": "pdf"}, False),
    ({"format": "pdf"}, {"format": "pdf"}, True),  # all is the default
    ({"x-match": "any", "format": "pdf", "type": "report"}, {"type": "report"}, True),
    ({"x-match": "any", "format": "pdf"}, {"format": "zip"}, False),
    ({"x-match": "all", "format": None}, {"format": "anything"}, True),  # null: presence only
    ({"x-match": "all", "n": 1}, {"n": "1"}, False),  # JSON values compare exactly
    ({"x-match": "all", "x-tenant": "a"}, {}, True),  # x- arguments are not compared ...
    ({"x-match": "all-with-x", "x-tenant": "a"}, {}, False),  # ... unless asked
    ({"x-match": "any-with-x", "x-tenant": "a"}, {"x-tenant": "a"}, True),
])
def test_headers_exchange(conn, binding, headers, matches):
    make_queues(conn, "h")
    conn.execute("SELECT pgmq.create_exchange('hdrs', 'headers')")
    conn.execute("SELECT pgmq.bind_queue('h', 'hdrs', %s)", (json.dumps(binding),))
    assert publish(conn, "hdrs", None, headers=headers) == (["h"] if matches else [])


def test_headers_binding_key_is_checked(conn):
    make_queues(conn, "h")
    conn.execute("SELECT pgmq.create_exchange('hdrs', 'headers')")
    with raises_sql("22P02"):
        conn.execute("SELECT pgmq.bind_queue('h', 'hdrs', 'not json')")
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.bind_queue('h', 'hdrs', '[1, 2]')")
    with raises_sql("22023"):
        conn.execute("""SELECT pgmq.bind_queue('h', 'hdrs', '{"x-match": "some"}')""")
    with raises_sql("22004"):
        conn.execute("SELECT pgmq.bind_queue('h', 'hdrs', NULL)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.exchange_bindings WHERE exchange_name = 'hdrs'") == 0


# ----------------------------------------------------------------------------- publish

def test_publish_returns_each_copy_and_is_atomic(conn):
    fanout(conn, "fan", "ok", "picky")
    rows = conn.execute("SELECT queue_name, msg_id FROM pgmq.publish('fan', NULL, '{\"v\": 1}')").fetchall()
    assert [r[0] for r in rows] == ["ok", "picky"]
    for q, msg_id in rows:
        assert scalar(conn, f"SELECT message FROM pgmq.q_{q} WHERE msg_id = %s", (msg_id,)) == {"v": 1}
    conn.execute("ALTER TABLE pgmq.q_picky ADD CONSTRAINT no_boom CHECK (message->>'boom' IS NULL)")
    with raises_sql("23514"):
        conn.execute("SELECT * FROM pgmq.publish('fan', NULL, '{\"boom\": 1}')")
    assert (depth(conn, "ok"), depth(conn, "picky")) == (1, 1)


def test_publish_errors_change_nothing(conn):
    fanout(conn, "fan", "q")
    with raises_sql("42704", 'exchange "nope" does not exist'):
        publish(conn, "nope", "k")
    with raises_sql("22004", "msg cannot be NULL"):
        conn.execute("SELECT * FROM pgmq.publish('fan', NULL, NULL)")
    with raises_sql("22023"):
        conn.execute("SELECT * FROM pgmq.publish('fan', NULL, '{}', NULL, -1)")
    assert depth(conn, "q") == 0


def test_delay_priority_and_retry_policy_apply_to_routed_copies(conn):
    fanout(conn, "fan", "a", "b")
    conn.execute("SELECT pgmq.set_retry_policy('b', max_retries => 0)")
    conn.execute("SELECT * FROM pgmq.publish('fan', NULL, '{\"n\": \"low\"}', '{\"x-pgmq-priority\": 5}')")
    conn.execute("SELECT * FROM pgmq.publish('fan', NULL, '{\"n\": \"high\"}', '{\"x-pgmq-priority\": 1}')")
    conn.execute("SELECT * FROM pgmq.publish('fan', NULL, '{\"n\": \"later\"}', NULL, 3600)")
    assert column(conn, "SELECT message->>'n' FROM pgmq.read('a', 30, 5)") == ["high", "low"]
    # b allows one delivery: a rolled-back transactional read dead-letters the copy
    with conn.transaction():
        assert scalar(conn, "SELECT pgmq.read_message('b')") == {"n": "high"}
    tx = psycopg.connect(conn.info.dsn)
    try:
        with pytest.raises(psycopg.errors.RaiseException):
            with tx.transaction():
                assert scalar(tx, "SELECT pgmq.read_message('b')") == {"n": "low"}
                tx.execute("DO $$BEGIN RAISE EXCEPTION 'consumer failed'; END$$")
    finally:
        tx.close()
    assert scalar(conn, "SELECT pgmq.read_message('b')") is None  # low went to the archive
    assert scalar(conn, "SELECT headers->'x-pgmq-dead-letter'->>'reason' FROM pgmq.a_b") == "rollback"


def test_publish_message_procedure_with_pgpro_options(conn):
    make_queues(conn, "q")
    conn.execute("SELECT pgmq.create_exchange('ex', 'direct')")
    conn.execute("SELECT pgmq.bind_queue('q', 'ex', 'k')")
    conn.execute("CALL pgmq.publish_message('ex', 'k', '{\"a\": 1}', 3, '{\"app\": \"x\"}', 2, 7)")
    conn.execute("CALL pgmq.publish_message(e_name => 'ex', e_routing_key => 'k', q_msg_body => '{\"a\": 2}',"
                 " q_msg_enable_time => now() + interval '1 hour')")
    row = conn.execute("SELECT message, headers, priority FROM pgmq.q_q ORDER BY msg_id LIMIT 1").fetchone()
    assert row[0] == {"a": 1} and row[2] == 3
    assert row[1] == {"app": "x", "x-pgmq-priority": 3, "x-pgmq-max-retries": 2, "x-pgmq-retry-delay": 7}
    assert scalar(conn, "SELECT count(*) FROM pgmq.q_q WHERE vt > now() + interval '50 minutes'") == 1
    with raises_sql("22023"):
        conn.execute("CALL pgmq.publish_message('ex', 'k', '{}', 0, '[1]')")


# ----------------------------------------------------------------------------- unroutable

def test_unroutable_is_a_notice_by_default(conn):
    conn.execute("SELECT pgmq.create_exchange('lonely', 'direct')")
    seen = notices(conn)
    assert publish(conn, "lonely", "k") == []
    assert ("NOTICE", 'message to exchange "lonely" with routing key "k" matched no queue') in seen


def test_unroutable_error_aborts_the_publish(conn):
    conn.execute("SELECT pgmq.create_exchange('strict', 'direct')")
    conn.execute("SELECT pgmq.set_unroutable('strict', 'error')")
    with raises_sql("P0002", 'message to exchange "strict" with routing key "k" matched no queue'):
        publish(conn, "strict", "k")
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.set_unroutable('strict', 'drop')")


def test_alternate_exchange_takes_unroutable_messages(conn):
    make_queues(conn, "main", "unrouted")
    conn.execute("SELECT pgmq.create_exchange('orders', 'direct')")
    conn.execute("SELECT pgmq.create_exchange('orders_ae')")
    conn.execute("SELECT pgmq.bind_queue('main', 'orders', 'eu')")
    conn.execute("SELECT pgmq.bind_queue('unrouted', 'orders_ae', NULL)")
    conn.execute("SELECT pgmq.set_unroutable('orders', 'error', 'orders_ae')")
    assert publish(conn, "orders", "eu") == ["main"]
    assert publish(conn, "orders", "us") == ["unrouted"]
    assert column(conn, "SELECT queue_name FROM pgmq.test_exchange_routing('orders', 'us')") == ["unrouted"]
    with raises_sql("22023"):  # cycles are refused
        conn.execute("SELECT pgmq.set_unroutable('orders_ae', 'notice', 'orders')")
    with raises_sql("42704"):
        conn.execute("SELECT pgmq.set_unroutable('orders', 'notice', 'nope')")
    conn.execute("SELECT pgmq.unbind_queue('unrouted', 'orders_ae', NULL)")
    with raises_sql("P0002"):  # the alternate routes nowhere either: the exchange's own rule
        publish(conn, "orders", "us")


# ----------------------------------------------------------------------------- admin

def test_create_exchange_errors(conn):
    with raises_sql("42602"):
        conn.execute("SELECT pgmq.create_exchange('bad name')")
    with raises_sql("42602"):
        conn.execute("SELECT pgmq.create_exchange('pgmq.topic', 'topic')")
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.create_exchange('e', 'x-delayed')")
    conn.execute("SELECT pgmq.create_exchange('e', 'topic')")
    with raises_sql("42710", 'exchange "e" already exists'):
        conn.execute("SELECT pgmq.create_exchange('e', 'fanout')")
    assert scalar(conn, "SELECT exchange_type FROM pgmq.exchanges WHERE exchange_name = 'e'") == "topic"


def test_bind_errors(conn):
    make_queues(conn, "q")
    conn.execute("SELECT pgmq.create_exchange('d', 'direct')")
    with raises_sql("42704"):
        conn.execute("SELECT pgmq.bind_queue('q', 'nope', 'k')")
    with raises_sql("42P01"):
        conn.execute("SELECT pgmq.bind_queue('nope', 'd', 'k')")
    with raises_sql("22004"):
        conn.execute("SELECT pgmq.bind_queue('q', 'd', NULL)")
    conn.execute("SELECT pgmq.bind_queue('q', 'd', 'k')")
    conn.execute("SELECT pgmq.bind_queue('q', 'd', 'k')")  # idempotent
    assert column(conn, "SELECT binding_key FROM pgmq.list_exchange_bindings('d')") == ["k"]


def test_unbind_one_key_or_all(conn):
    make_queues(conn, "q")
    conn.execute("SELECT pgmq.create_exchange('d', 'direct')")
    for k in ("a", "b", "c"):
        conn.execute("SELECT pgmq.bind_queue('q', 'd', %s)", (k,))
    conn.execute("SELECT pgmq.unbind_queue('q', 'd', 'a')")
    assert column(conn, "SELECT binding_key FROM pgmq.list_exchange_bindings('d')") == ["b", "c"]
    seen = notices(conn)
    conn.execute("SELECT pgmq.unbind_queue('q', 'd', 'a')")
    assert seen and "was not bound" in seen[-1][1]
    conn.execute("SELECT pgmq.unbind_queue('q', 'd', NULL)")
    assert column(conn, "SELECT binding_key FROM pgmq.list_exchange_bindings('d')") == []


def test_drop_exchange(conn):
    make_queues(conn, "kept", "gone1", "gone2")
    conn.execute("SELECT pgmq.create_exchange('e1')")
    conn.execute("SELECT pgmq.bind_queue('kept', 'e1', NULL)")
    with raises_sql("2BP01"):
        conn.execute("SELECT pgmq.drop_exchange('e1', false)")
    conn.execute("SELECT pgmq.unbind_queue('kept', 'e1', NULL)")
    conn.execute("SELECT pgmq.drop_exchange('e1', false)")
    assert column(conn, "SELECT queue_name FROM pgmq.list_queues()") == ["gone1", "gone2", "kept"]

    conn.execute("SELECT pgmq.create_exchange('e2')")
    conn.execute("SELECT pgmq.bind_queue('gone1', 'e2', NULL)")
    conn.execute("SELECT pgmq.bind_queue('gone2', 'e2', NULL)")
    conn.execute("SELECT pgmq.drop_exchange('e2', true)")  # cascade drops the bound queues
    assert column(conn, "SELECT queue_name FROM pgmq.list_queues()") == ["kept"]
    assert scalar(conn, "SELECT to_regclass('pgmq.q_gone1')") is None
    assert column(conn, "SELECT exchange_name FROM pgmq.list_exchanges()") == ["pgmq.topic"]
    with raises_sql("42704"):
        conn.execute("SELECT pgmq.drop_exchange('e2', false)")
    with raises_sql("22023"):
        conn.execute("SELECT pgmq.drop_exchange('pgmq.topic', true)")


def test_drop_queue_removes_its_bindings(conn):
    make_queues(conn, "q")
    conn.execute("SELECT pgmq.create_exchange('d', 'direct')")
    conn.execute("SELECT pgmq.bind_queue('q', 'd', 'k')")
    conn.execute("SELECT pgmq.drop_queue('q')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.exchange_bindings") == 0


def test_upstream_topics_are_the_builtin_topic_exchange(conn):
    make_queues(conn, "t1", "t2")
    conn.execute("SELECT pgmq.bind_topic('logs.*', 't1')")
    conn.execute("SELECT pgmq.bind_queue('t2', 'pgmq.topic', 'logs.#')")
    assert column(conn, "SELECT pattern FROM pgmq.list_topic_bindings() ORDER BY 1") == ["logs.#", "logs.*"]
    assert scalar(conn, "SELECT pgmq.send_topic('logs.error', '{}')") == 2
    assert publish(conn, "pgmq.topic", "logs.a.b") == ["t2"]
    assert scalar(conn, "SELECT pgmq.unbind_topic('logs.#', 't2')") is True
    assert column(conn, "SELECT queue_name FROM pgmq.test_exchange_routing('pgmq.topic', 'logs.x')") == ["t1"]


# ----------------------------------------------------------------------------- concurrency

def test_bind_and_unbind_racing_publishers(connect):
    """Three publishers publish to a fanout exchange while another connection binds and unbinds
    queue b in a loop. Every publish is atomic: it returns what it wrote, a always gets a copy,
    b gets one exactly when the publish says so, and nothing is lost or written twice."""
    admin = connect()
    fanout(admin, "fan", "a")
    make_queues(admin, "b")
    stop = threading.Event()
    results: list[list[tuple[str, int]]] = []
    errors: list[BaseException] = []

    def publisher(n: int) -> None:
        c = connect()
        try:
            for i in range(150):
                rows = c.execute("SELECT queue_name, msg_id FROM pgmq.publish('fan', NULL, %s::jsonb)",
                                 (json.dumps({"p": n, "i": i}),)).fetchall()
                results.append(rows)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    def binder() -> None:
        c = connect()
        try:
            while not stop.is_set():
                c.execute("SELECT pgmq.bind_queue('b', 'fan', NULL)")
                c.execute("SELECT pgmq.unbind_queue('b', 'fan', NULL)")
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=publisher, args=(n,)) for n in range(3)]
    b = threading.Thread(target=binder)
    b.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    b.join()
    assert not errors, errors
    assert len(results) == 450
    to_b = [mid for rows in results for q, mid in rows if q == "b"]
    assert all(sum(q == "a" for q, _ in rows) == 1 for rows in results)
    assert 0 < len(to_b) < 450, "the race should have hit both states"
    assert sorted(column(admin, "SELECT msg_id FROM pgmq.q_a")) == sorted(
        mid for rows in results for q, mid in rows if q == "a")
    assert sorted(column(admin, "SELECT msg_id FROM pgmq.q_b")) == sorted(to_b)


def test_publish_message_xml_reaches_every_queue_and_respects_payload_types(conn):
    fanout(conn, "xml_ex", "x1", "x2")
    conn.execute("SELECT pgmq.create('texts', 'text'::regtype)")
    doc = '<?xml version="1.0"?><order id="7">&amp; caf\u00e9</order>'
    conn.execute("CALL pgmq.publish_message_xml('xml_ex', NULL, %s::xml, 2, '{\"x-pgmq-payload\": \"text\"}')",
                 (doc,))
    for q in ("x1", "x2"):
        assert scalar(conn, "SELECT pgmq.read_message(%s)", (q,)) is None  # jsonb readers skip it
        assert scalar(conn, "SELECT pgmq.read_message_xml(%s)::text", (q,)) == doc
    conn.execute("SELECT pgmq.bind_queue('texts', 'xml_ex', NULL)")
    with raises_sql("23514"):  # a text queue refuses the xml copy: the whole publish fails
        conn.execute("CALL pgmq.publish_message_xml('xml_ex', NULL, '<a/>')")
    with raises_sql("23514"):
        conn.execute("SELECT * FROM pgmq.publish('xml_ex', NULL, '{}')")
    assert [depth(conn, q) for q in ("x1", "x2", "texts")] == [0, 0, 0]


def test_drop_exchange_cascade_racing_publishers(connect):
    """Publishers keep publishing while another connection drops the exchange with its queues:
    each publish either writes a copy to every queue or fails cleanly (exchange or queue gone);
    no deadlock, no internal error."""
    admin = connect()
    fanout(admin, "doomed", "r1", "r2", "r3")
    outcomes: list[str] = []
    errors: list[BaseException] = []
    started = threading.Barrier(4)

    def publisher() -> None:
        c = connect()
        started.wait()
        for _ in range(200):
            try:
                n = len(c.execute("SELECT * FROM pgmq.publish('doomed', NULL, '{}')").fetchall())
                outcomes.append(f"ok{n}")
            except psycopg.Error as e:
                outcomes.append(e.sqlstate or "?")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)
                return

    threads = [threading.Thread(target=publisher) for _ in range(3)]
    for t in threads:
        t.start()
    started.wait()
    admin.execute("SELECT pgmq.drop_exchange('doomed', true)")
    for t in threads:
        t.join()
    assert not errors, errors
    assert set(outcomes) <= {"ok3", "42704", "42P01"}, set(outcomes)
    assert "42704" in outcomes  # the drop happened while they were publishing
    assert scalar(admin, "SELECT count(*) FROM pgmq.meta WHERE queue_name LIKE 'r_'") == 0
