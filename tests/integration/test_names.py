"""Names of queues, exchanges, streams and subscriptions (README: Errors; Security).

1. A NULL name: every public routine of the catalog, called with a NULL in each name argument
   (the others valid), answers 22004 before anything happens; upstream's routines answer what
   upstream does (UPSTREAM_NULL; tests/integration/test_fidelity.py compares them with upstream's
   own SQL). Walked from pg_proc, so a new routine is covered without a line here.
2. Control characters: no new name may hold one (42602), and queues made before 2.9.0 with one
   keep working.
"""

from __future__ import annotations

import re

import psycopg
import pytest

from pgmq_build.manifest import MANIFEST
from tests.helpers import column, raises_sql, scalar, send_n
from tests.hostile_names import HOSTILE, legacy_queues

# ----------------------------------------------------------------------------- 1. NULL names

# Arguments that name a queue, an exchange, a stream or a subscription...
NAME_ARGUMENTS = {
    "queue_name": "q1", "q_name": "q1", "source_queue": "q1", "table_name": "q1",
    "dead_letter_queue": "q2", "target_queue": "q2", "retry_queue": "q2", "queue_dlq": "q2", "new_dlq": "q2",
    "exchange_name": "x1", "e_name": "x1", "alternate_exchange": "x2",
    "stream_name": "s1", "subscription_name": "sub1",
    "after_queue": "q1",  # a bound of a page of queues (NULL: from the first)
}
# ...and arguments whose names look like it but that are something else.
NOT_NAMES = {"queue_retries", "queue_retry_delay", "queue_type", "role_name", "max_queues"}
LOOKS_LIKE_A_NAME = re.compile(r"name|queue|exchange|stream|subscription|dlq")

# Upstream's routines keep upstream's answer to a NULL name where it is not 22004 (None: the
# call succeeds). README, Differences from upstream: ours give 22004 where upstream's
# drop_queue, detach_archive, format_table_name and enable_notify_insert did not.
UPSTREAM_NULL = {
    ("acquire_queue_lock", "queue_name"): None,
    ("list_topic_bindings", "queue_name"): None,  # every binding
    ("bind_topic", "queue_name"): "P0001",  # queue_name cannot be NULL or empty
    ("unbind_topic", "queue_name"): "P0001",
    ("update_notify_insert", "queue_name"): "P0001",  # Queue "<NULL>" does not exist...
    ("validate_queue_name", "queue_name"): "42602",  # queue name cannot be NULL or empty (ours)
}

# The other arguments: by name, then by type.
TEXT_VALUES = {
    "routing_key": "'k'", "e_routing_key": "'k'", "binding_key": "'k'", "e_key": "'k'", "pattern": "'k'",
    "access": "'all'", "on_unroutable": "'notice'", "callback": "'public.names_cb(jsonb)'",
    "prefix": "'q'", "start": "'latest'", "e_type": "'direct'", "error": "'e'",
    "partition_interval": "'10000'", "retention_interval": "'100000'",
}
TYPE_VALUES = {
    "integer": "1", "bigint": "1", "double precision": "1", "boolean": "false", "jsonb": "'{}'",
    "jsonb[]": "ARRAY['{}'::jsonb]", "bigint[]": "ARRAY[1::bigint]", "text[]": "ARRAY['x']",
    "timestamp with time zone": "now()", "timestamp with time zone[]": "ARRAY[now()]", "interval": "'1 hour'", "xml": "'<a/>'",
    "anyelement": "'{}'::jsonb", "regtype": "'jsonb'", "character": "'N'",
    "oid": "current_user::text::regrole::oid",  # CALL takes no subquery
}

SETUP = (
    "SELECT pgmq.create('q1')", "SELECT pgmq.create('q2')", "SELECT pgmq.send('q1', '{}')",
    "SELECT pgmq.create_exchange('x1', 'direct')", "SELECT pgmq.create_exchange('x2', 'direct')",
    "SELECT pgmq.create_stream('s1')", "SELECT pgmq.subscribe('s1', 'sub1')",
    "CREATE PROCEDURE public.names_cb(m jsonb) LANGUAGE sql AS ''",
)

# The 16 routines of issue 30 that answered 42P01 `queue "" does not exist` in 2.8.0.
ISSUE_30 = {"set_retry_policy", "remove_retry_policy", "set_message_ttl", "set_dedup_window", "pause",
            "resume", "register_callback", "send_payload", "read_payload", "pop_payload", "payload_type",
            "insert_message", "insert_message_xml", "alter_queue", "bind_queue", "unbind_queue"}


