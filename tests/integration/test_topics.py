"""Topic routing: bindings, validation, send_topic / send_batch_topic fan-out."""

from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb

from tests.helpers import column, raises_sql, scalar


@pytest.fixture
def routed(conn):
    for q in ("errors", "all_logs", "audit"):
        conn.execute("SELECT pgmq.create(%s)", (q,))
    conn.execute("SELECT pgmq.bind_topic('logs.error', 'errors')")
    conn.execute("SELECT pgmq.bind_topic('logs.*', 'all_logs')")
    conn.execute("SELECT pgmq.bind_topic('logs.#', 'all_logs')")  # overlaps: still one copy
    conn.execute("SELECT pgmq.bind_topic('#.audit', 'audit')")
    return conn


def counts(conn):
    return {q: scalar(conn, f"SELECT count(*) FROM pgmq.q_{q}") for q in ("errors", "all_logs", "audit")}


@pytest.mark.parametrize("key", ["logs", "logs.error", "a-b_c.9", "x" * 255])
def test_valid_routing_keys(conn, key):
    assert scalar(conn, "SELECT pgmq.validate_routing_key(%s)", (key,)) is True


@pytest.mark.parametrize("key,message", [
    ("", "routing_key cannot be NULL or empty"),
    ("x" * 256, "routing_key length cannot exceed 255 characters, got 256 characters"),
    ("logs.error!", "routing_key contains invalid characters. Only alphanumeric, dots, hyphens, and underscores are allowed. Got: logs.error!"),
    ("logs.*", "routing_key contains invalid characters. Only alphanumeric, dots, hyphens, and underscores are allowed. Got: logs.*"),
    (".logs", "routing_key cannot start with a dot. Got: .logs"),
    ("logs.", "routing_key cannot end with a dot. Got: logs."),
    ("logs..error", "routing_key cannot contain consecutive dots. Got: logs..error"),
])
def test_invalid_routing_keys(conn, key, message):
    # upstream's function: P0001 and upstream's text; our twin (exchanges): 22023, same text
    with raises_sql("P0001", message):
        conn.execute("SELECT pgmq.validate_routing_key(%s)", (key,))
    with raises_sql("22023", message):
        conn.execute("SELECT pgmq._validate_routing_key(%s)", (key,))


@pytest.mark.parametrize("pattern,message", [
    ("", "pattern cannot be NULL or empty"),
    ("logs.**", "pattern cannot contain consecutive stars (**). Use # for multi-segment matching. Got: logs.**"),
    ("logs.##", "pattern cannot contain consecutive hashes (##). A single # already matches zero or more segments. Got: logs.##"),
    ("logs.*#", "pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: logs.*#"),
    ("logs.#*", "pattern cannot contain adjacent wildcards (*# or #*). Separate wildcards with dots. Got: logs.#*"),
    (".logs", "pattern cannot start with a dot. Got: .logs"),
    ("logs$", "pattern contains invalid characters. Only alphanumeric, dots, hyphens, underscores, *, and # are allowed. Got: logs$"),
])
def test_invalid_patterns(conn, pattern, message):
    with raises_sql("P0001", message):
        conn.execute("SELECT pgmq.validate_topic_pattern(%s)", (pattern,))
    with raises_sql("22023", message):
        conn.execute("SELECT pgmq._validate_topic_pattern(%s)", (pattern,))


def test_null_key_and_pattern(conn):
    with raises_sql("P0001", "routing_key cannot be NULL or empty"):
        conn.execute("SELECT pgmq.validate_routing_key(NULL)")
    with raises_sql("P0001", "pattern cannot be NULL or empty"):
        conn.execute("SELECT pgmq.validate_topic_pattern(NULL)")


@pytest.mark.parametrize("pattern,key,matches", [
    ("logs.*", "logs.error", True), ("logs.*", "logs.error.db", False), ("logs.*", "logs", False),
    ("logs.#", "logs.error.db", True), ("logs.#", "logs", False), ("#", "anything.at.all", True),
    ("*.error", "db.error", True), ("*.error", "a.db.error", False), ("#.error", "a.db.error", True),
    ("a.b", "aXb", False), ("a-b.*", "a-b.c", True),
])
def test_pattern_semantics(conn, pattern, key, matches):
    regex = scalar(conn, "SELECT pgmq._topic_regex(%s)", (pattern,))
    assert scalar(conn, "SELECT %s ~ %s", (key, regex)) is matches


def test_bind_is_idempotent_and_listed(routed):
    routed.execute("SELECT pgmq.bind_topic('logs.error', 'errors')")
    rows = routed.execute("SELECT pattern, queue_name, compiled_regex FROM pgmq.list_topic_bindings()").fetchall()
    assert len(rows) == 4
    assert ("logs.*", "all_logs", r"^logs\.[^.]+$") in rows
    mine = routed.execute("SELECT pattern FROM pgmq.list_topic_bindings(queue_name => 'all_logs') "
                          "ORDER BY pattern").fetchall()
    assert mine == [("logs.#",), ("logs.*",)]


def test_bind_errors(conn):
    with raises_sql("P0001", 'Queue "nope" does not exist. Create the queue first using pgmq.create()'):
        conn.execute("SELECT pgmq.bind_topic('a.b', 'nope')")
    with raises_sql("P0001", "queue_name cannot be NULL or empty"):
        conn.execute("SELECT pgmq.bind_topic('a.b', '')")
    with raises_sql("P0001", "pattern cannot contain consecutive dots. Got: a..b"):
        conn.execute("SELECT pgmq.bind_topic('a..b', 'x')")
    assert scalar(conn, "SELECT count(*) FROM pgmq.topic_bindings") == 0


