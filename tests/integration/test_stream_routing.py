"""Streams bound to exchanges (bind_stream, unbind_stream; features/routing): a publish writes one
event into each stream it reaches, however many subscriptions read it, and says which stream got
which ev_id; unroutable rules, atomicity and access are those of queues."""

from __future__ import annotations

import json

import pytest

from tests.helpers import column, notices, raises_sql, scalar


def publish(conn, exchange, key, msg=None, headers=None):
    """[(queue_name, msg_id, stream_name, ev_id)] of one publish (publish_routed)."""
    return conn.execute("SELECT * FROM pgmq.publish_routed(%s, %s, %s::jsonb, %s::jsonb)",
                        (exchange, key, json.dumps(msg or {"x": 1}),
                         json.dumps(headers) if headers else None)).fetchall()


def events(conn, stream):
    """Every stored event's message, in ev_id order (all segments)."""
    return column(conn, f"SELECT message FROM pgmq.s_{stream} ORDER BY ev_id")


def drain(conn, stream, sub):
    got = []
    while rows := conn.execute("SELECT batch_id, message FROM pgmq.stream_read(%s, %s)", (stream, sub)).fetchall():
        conn.execute("SELECT pgmq.stream_ack(%s, %s, %s)", (stream, sub, rows[0][0]))
        got += [m for _, m in rows]
    return got


@pytest.fixture
def log(conn):
    """Stream 'log' with three subscriptions, and queue 'q'."""
    conn.execute("SELECT pgmq.create_stream('log')")
    for sub in ("a", "b", "c"):
        conn.execute("SELECT pgmq.subscribe('log', %s)", (sub,))
    conn.execute("SELECT pgmq.create('q')")
    return "log"


def test_a_fanout_publish_stores_one_event_for_every_subscription(conn, log):
    conn.execute("SELECT pgmq.create_exchange('fan')")
    conn.execute("SELECT pgmq.bind_queue('q', 'fan', NULL)")
    conn.execute("SELECT pgmq.bind_stream('log', 'fan')")
    conn.execute("SELECT pgmq.bind_stream('log', 'fan', 'ignored')")  # fanout: no key, idempotent
    rows = publish(conn, "fan", "any", {"n": 1})
    assert [(q, s) for q, _, s, _ in rows] == [("q", None), (None, "log")]
    (_, msg_id, _, _), (_, _, _, ev_id) = rows
    assert rows[0][3] is None and rows[1][1] is None
    assert scalar(conn, "SELECT message FROM pgmq.q_q WHERE msg_id = %s", (msg_id,)) == {"n": 1}
    assert scalar(conn, "SELECT message FROM pgmq.s_log WHERE ev_id = %s", (ev_id,)) == {"n": 1}
    assert events(conn, "log") == [{"n": 1}]  # one stored row, three subscriptions
    for sub in ("a", "b", "c"):
        assert drain(conn, "log", sub) == [{"n": 1}]
    assert conn.execute("SELECT * FROM pgmq.test_exchange_routing('fan', 'k')").fetchall() == [
        ("q", None), (None, "log")]
    assert conn.execute("SELECT exchange_name, queue_name, stream_name, binding_key "
                        "FROM pgmq.list_exchange_bindings('fan')").fetchall() == [
        ("fan", "q", None, None), ("fan", None, "log", None)]