def routines(conn: psycopg.Connection) -> list[tuple[str, str, bool, list[tuple[str, str, str | None]]]]:
    """Every public routine of schema pgmq: (name, kind, upstream's?, [(argument, type,
    default)])."""
    with conn.transaction():
        conn.execute("SET LOCAL search_path = pg_catalog")
        rows = conn.execute("""
            SELECT p.proname, p.prokind, pg_get_function_arguments(p.oid), pg_get_function_result(p.oid),
                   ARRAY(SELECT format_type(t, NULL) FROM unnest(p.proargtypes::oid[]) t),
                   coalesce(p.proargnames[1:p.pronargs], '{}'),
                   ARRAY(SELECT coalesce(pg_get_function_arg_default(p.oid, i), '')
                         FROM generate_series(1, p.pronargs) i)
            FROM pg_proc p
            WHERE p.pronamespace = 'pgmq'::regnamespace AND p.proname !~ '^_'
              AND p.prorettype <> 'trigger'::regtype
            ORDER BY 1, 3""").fetchall()
    out = []
    for name, kind, args, result, types, names, defaults in rows:
        upstream = kind == "f" and f"function  pgmq.{name}({args}) RETURNS {result}" in MANIFEST.contract
        out.append((name, kind, upstream, [(a, t, d or None) for a, t, d in zip(names, types, defaults, strict=True)]))
    return out


def value(arg: str, type_: str) -> str:
    if arg in NAME_ARGUMENTS:
        return f"'{NAME_ARGUMENTS[arg]}'"
    if arg == "role_name":
        return "current_user"
    if type_ == "text":
        assert arg in TEXT_VALUES, f"no value for text argument {arg!r}: add it to TEXT_VALUES"
        return TEXT_VALUES[arg]
    assert type_ in TYPE_VALUES, f"no value for type {type_!r} ({arg}): add it to TYPE_VALUES"
    return TYPE_VALUES[type_]


def outcome(conn: psycopg.Connection, sql: str) -> str | None:
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(sql)
    except psycopg.Error as exc:
        return exc.sqlstate
    return None


def test_every_routine_refuses_a_null_name_with_22004(conn):
    for s in SETUP:
        conn.execute(s)
    found, checked = [], set()
    for name, kind, upstream, args in routines(conn):
        for i, (arg, _type, default) in enumerate(args):
            if arg not in NAME_ARGUMENTS:
                assert arg in NOT_NAMES or not LOOKS_LIKE_A_NAME.search(arg), (
                    f"{name}({arg}): a name? add it to NAME_ARGUMENTS or NOT_NAMES")
                continue
            if default is not None and default.startswith("NULL"):
                continue  # NULL means "every queue" or "none"
            values = [f"NULL::{t}" if j == i else f"{value(a, t)}::{t}" for j, (a, t, _) in enumerate(args)]
            call = f"pgmq.{name}({', '.join(values)})"
            got = outcome(conn, f"CALL {call}" if kind == "p" else f"SELECT * FROM {call}")
            expected = UPSTREAM_NULL.get((name, arg), "22004") if upstream else "22004"
            checked.add(name)
            if got != expected:
                found.append(f"{'upstream' if upstream else 'ours'} {call}: {got or 'ok'}, expected {expected or 'ok'}")
    assert not found, "\n".join(found)
    assert ISSUE_30 <= checked and len(checked) > 90, sorted(checked)  # 96 routines in 2.9.0


def test_a_null_name_changes_nothing(conn):
    """Two routines that write before they look up anything else: nothing is made."""
    conn.execute("SELECT pgmq.create('q1')")
    conn.execute("SELECT pgmq.create_stream('s1')")
    with raises_sql("22004", "exchange name cannot be NULL"):
        conn.execute("SELECT pgmq.create_exchange(NULL)")
    with raises_sql("22004", "subscription name cannot be NULL"):
        conn.execute("SELECT pgmq.subscribe('s1', NULL)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.exchanges WHERE exchange_name IS NULL") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_subscriptions") == 0
    with raises_sql("22004", "queue name cannot be NULL"):
        conn.execute("SELECT pgmq.set_retry_policy(NULL, 3)")
    assert scalar(conn, "SELECT count(*) FROM pgmq.queue_settings WHERE retry_policy") == 0


# ----------------------------------------------------------------------- 2. control characters

CONTROL = [1, 9, 10, 13, 27, 31, 127, 128, 155, 159]  # C0 (not NUL: text cannot hold it), DEL, C1
PRINTABLE = [" ", "~", "\u00a0", "é", "\u202e"]  # the neighbours: accepted (views escape the last)