def test_unbind(routed):
    assert scalar(routed, "SELECT pgmq.unbind_topic('logs.error', 'errors')") is True
    assert scalar(routed, "SELECT pgmq.unbind_topic('logs.error', 'errors')") is False
    with raises_sql("P0001", "pattern cannot be NULL or empty"):
        routed.execute("SELECT pgmq.unbind_topic('', 'errors')")


def test_test_routing_is_a_dry_run(routed):
    rows = routed.execute("SELECT pattern, queue_name FROM pgmq.test_routing('logs.error')").fetchall()
    assert rows == [("logs.#", "all_logs"), ("logs.*", "all_logs"), ("logs.error", "errors")]
    assert counts(routed) == {"errors": 0, "all_logs": 0, "audit": 0}


def test_send_topic_fans_out_once_per_queue(routed):
    assert scalar(routed, "SELECT pgmq.send_topic('logs.error', '{\"m\": 1}')") == 2
    assert counts(routed) == {"errors": 1, "all_logs": 1, "audit": 0}
    assert scalar(routed, "SELECT pgmq.send_topic('x.audit', '{}', 0)") == 1
    assert scalar(routed, "SELECT pgmq.send_topic('nothing.here', '{}')") == 0


def test_send_topic_overloads(routed):
    assert scalar(routed, "SELECT pgmq.send_topic(routing_key => 'logs.error', msg => %s, headers => %s, delay => 0)",
                  (Jsonb({"a": 1}), Jsonb({"h": 1}))) == 2
    assert scalar(routed, "SELECT pgmq.send_topic(routing_key => 'logs.error', msg => %s, headers => %s)",
                  (Jsonb({"a": 2}), Jsonb({"h": 2}))) == 2
    assert scalar(routed, "SELECT pgmq.send_topic(routing_key => 'logs.error', msg => %s, delay => 30)",
                  (Jsonb({"a": 3}),)) == 2
    rows = routed.execute("SELECT message, headers, vt > now() + interval '20 s' FROM pgmq.q_errors "
                          "ORDER BY msg_id").fetchall()
    assert rows == [({"a": 1}, {"h": 1}, False), ({"a": 2}, {"h": 2}, False), ({"a": 3}, None, True)]


def test_send_topic_errors_change_nothing(routed):
    with raises_sql("P0001", "msg cannot be NULL"):
        routed.execute("SELECT pgmq.send_topic('logs.error', NULL::jsonb)")
    with raises_sql("P0001", "delay cannot be negative, got: -1"):
        routed.execute("SELECT pgmq.send_topic('logs.error', '{}', -1)")
    with raises_sql("P0001", "routing_key cannot contain consecutive dots. Got: logs..error"):
        routed.execute("SELECT pgmq.send_topic('logs..error', '{}')")
    assert counts(routed) == {"errors": 0, "all_logs": 0, "audit": 0}


def test_send_topic_is_all_or_nothing(routed):
    routed.execute("ALTER TABLE pgmq.q_errors ADD CONSTRAINT no_boom CHECK (message->>'boom' IS NULL)")
    with raises_sql("23514"):
        routed.execute("SELECT pgmq.send_topic('logs.error', '{\"boom\": 1}')")
    assert counts(routed) == {"errors": 0, "all_logs": 0, "audit": 0}


MSGS = [Jsonb({"n": 1}), Jsonb({"n": 2})]
HDRS = [Jsonb({"h": 1}), Jsonb({"h": 2})]


@pytest.mark.parametrize("call,params", [
    ("pgmq.send_batch_topic(routing_key => 'logs.error', msgs => %s)", (MSGS,)),
    ("pgmq.send_batch_topic(routing_key => 'logs.error', msgs => %s, headers => %s)", (MSGS, HDRS)),
    ("pgmq.send_batch_topic(routing_key => 'logs.error', msgs => %s, delay => 0)", (MSGS,)),
    ("pgmq.send_batch_topic(routing_key => 'logs.error', msgs => %s, delay => now())", (MSGS,)),
    ("pgmq.send_batch_topic(routing_key => 'logs.error', msgs => %s, headers => %s, delay => 0)", (MSGS, HDRS)),
    ("pgmq.send_batch_topic(routing_key => 'logs.error', msgs => %s, headers => %s, delay => now())", (MSGS, HDRS)),
])
def test_send_batch_topic_overloads(routed, call, params):
    cur = routed.execute(f"SELECT * FROM {call}", params)
    assert [d.name for d in cur.description] == ["queue_name", "msg_id"]
    assert cur.fetchall() == [("all_logs", 1), ("all_logs", 2), ("errors", 1), ("errors", 2)]


def test_send_batch_topic_validation(routed):
    with raises_sql("P0001", "msgs cannot be NULL or empty"):
        routed.execute("SELECT * FROM pgmq.send_batch_topic('logs.error', ARRAY[]::jsonb[])")
    with raises_sql("P0001", "headers array length (1) must match msgs array length (2)"):
        routed.execute("SELECT * FROM pgmq.send_batch_topic('logs.error', ARRAY['{}','{}']::jsonb[], "
                       "ARRAY['{}']::jsonb[])")
    assert routed.execute("SELECT * FROM pgmq.send_batch_topic('no.match', ARRAY['{}']::jsonb[])").fetchall() == []
    assert counts(routed) == {"errors": 0, "all_logs": 0, "audit": 0}


def test_drop_queue_removes_its_bindings(routed):
    routed.execute("SELECT pgmq.drop_queue('all_logs')")
    assert column(routed, "SELECT DISTINCT queue_name FROM pgmq.topic_bindings ORDER BY 1") == ["audit", "errors"]