def test_publish_keeps_its_two_columns_and_writes_the_streams_too(conn, log):
    """A 2.3.0 client unpacks publish's (queue_name, msg_id): streams bound to the exchange get
    their event all the same, and publish_routed is the call that lists them."""
    conn.execute("SELECT pgmq.create_exchange('fan')")
    conn.execute("SELECT pgmq.bind_queue('q', 'fan', NULL), pgmq.bind_stream('log', 'fan')")
    cur = conn.execute("SELECT * FROM pgmq.publish('fan', NULL, '{\"n\": 1}')")
    assert [d.name for d in cur.description] == ["queue_name", "msg_id"]
    ((queue, msg_id),) = cur.fetchall()
    assert queue == "q" and scalar(conn, "SELECT message FROM pgmq.q_q WHERE msg_id = %s", (msg_id,)) == {"n": 1}
    assert events(conn, "log") == [{"n": 1}]
    cur = conn.execute("SELECT * FROM pgmq.publish('fan', NULL, '{\"n\": 2}', NULL, now() + interval '1 hour')")
    assert [d.name for d in cur.description] == ["queue_name", "msg_id"] and len(cur.fetchall()) == 1
    # bound to a stream only: routed (no unroutable rule runs), no queue row
    conn.execute("SELECT pgmq.create_exchange('only_log'), pgmq.bind_stream('log', 'only_log')")
    conn.execute("SELECT pgmq.set_unroutable('only_log', 'error')")
    assert conn.execute("SELECT * FROM pgmq.publish('only_log', NULL, '{\"n\": 3}')").fetchall() == []
    assert events(conn, "log") == [{"n": 1}, {"n": 2}, {"n": 3}]


def test_direct_topic_and_headers_route_to_streams(conn, log):
    conn.execute("SELECT pgmq.create_stream('other')")
    conn.execute("SELECT pgmq.create_exchange('d', 'direct'), pgmq.create_exchange('t', 'topic'), "
                 "pgmq.create_exchange('h', 'headers')")
    conn.execute("SELECT pgmq.bind_stream('log', 'd', 'eu'), pgmq.bind_stream('other', 'd', 'us')")
    # two patterns of one stream match: still one event
    conn.execute("SELECT pgmq.bind_stream('log', 't', 'orders.*'), pgmq.bind_stream('log', 't', 'orders.#')")
    conn.execute("""SELECT pgmq.bind_stream('other', 'h', '{"x-match": "any", "region": "eu", "kind": "x"}')""")
    assert [s for _, _, s, _ in publish(conn, "d", "eu", {"n": 1})] == ["log"]
    assert [s for _, _, s, _ in publish(conn, "d", "us", {"n": 2})] == ["other"]
    assert [s for _, _, s, _ in publish(conn, "t", "orders.new", {"n": 3})] == ["log"]
    assert [s for _, _, s, _ in publish(conn, "h", "", {"n": 4}, {"region": "eu"})] == ["other"]
    assert publish(conn, "h", "", {"n": 5}, {"region": "us"}) == []
    assert events(conn, "log") == [{"n": 1}, {"n": 3}]
    assert events(conn, "other") == [{"n": 2}, {"n": 4}]


def test_unroutable_rules_are_unchanged(conn, log):
    conn.execute("SELECT pgmq.create_exchange('d', 'direct'), pgmq.create_exchange('spare')")
    conn.execute("SELECT pgmq.bind_stream('log', 'd', 'eu')")
    seen = notices(conn)
    assert publish(conn, "d", "us") == []
    assert ("NOTICE", 'message to exchange "d" with routing key "us" matched no queue') in seen
    conn.execute("SELECT pgmq.set_unroutable('d', 'error')")
    with raises_sql("P0002"):
        publish(conn, "d", "us")
    # an alternate exchange that reaches a stream takes the message: routed, no error
    conn.execute("SELECT pgmq.bind_stream('log', 'spare')")
    conn.execute("SELECT pgmq.set_unroutable('d', 'error', 'spare')")
    assert [s for _, _, s, _ in publish(conn, "d", "us", {"n": 9})] == ["log"]
    assert events(conn, "log") == [{"n": 9}]


def test_a_publish_is_all_or_nothing_across_queues_and_streams(conn, log):
    conn.execute("SELECT pgmq.create_exchange('fan')")
    conn.execute("SELECT pgmq.bind_queue('q', 'fan', NULL), pgmq.bind_stream('log', 'fan')")
    conn.execute("ALTER TABLE pgmq.q_q ADD CONSTRAINT no_boom CHECK (message->>'boom' IS NULL)")
    with raises_sql("23514"):
        publish(conn, "fan", None, {"boom": 1})
    assert events(conn, "log") == [] and scalar(conn, "SELECT count(*) FROM pgmq.q_q") == 0