def _name(code: int) -> str:
    return f"a{chr(code)}b"


@pytest.mark.parametrize("code", CONTROL)
def test_a_new_name_with_a_control_character_is_refused(conn, code):
    """Every way a role names something an operator later sees: 42602, and nothing made."""
    name = _name(code)
    conn.execute("SELECT pgmq.create_stream('s1')")
    creators = [
        ("SELECT pgmq.create(%s)", "queue"), ("SELECT pgmq.create_unlogged(%s)", "queue"),
        ("SELECT pgmq.create_non_partitioned(%s)", "queue"), ("SELECT pgmq.create(%s, 'text'::regtype)", "queue"),
        ("SELECT pgmq.validate_queue_name(%s)", "queue"), ("CALL pgmq.create_queue(%s)", None),
        ("SELECT pgmq.create_stream(%s)", "queue"), ("SELECT pgmq.create_exchange(%s)", None),
        ("SELECT pgmq.subscribe('s1', %s)", "subscription"),
        ("SELECT pgmq.subscribe('s1', 'sub', retry_queue => %s)", "queue"),
    ]
    for sql, kind in creators:
        # pgpro_queue's create_queue and exchanges take letters, digits and '_' only (2.8.0 too)
        message = f"{kind} name cannot contain control characters" if kind else None
        with raises_sql("42602", message):
            conn.execute(sql, (name,))
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == []
    assert column(conn, "SELECT stream_name FROM pgmq.streams") == ["s1"]
    assert scalar(conn, "SELECT count(*) FROM pgmq.stream_subscriptions") == 0
    assert scalar(conn, "SELECT count(*) FROM pgmq.exchanges WHERE exchange_name <> 'pgmq.topic'") == 0
    assert scalar(conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgmq'::regnamespace "
                        "AND relname LIKE %s", (f"%{name}%",)) == 0


def test_create_partitioned_refuses_a_control_character(conn, partman):
    with raises_sql("42602", "queue name cannot contain control characters"):
        conn.execute("SELECT pgmq.create_partitioned(%s)", ("p\x1bq",))
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == []


@pytest.mark.parametrize("char", PRINTABLE)
def test_printable_neighbours_are_accepted(conn, char):
    name = f"a{char}b"
    conn.execute("SELECT pgmq.create(%s)", (name,))
    conn.execute("SELECT pgmq.create_stream('s1')")
    conn.execute("SELECT pgmq.subscribe('s1', %s)", (name,))
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == [name]


def test_queues_named_before_2_9_keep_working(conn):
    """Made by 2.8.0 (which accepted them) and upgraded: every queue path works, drop too."""
    names = list(HOSTILE.values())
    legacy_queues(conn, names)
    assert sorted(column(conn, "SELECT queue_name FROM pgmq.meta")) == sorted(names)
    for name in names:
        ids = send_n(conn, name, 4)
        assert len(column(conn, "SELECT msg_id FROM pgmq.read(%s, 30, 2)", (name,))) == 2
        assert scalar(conn, "SELECT pgmq.archive(%s, %s::bigint)", (name, ids[0])) is True
        assert scalar(conn, "SELECT pgmq.delete(%s, %s::bigint)", (name, ids[1])) is True
        assert len(column(conn, "SELECT msg_id FROM pgmq.pop(%s)", (name,))) == 1
        conn.execute("SELECT pgmq.set_retry_policy(%s, 3)", (name,))
        assert scalar(conn, "SELECT pgmq.pause(%s)", (name,)) is True
        assert scalar(conn, "SELECT pgmq.resume(%s)", (name,)) is True
        assert scalar(conn, "SELECT depth FROM pgmq.queue_metrics(%s)", (name,)) == 1
        assert scalar(conn, "SELECT queue_length FROM pgmq.metrics(%s)", (name,)) == 1
        assert scalar(conn, "SELECT pgmq.purge_queue(%s)", (name,)) == 1
    for name in (n for n in names if re.search("[\x01-\x1f\x7f-\x9f]", n)):
        with raises_sql("42602", "queue name cannot contain control characters"):  # not as a new name
            conn.execute("SELECT pgmq.create(%s)", (name,))
    for name in names:
        assert scalar(conn, "SELECT pgmq.drop_queue(%s)", (name,)) is True
    assert column(conn, "SELECT queue_name FROM pgmq.meta") == []
    assert scalar(conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'pgmq'::regnamespace "
                        "AND relname ~ '^[qa]_'") == 0