def test_a_delay_holds_the_queue_copy_not_the_event(conn, log):
    """A stream has no delay: its event is delivered once the publish commits."""
    conn.execute("SELECT pgmq.create_exchange('fan')")
    conn.execute("SELECT pgmq.bind_queue('q', 'fan', NULL), pgmq.bind_stream('log', 'fan')")
    assert len(conn.execute("SELECT * FROM pgmq.publish_routed('fan', NULL, '{\"n\": 1}', NULL, 60)").fetchall()) == 2
    assert column(conn, "SELECT msg_id FROM pgmq.read('q', 30, 10)") == []
    assert drain(conn, "log", "a") == [{"n": 1}]


def test_drop_and_unbind(conn, log):
    conn.execute("SELECT pgmq.create_exchange('t', 'topic')")
    conn.execute("SELECT pgmq.bind_stream('log', 't', 'a.*'), pgmq.bind_stream('log', 't', 'b.*')")
    seen = notices(conn)
    conn.execute("SELECT pgmq.unbind_stream('log', 't', 'c.*')")
    assert ("NOTICE", 'stream "log" was not bound to exchange "t" with key c.*') in seen
    conn.execute("SELECT pgmq.unbind_stream('log', 't', 'a.*')")
    assert column(conn, "SELECT binding_key FROM pgmq.stream_bindings") == ["b.*"]
    conn.execute("SELECT pgmq.bind_stream('log', 't', 'c.*')")
    conn.execute("SELECT pgmq.unbind_stream('log', 't')")  # every key
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_bindings") == 0
    # a bound stream keeps its exchange from being dropped, unless cascade drops the stream too
    conn.execute("SELECT pgmq.bind_stream('log', 't', 'a.*')")
    with raises_sql("2BP01"):
        conn.execute("SELECT pgmq.drop_exchange('t', false)")
    conn.execute("SELECT pgmq.drop_exchange('t', true)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.streams WHERE stream_name = 'log'") == 0
    # dropping a stream removes its bindings
    conn.execute("SELECT pgmq.create_stream('s2'), pgmq.create_exchange('fan')")
    conn.execute("SELECT pgmq.bind_stream('s2', 'fan')")
    conn.execute("SELECT pgmq.drop_stream('s2')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_bindings") == 0
    assert publish(conn, "fan", None) == []


def test_bad_bindings_are_refused_and_change_nothing(conn, log):
    conn.execute("SELECT pgmq.create_exchange('d', 'direct'), pgmq.create_exchange('t', 'topic'), "
                 "pgmq.create_exchange('h', 'headers')")
    cases = [
        ("SELECT pgmq.bind_stream('nope', 'd', 'k')", "42P01"),
        ("SELECT pgmq.bind_stream('a$b', 'd', 'k')", "42602"),
        ("SELECT pgmq.bind_stream(NULL, 'd', 'k')", "22004"),
        ("SELECT pgmq.bind_stream('log', 'nope', 'k')", "42704"),
        ("SELECT pgmq.bind_stream('log', 'pgmq.topic', 'a.*')", "22023"),
        ("SELECT pgmq.bind_stream('log', 'd')", "22004"),
        ("SELECT pgmq.bind_stream('log', 't', 'a..b')", "22023"),
        ("SELECT pgmq.bind_stream('log', 'h', 'not json')", "22P02"),
        ("SELECT pgmq.bind_stream('log', 'h', '[1]')", "22023"),
        ("SELECT pgmq.unbind_stream('nope', 'd', 'k')", "42P01"),
        ("SELECT pgmq.unbind_stream('log', 'nope', 'k')", "42704"),
    ]
    for sql, state in cases:
        with raises_sql(state):
            conn.execute(sql)
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_bindings") == 0


# ----------------------------------------------------------------------------- access

@pytest.fixture
def roles(conn, make_role):
    """owner: owns stream 'priv' (subscription 'a') and the public fanout exchange 'open', with
    'priv' and queue 'pub_q' bound to it; stranger: may publish to 'open', not write to 'priv'."""
    owner, stranger = make_role("owner"), make_role("stranger")
    conn.execute(f"SET ROLE {owner}")
    try:
        conn.execute("SELECT pgmq.create_stream('priv'), pgmq.create('pub_q')")
        conn.execute("SELECT pgmq.subscribe('priv', 'a')")
        conn.execute("SELECT pgmq.create_exchange('open')")
        conn.execute("SELECT pgmq.bind_queue('pub_q', 'open', NULL), pgmq.bind_stream('priv', 'open')")
        conn.execute("CALL pgmq.grant_queue_access('pub_q', %s)", (stranger,))
    finally:
        conn.execute("RESET ROLE")
    return owner, stranger


def as_role(conn, role, sql, params=None):
    conn.execute(f"SET ROLE {role}")
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.execute("RESET ROLE")


def test_a_publisher_that_may_not_write_to_a_stream_gets_nothing_into_it(conn, roles):
    owner, stranger = roles
    with raises_sql("42501"):
        as_role(conn, stranger, "SELECT * FROM pgmq.publish('open', NULL, '{\"n\": 1}')")
    # all or nothing: the queue copy the stranger may write went too
    assert events(conn, "priv") == [] and scalar(conn, "SELECT count(*) FROM pgmq.q_pub_q") == 0
    assert as_role(conn, owner, "SELECT stream_name FROM pgmq.publish_routed('open', NULL, '{\"n\": 2}') "
                                "WHERE stream_name IS NOT NULL") == [("priv",)]
    assert events(conn, "priv") == [{"n": 2}]


def test_a_role_that_may_not_write_to_a_stream_cannot_bind_it_or_touch_its_bindings(conn, roles):
    owner, stranger = roles
    conn.execute(f"SET ROLE {stranger}")
    try:
        conn.execute("SELECT pgmq.create_exchange('mine')")
        with raises_sql("42501"):
            conn.execute("SELECT pgmq.bind_stream('priv', 'mine')")
        with raises_sql("42501"):
            conn.execute("SELECT pgmq.unbind_stream('priv', 'open')")
        with raises_sql("42501"):  # row security: not past bind_stream's check either
            conn.execute("INSERT INTO pgmq.stream_bindings (exchange_name, stream_name) VALUES ('mine', 'priv')")
        conn.execute("DELETE FROM pgmq.stream_bindings")  # sees the rows, may delete none
        conn.execute("UPDATE pgmq.stream_bindings SET exchange_name = 'mine'")
    finally:
        conn.execute("RESET ROLE")
    assert conn.execute("SELECT exchange_name, stream_name FROM pgmq.stream_bindings").fetchall() == [("open", "priv")]
    assert events(conn, "priv") == []


def test_a_stream_owner_needs_publish_access_to_bind(conn, roles):
    owner, stranger = roles
    conn.execute(f"SET ROLE {stranger}")
    try:
        conn.execute("SELECT pgmq.create_stream('theirs'), pgmq.create_exchange('closed')")
        conn.execute("CALL pgmq.revoke_publish_access('closed', 'public')")
    finally:
        conn.execute("RESET ROLE")
    conn.execute(f"SET ROLE {owner}")
    try:
        with raises_sql("42501"):  # owner may write to priv but not publish to 'closed'
            conn.execute("SELECT pgmq.bind_stream('priv', 'closed')")
        with raises_sql("42501"):  # and may publish to 'open' but not write to 'theirs'
            conn.execute("SELECT pgmq.bind_stream('theirs', 'open')")
    finally:
        conn.execute("RESET ROLE")
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_bindings") == 1
